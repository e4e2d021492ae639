"""What isolation this machine offers, and a live self-check of the sandbox.

``layer_table`` says, for each layer, whether the machine has it, whether a real worker applied it,
and the configured mode. ``self_check`` starts a sandbox with the given configuration and runs a few
hostile environments (``PROBES``) through it: each must be stopped, and the host must see no effect.
Used by ``spade-rl doctor``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
import time
from dataclasses import dataclass, replace

from spade_rl.sandbox import landlock, seccomp_filter
from spade_rl.sandbox.config import LAYERS, SandboxConfig
from spade_rl.sandbox.launch import bwrap_command, unreachable_interpreter
from spade_rl.sandbox.pool import Sandbox
from spade_rl.sandbox.results import SandboxUnavailable, Status


@dataclass(frozen=True)
class LayerRow:
    layer: str
    mode: str  # required / optional / off
    available: bool
    active: bool  # applied by a real worker just now
    detail: str


def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap is installed and can start a sandbox here."""
    if shutil.which("bwrap") is None:
        return False, "bwrap is not installed (Debian package bubblewrap)"
    try:
        done = subprocess.run([*bwrap_command(), "/bin/true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap did not run: {exc}"
    if done.returncode != 0:
        return False, "bwrap failed: " + done.stderr.decode(errors="replace").strip()[:200]
    return True, "bwrap starts new namespaces"


def _available() -> dict[str, tuple[bool, str]]:
    ll = landlock.probe()
    root = os.geteuid() == 0
    return {
        "rlimits": (True, "setrlimit"),
        "uid": (True, "root: can drop to an unprivileged uid" if root else "not needed: not root"),
        "landlock": (ll.available, ll.detail),
        "seccomp": seccomp_filter.available(),
        "bwrap": bwrap_status(),
    }


def layer_table(config: SandboxConfig) -> tuple[list[LayerRow], str]:
    """One row per layer, plus an error text when the configured sandbox would refuse to start."""
    available = _available()
    # Ask a real worker what it applied, with every layer "optional" so that it always answers.
    probe_config = replace(
        config,
        layers={n: ("off" if m == "off" else "optional") for n, m in config.layers.items()},
        pool_size=1,
    )
    active: dict[str, tuple[bool, str]] = {}
    try:
        with Sandbox(probe_config) as sandbox:
            for report in sandbox.layer_reports():
                active[report["name"]] = (report["active"] or report["not_needed"], report["detail"])
            if sandbox.under_bwrap:
                active["bwrap"] = (True, "workers start inside bwrap")
    except SandboxUnavailable as exc:
        return [], str(exc)
    rows = []
    for name in LAYERS:
        ok, detail = available[name]
        is_active, active_detail = active.get(name, (False, "off in the configuration"))
        rows.append(LayerRow(name, config.mode(name), ok, is_active, active_detail if is_active else detail))
    refused = [r.layer for r in rows if r.mode == "required" and not r.active]
    error = f"required layer(s) not active: {', '.join(refused)}" if refused else ""
    return rows, error


def interpreter_view(config: SandboxConfig) -> dict:
    """How a real worker reads the interpreter: its view report (``spade_rl.sandbox.view``); empty when
    the sandbox does not start."""
    probe_config = replace(
        config,
        layers={n: ("off" if m == "off" else "optional") for n, m in config.layers.items()},
        pool_size=1,
    )
    try:
        with Sandbox(probe_config) as sandbox:
            return dict(sandbox.view)
    except SandboxUnavailable:
        return {}


def sandbox_user_access(config: SandboxConfig) -> list[str]:
    """Where this Python's modules lie out of reach of the uid a root-started worker drops to (empty
    when nothing is, or when no uid is dropped): environments can then import only what the workers
    preload (``sandbox.preload``), and each such folder is named with the change that fixes it."""
    if os.geteuid() != 0 or config.mode("uid") == "off":
        return []
    return unreachable_interpreter(config.unprivileged_uid, config.unprivileged_gid)


# Hostile environments for the self-check. Each tries one thing from its constructor and returns
# what happened as the first observation; the check also looks at the host side.
_PROBE_TEMPLATE = """
class ProbeEnv:
    def __init__(self, max_turns=1):
        self.result = "{{no result}}"
        try:
{body}
        except BaseException as exc:
            self.result = "blocked: " + type(exc).__name__
    def reset(self, seed=None):
        return str(self.result), {{}}
    def step(self, action):
        return "done", 0.0, True, False, {{}}
    def solution(self):
        return "x"
"""

PROBE_MODULES = ("os", "socket", "signal", "subprocess", "ctypes", "threading")

PROBES = {
    "write a file": "open({path!r}, 'w').write('x')\nself.result = 'wrote'",
    "read /etc/passwd": "self.result = 'read: ' + open('/etc/passwd').read()[:20]",
    "start a process": (
        "import os\nrc = os.system('touch {path}')\n"
        "self.result = 'ran' if rc == 0 else 'blocked: os.system returned %d' % rc"
    ),
    "fork": "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nself.result = 'forked'",
    "open a socket": "import socket\nsocket.socket()\nself.result = 'socket'",
    "kill the parent": "import os\nos.kill(os.getppid(), 0)\nself.result = 'signalled'",
    "read the parent's environment": (
        "import os\nself.result = 'read: ' + open('/proc/%d/environ' % os.getppid()).read()[:20]"
    ),
    "loop forever": "while True:\n    pass",
}


@dataclass(frozen=True)
class ProbeResult:
    name: str
    stopped: bool
    detail: str


def self_check(config: SandboxConfig, timeout_s: float = 2.0) -> list[ProbeResult]:
    """Run every probe through a sandbox; raises ``SandboxUnavailable`` if the sandbox refuses to start."""
    results = []
    with tempfile.TemporaryDirectory(prefix="spade-doctor-") as scratch:
        os.chmod(scratch, 0o777)  # so that only the sandbox, not file permissions, stops the write
        # The probes' modules are imported before hardening, so that the layers, not a failed
        # import, are what stops them.
        probe_config = replace(
            config,
            call_timeout_s=timeout_s,
            load_timeout_s=timeout_s,
            preload=(*config.preload, *PROBE_MODULES),
        )
        with Sandbox(probe_config) as sandbox:
            for name, body in PROBES.items():
                target = os.path.join(scratch, name.replace(" ", "_"))
                source = _PROBE_TEMPLATE.format(body=textwrap.indent(body.format(path=target), " " * 12))
                started = time.perf_counter()
                opened = sandbox.open(source)
                observation = ""
                if opened.ok:
                    first = opened.value.reset(0)
                    observation = str(first.value[0]) if first.ok else first.reason
                    opened.value.close()
                outcome = observation if opened.ok else opened.reason
                leaked = os.path.exists(target) or observation.startswith(
                    ("read:", "wrote", "ran", "forked", "socket", "signalled")
                )
                stopped = not leaked and (
                    observation.startswith("blocked") or opened.status in (Status.TIMEOUT, Status.CRASHED)
                )
                elapsed = time.perf_counter() - started
                results.append(ProbeResult(name, stopped, f"{outcome} ({elapsed:.2f} s)"))
    return results
