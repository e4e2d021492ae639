"""Configuration of the sandbox: which isolation layers are required, limits, pool size."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

LAYERS = ("rlimits", "uid", "landlock", "seccomp", "bwrap")
LAYER_MODES = ("required", "optional", "off")
DEFAULT_LAYERS = {
    "rlimits": "required",
    "uid": "required",
    "landlock": "required",
    "seccomp": "required",
    "bwrap": "off",
}

# Modules imported by every worker before it hardens itself. After the drop to an unprivileged uid
# the interpreter may no longer be able to read its own standard library (a Python under /root, for
# example), so whatever environments may import must already be in memory. This list is what an
# environment may need, not a security boundary: the OS layers are the boundary.
DEFAULT_PRELOAD = (
    "abc",
    "array",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "collections",
    "collections.abc",
    "colorsys",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "html",
    "io",
    "itertools",
    "json",
    "math",
    "numbers",
    "operator",
    "pprint",
    "random",
    "re",
    "statistics",
    "string",
    "struct",
    "textwrap",
    "time",
    "types",
    "typing",
    "unicodedata",
    "uuid",
    "warnings",
    "zlib",
)


@dataclass(frozen=True)
class SandboxConfig:
    """How environment code is isolated and how the pool of workers behaves.

    ``layers`` maps each isolation layer to ``required`` (refuse to run code without it),
    ``optional`` (use it where the machine has it) or ``off``. The ``uid`` layer only applies to a
    pool started as root: an ordinary user has no uid to drop, and the layer counts as satisfied.
    """

    layers: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_LAYERS))
    pool_size: int = 2  # workers kept warm
    max_workers: int = 64  # hard cap on live workers
    episodes_per_worker: int = 256  # recycle a worker after this many environment instances
    call_timeout_s: float = 5.0  # deadline of one reset/step/solution call
    load_timeout_s: float = 10.0  # deadline of loading source and instantiating
    start_timeout_s: float = 20.0  # deadline for a new worker to harden itself and say ready
    max_message_bytes: int = 4 << 20  # largest answer accepted from a worker
    max_captured_output: int = 16 << 10  # printed output kept per call (the rest is dropped)
    memory_bytes: int = 1 << 30  # RLIMIT_AS of a worker
    cpu_seconds: int = 600  # RLIMIT_CPU of a worker over its whole life (calls have deadlines too)
    open_files: int = 64  # RLIMIT_NOFILE
    unprivileged_uid: int = 65534  # uid/gid a worker started as root drops to ("nobody")
    unprivileged_gid: int = 65534
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    recursion_limit: int = 2000
    # A worker started by root whose interpreter lies in a folder its uid cannot enter (Python under a
    # 0700 /root) reads the interpreter through a read-only view of it (``spade_rl.sandbox.view``).
    interpreter_view: bool = True
    # Both sides poll without sleeping this long before blocking, which halves the latency of a
    # trivial call (waking a sleeping process costs tens of microseconds). 0 turns it off.
    spin_us: int = 200

    def __post_init__(self) -> None:
        unknown = set(self.layers) - set(LAYERS)
        if unknown:
            raise ValueError(f"unknown sandbox layer(s) {sorted(unknown)}; allowed: {list(LAYERS)}")
        for name, mode in self.layers.items():
            if mode not in LAYER_MODES:
                raise ValueError(f"sandbox layer {name!r} has mode {mode!r}; allowed: {list(LAYER_MODES)}")
        # Layers the caller did not mention keep their defaults (never silently "off").
        object.__setattr__(self, "layers", {**DEFAULT_LAYERS, **self.layers})
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", "float") and (value < 0 or (value == 0 and f.name != "spin_us")):
                allowed = "zero or more" if f.name == "spin_us" else "positive"
                raise ValueError(f"sandbox setting {f.name} must be {allowed}, got {value!r}")
        if self.pool_size > self.max_workers:
            raise ValueError(f"pool_size ({self.pool_size}) cannot exceed max_workers ({self.max_workers})")

    def mode(self, layer: str) -> str:
        return self.layers.get(layer, "off")
