"""Run untrusted environment code: hardened, killable worker processes.

What it protects against (each has a test in ``tests/sandbox/test_attacks.py``, one hostile
environment per file in ``tests/sandbox/attacks/``):

- code that loops forever or ignores SIGTERM/SIGXCPU (deadlines, then SIGKILL of the process group;
  RLIMIT_CPU as a backstop) or exhausts memory (RLIMIT_AS);
- processes and threads: fork bombs, double-fork daemons, ``subprocess``, ``os.system``, ``ctypes``
  calls into libc (the seccomp allow-list has no fork/clone/exec); a worker cannot outlive its pool,
  whatever it does to its process attributes (the parent-death signal is set before the filter, which
  has no ``prctl``; no ``setsid``/``setpgid``), and uses no CPU between calls (no timers, no threads;
  a worker whose code rewrote its own loop to busy-wait is found by the pool's CPU accounting and
  killed when it is next sent a call);
- files: writes anywhere, reads outside the interpreter (``/etc/passwd``, the pool's environment
  through ``/proc``), changes of modes, times or extended attributes, directory watches (Landlock;
  seccomp allows no write-mode ``open``, no ``chmod``/``utime``/xattr/inotify; the worker starts with an
  empty environment and, under root, drops to an unprivileged uid);
- other processes: sockets (seccomp; Landlock denies TCP), signals and traces (seccomp, Landlock
  scoping), their scheduling priority or CPU affinity (no ``setpriority``/``sched_setaffinity``),
  System V shared memory, semaphores or queues that would outlive the worker;
- the trusted side: every answer crosses one checked boundary (``protocol.decode``): a bounded frame,
  at most ``MAX_OBJECTS`` values counted before anything is built, 64 levels, integers within
  ±2**63, text made valid UTF-8; floods of output; crashes of the interpreter (the pool sees the
  worker die); lies about types by patched builtins (checked again in the pool's process); forged
  answers or reason codes (the pool takes a reason code only from a failed load);
- the other episodes of a batch: every worker is read as its data arrives and judged against its own
  deadline, after what already arrived is read, so that one stalling worker delays nobody else (the
  rollout's per-episode time budget cuts one that is slow at every step).

What it does not protect against: kernel exploits (a kernel bug defeats Landlock and seccomp; enable
the optional bubblewrap layer, or run the whole trainer in a VM, for defence in depth); side
channels and CPU contention during a call (a worker can use its core until its deadline; a
busy-waiting worker is found at most a second late, and not at all under bubblewrap, whose pid
namespace hides its CPU time: there ``SandboxConfig.cpu_seconds`` is the bound); reading files that
lie inside the Python installation or system library folders (read-only, nothing secret should be
there); several episodes of the *same* source share a worker and can see each other's state (they
are the same code). Whether an environment is honest (the same at every seed, for every instance,
for malformed actions) is the validator's question, not isolation's: see
``spade_rl.design.validate``. Where the Python installation lies out of the sandbox user's reach
(under a 0700 ``/root``), a worker started by root can import only what it preloaded
(``SandboxConfig.preload``); the pool's error and ``spade-rl doctor`` name the folder and the change
that fixes it. On a kernel without Landlock or seccomp the pool refuses to run by default (fail
closed): see ``spade-rl doctor``.
"""

from spade_rl.sandbox.config import LAYER_MODES, LAYERS, SandboxConfig
from spade_rl.sandbox.handle import EnvHandle
from spade_rl.sandbox.pool import Sandbox
from spade_rl.sandbox.results import CallResult, SandboxFull, SandboxUnavailable, Status

__all__ = [
    "LAYERS",
    "LAYER_MODES",
    "CallResult",
    "EnvHandle",
    "Sandbox",
    "SandboxConfig",
    "SandboxFull",
    "SandboxUnavailable",
    "Status",
]

# Names of earlier releases ("pool" now means only the training pool of environments; the glossary in
# docs/architecture.md).
_RENAMED = {"SandboxPool": "Sandbox", "PoolExhausted": "SandboxFull"}


def __getattr__(name: str):
    if name in _RENAMED:
        import warnings

        new = _RENAMED[name]
        warnings.warn(
            f"spade_rl.sandbox.{name} is deprecated: it is called {new} now (the old name works until the "
            "next release)",
            FutureWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module 'spade_rl.sandbox' has no attribute {name!r}")
