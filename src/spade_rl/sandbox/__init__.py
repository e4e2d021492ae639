"""Run untrusted environment code: hardened, killable worker processes.

What it protects against (each has a test in ``tests/sandbox/test_attacks.py``): code that loops
forever or ignores SIGTERM/SIGXCPU (deadlines, then SIGKILL of the process group; RLIMIT_CPU as a
backstop); exhausts memory (RLIMIT_AS); starts processes or threads, fork bombs, double-fork daemons,
``subprocess``, ``os.system`` and ``ctypes`` calls into libc (seccomp denies fork/clone/exec);
writes files anywhere or reads files outside the interpreter, such as ``/etc/passwd`` or the pool's
environment through ``/proc`` (Landlock; the worker also starts with an empty environment and, under
root, drops to an unprivileged uid); opens sockets (seccomp; Landlock denies TCP); signals or traces
other processes, the pool included (seccomp, Landlock scoping); floods output or returns huge or
non-JSON values (capped frames, typed results); crashes the interpreter (the pool sees the worker
die); lies about its types by patching builtins (the pool checks everything it receives, after
JSON decoding, in its own process).

What it does not protect against: kernel exploits (a kernel bug defeats Landlock and seccomp;
enable the optional bubblewrap layer, or run the whole trainer in a VM, for defence in depth);
side channels and CPU contention (a worker can use its cores until its deadline); reading files
that lie inside the Python installation or system library folders (read-only, nothing secret should
be there); an environment that behaves differently under validation and play (that is a question of
its rewards, not of isolation); several episodes of the *same* source share a worker and can see
each other's state (they are the same code). On a kernel without Landlock or seccomp the pool
refuses to run by default (fail closed): see ``spade-rl doctor``.
"""

from spade_rl.sandbox.config import LAYER_MODES, LAYERS, SandboxConfig
from spade_rl.sandbox.pool import (
    CallResult,
    EnvHandle,
    PoolExhausted,
    SandboxPool,
    SandboxUnavailable,
    Status,
)

__all__ = [
    "LAYERS",
    "LAYER_MODES",
    "CallResult",
    "EnvHandle",
    "PoolExhausted",
    "SandboxConfig",
    "SandboxPool",
    "SandboxUnavailable",
    "Status",
]
