"""Attack: set up an io_uring (a second way to open, read, write and connect that bypasses per-call
system-call filters), through ctypes in ``__init__``. Stopped by seccomp (``io_uring_setup`` fails
with EPERM)."""

import ctypes
import os

SYS_IO_URING_SETUP = 425  # the same number on every architecture


class UringEnv:
    def __init__(self, max_turns=5):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
        fd = libc.syscall(ctypes.c_long(SYS_IO_URING_SETUP), 8, params)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"io_uring_setup failed: {os.strerror(err)}")

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
