"""The pool's side of one sandbox worker process: start it, wait for its hello, kill it, read its CPU time.

A worker is started in a process group of its own with nothing of the parent's environment, with
the parent-death signal set before its interpreter starts (``dies_with_owner``), and killed as a
whole group (SIGKILL, then reaped). Its hello reports the isolation layers it applied;
a worker whose required layers are missing is killed and ``SandboxUnavailable`` raised. What runs
inside the worker is ``spade_rl.sandbox.worker``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spade_rl.sandbox import protocol
from spade_rl.sandbox.config import SandboxConfig
from spade_rl.sandbox.launch import worker_command
from spade_rl.sandbox.results import CallResult, SandboxUnavailable, Status

log = logging.getLogger(__name__)

_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


@dataclass(eq=False)
class Worker:
    proc: subprocess.Popen
    to_fd: int
    from_fd: int
    started: float
    reader: protocol.FrameReader | None = None
    ready: bool = False
    pid: int = 0
    layers: list[dict] = field(default_factory=list)
    view: dict = field(default_factory=dict)  # the worker's report on its view of the interpreter
    source_hash: str | None = None  # the source this worker is bound to (set when placed)
    loaded: bool = False  # the worker has loaded that source
    class_name: str = ""
    live: set[int] = field(default_factory=set)
    created: int = 0
    tainted: bool = False
    dead: bool = False
    death: str = ""
    # CPU accounting (see spade_rl.sandbox.exchange.idle_failure): at the last check, the worker's CPU
    # seconds and the time; since then, the wall time its calls took and how many there were.
    cpu_at: float = 0.0
    checked_at: float = 0.0
    busy_s: float = 0.0
    calls: int = 0


def dies_with_owner(owner: int) -> Callable[[], None]:
    """What the forked child runs before it becomes the worker (``preexec_fn``): the parent-death
    signal (SIGKILL) is set from then on, across the exec, so that a worker dies with its owner on
    every path, SIGKILL of the owner included, even while its interpreter is still starting (set only
    by the worker itself after its uid drop, it left a worker started just before its owner was
    killed running until then: seconds, while it imported its preloads). An owner already gone by
    then (the child was reparented) makes it exit at once. (The worker sets the signal again after
    its uid drop, which clears it.) Only what is bound here runs in the child: no import, no
    allocation that could wait on a lock another thread of the owner held when it forked."""
    prctl, kill = _LIBC.prctl, int(signal.SIGKILL)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != owner:
            os._exit(1)

    return preexec


def spawn(config: SandboxConfig, bwrap: list[str]) -> Worker:
    """Start one worker (under the ``bwrap`` prefix, if any); its hello is awaited by ``await_ready``."""
    proc = subprocess.Popen(
        worker_command(bwrap, config),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # nothing of the parent's environment
        start_new_session=True,  # its own process group, killed as a whole
        close_fds=True,
        preexec_fn=dies_with_owner(os.getpid()),
    )
    worker = Worker(proc, proc.stdin.fileno(), proc.stdout.fileno(), time.monotonic())
    os.set_blocking(worker.to_fd, False)  # requests are written with a deadline (see exchange.send)
    worker.reader = protocol.FrameReader(worker.from_fd, config.max_message_bytes)
    return worker


def await_ready(worker: Worker, config: SandboxConfig) -> None:
    """Read the worker's hello and check its layers; a worker that fails to start, or lacks a required
    layer, is killed and ``SandboxUnavailable`` raised."""
    if worker.ready or worker.dead:
        return
    deadline = worker.started + config.start_timeout_s
    try:
        hello = worker.reader.read(deadline)
    except (protocol.Deadline, protocol.PeerClosed, protocol.FrameTooLarge, ValueError) as exc:
        kill(worker)
        raise SandboxUnavailable(f"a sandbox worker failed to start: {type(exc).__name__} {exc}") from None
    worker.layers = hello.get("layers", [])
    worker.view = hello.get("view") or {}
    worker.pid = hello.get("pid", 0)
    missing = [
        f"{r['name']} ({r['detail']})"
        for r in worker.layers
        if config.mode(r["name"]) == "required" and not (r["active"] or r["not_needed"])
    ]
    if hello.get("error"):
        kill(worker)
        raise SandboxUnavailable(f"a sandbox worker failed to start:\n{hello['error']}")
    if missing or not hello.get("ready"):
        kill(worker)
        raise SandboxUnavailable(
            "refusing to run generated code: required sandbox layer(s) unavailable: "
            + "; ".join(missing or ["worker refused"])
            + ". Run `spade-rl doctor` for details, or set the layer to 'optional' or 'off' in the "
            "sandbox configuration if you accept the risk."
        )
    worker.ready = True


def kill(worker: Worker) -> None:
    """Kill the worker's whole process group and reap it."""
    worker.dead = True
    try:
        os.killpg(worker.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (worker.proc.stdin, worker.proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
    try:
        worker.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("sandbox worker %s did not die after SIGKILL", worker.proc.pid)


def exit_text(worker: Worker) -> str:
    """How the worker ended, in words (its exit status or the signal that killed it)."""
    try:
        code = worker.proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return "the worker closed its pipe"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return f"the worker was killed by {name}"
    return f"the worker exited with status {code}"


def lost(worker: Worker) -> CallResult:
    """The result of a call on an episode whose worker was killed."""
    return CallResult(
        Status.WORKER_LOST,
        None,
        "worker_lost",
        f"the worker holding this episode was killed ({worker.death})",
    )


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of a process, from ``/proc``; None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK
