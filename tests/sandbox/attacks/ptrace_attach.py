"""Attack: ``ptrace(PTRACE_ATTACH)`` the pool (or the pid given) through ctypes, in ``reset``, to read
its memory. Stopped by seccomp (``ptrace`` fails with EPERM)."""

import ctypes
import os

PTRACE_ATTACH = 16
PTRACE_DETACH = 17


class TracerEnv:
    def __init__(self, max_turns=5, target=0):
        self.target = target

    def reset(self, seed=None):
        target = self.target or os.getppid()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.restype = ctypes.c_long
        if libc.ptrace(PTRACE_ATTACH, target, None, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"ptrace(PTRACE_ATTACH, {target}) failed: {os.strerror(err)}")
        libc.ptrace(PTRACE_DETACH, target, None, None)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
