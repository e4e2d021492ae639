"""How a sandbox worker is launched: its command line, its settings, the optional bubblewrap prefix,
and which parts of the Python installation a worker dropped to an unprivileged uid cannot read.

``spade_rl.sandbox.pool`` starts workers with ``worker_command``; ``spade_rl.sandbox.doctor`` uses
``bwrap_command`` and ``unreachable_interpreter`` to explain what is missing on a machine.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import sys
from pathlib import Path

from spade_rl.sandbox.config import SandboxConfig
from spade_rl.sandbox.results import SandboxUnavailable

log = logging.getLogger(__name__)

# The folder that holds the spade_rl package (bound again under bubblewrap, put first on the worker's path).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bwrap_prefix(config: SandboxConfig) -> list[str]:
    """The bubblewrap prefix the configuration asks for, or [] when the layer is off or (optional and)
    unavailable. Raises ``SandboxUnavailable`` when it is required and unavailable."""
    mode = config.mode("bwrap")
    if mode == "off":
        return []
    from spade_rl.sandbox.doctor import bwrap_status

    ok, detail = bwrap_status()
    if not ok:
        if mode == "required":
            raise SandboxUnavailable(f"the required sandbox layer 'bwrap' is unavailable: {detail}")
        log.info("bubblewrap layer skipped: %s", detail)
        return []
    return bwrap_command(config)


def worker_settings(config: SandboxConfig, under_bwrap: bool) -> dict:
    """The settings a worker reads from its command line (``spade_rl.sandbox.worker.main``)."""
    c = config
    return {
        "layers": c.layers,
        "memory_bytes": c.memory_bytes,
        "cpu_seconds": c.cpu_seconds,
        "open_files": c.open_files,
        "uid": c.unprivileged_uid,
        "gid": c.unprivileged_gid,
        "parent_pid": None if under_bwrap else os.getpid(),
        "preload": list(c.preload),
        "recursion_limit": c.recursion_limit,
        "max_message_bytes": c.max_message_bytes,
        "max_captured_output": c.max_captured_output,
        "spin_us": c.spin_us,
        "interpreter_view": c.interpreter_view,
    }


def worker_command(bwrap: list[str], config: SandboxConfig) -> list[str]:
    """The command line of one worker: an isolated interpreter (``-I``) that imports only the worker."""
    bootstrap = (
        f"import sys; sys.path.insert(0, {_PACKAGE_PARENT!r}); "
        "from spade_rl.sandbox.worker import main; main()"
    )
    settings = worker_settings(config, under_bwrap=bool(bwrap))
    return [*bwrap, sys.executable, "-I", "-c", bootstrap, json.dumps(settings)]


def bwrap_command(config: SandboxConfig | None = None) -> list[str]:
    """The bubblewrap prefix: new namespaces (no network), read-only root, private /tmp and /proc.

    As root, no user namespace is made (inside one, uid 65534 would map back to root outside);
    bwrap keeps only CAP_SETUID/CAP_SETGID, which the worker's own uid drop then clears. As an
    ordinary user, bwrap makes a user namespace and the worker has nothing to drop. The package and
    the interpreter are bound again after the private /tmp, in case they live under /tmp. As root, a
    folder above the interpreter that the worker's future uid cannot enter (``/root``, mode 0700) is
    replaced by a read-only view holding only the interpreter (``spade_rl.sandbox.view``), unless
    ``config.interpreter_view`` is off."""
    path = shutil.which("bwrap") or "bwrap"
    if os.geteuid() == 0:
        namespaces = [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
        caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        namespaces = ["--unshare-all"]
        caps = ["--cap-drop", "ALL"]
    keep = sorted(
        {_PACKAGE_PARENT, sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    )
    rebinds = [arg for p in keep if p.startswith("/tmp") for arg in ("--ro-bind", p, p)]
    view: list[str] = []
    config = config or SandboxConfig()
    if os.geteuid() == 0 and config.interpreter_view and config.mode("uid") != "off":
        from spade_rl.sandbox.hardening import read_only_paths
        from spade_rl.sandbox.view import bwrap_view_args

        view = bwrap_view_args(read_only_paths(), config.unprivileged_uid, config.unprivileged_gid)
    return [
        path,
        "--die-with-parent",
        *namespaces,
        *caps,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        *rebinds,
        *view,
        "--",
    ]


def unreachable(path: str, uid: int, gid: int) -> str:
    """Why ``uid`` (with group ``gid`` and no others) cannot read ``path``, or '' when it can: every
    folder above it must let it enter, the path itself let it read (and enter, for a folder)."""
    try:
        real = Path(os.path.realpath(path))
        chain = [*reversed(real.parents), real]
        for place in chain:
            st = place.stat()
            shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
            bits = (st.st_mode >> shift) & 0o7
            is_dir = stat.S_ISDIR(st.st_mode)
            need = 0o1 if place != real else (0o5 if is_dir else 0o4)
            if bits & need != need:
                fix = f"chmod o+x {place}" if place != real or is_dir else f"chmod o+r {place}"
                return (
                    f"{place} is mode {stat.filemode(st.st_mode)}, owned by uid {st.st_uid}: uid {uid} "
                    f"cannot {'enter' if need == 0o1 else 'read'} it (run `{fix}`, or use a Python "
                    f"installed where uid {uid} can read it, or add the module to sandbox preload)"
                )
    except OSError as exc:
        return f"{path}: {exc}"
    return ""


def unreachable_interpreter(uid: int, gid: int) -> list[str]:
    """What of the interpreter, its packages and spade_rl a worker dropped to ``uid`` cannot read: the
    modules there can be imported only if a worker loads them before the drop (``preload``)."""
    from spade_rl.sandbox.hardening import read_only_paths

    found = []
    for path in read_only_paths():
        if path.startswith(("/usr/", "/lib")):
            continue  # system folders: readable by everyone
        why = unreachable(path, uid, gid)
        if why and why not in found:
            found.append(why)
    return found
