"""Attack: ``fork(2)`` through ctypes in ``reset``; the child would write a file. Stopped by seccomp:
fork returns -1 (EPERM), raised here as an OSError."""

import ctypes
import os


class LibcForkEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-libc-fork"):
        self.target = target

    def reset(self, seed=None):
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.fork()
        if pid < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"libc fork() failed: {os.strerror(err)}")
        if pid == 0:
            with open(self.target, "w") as f:
                f.write("pwned")
            libc._exit(0)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
