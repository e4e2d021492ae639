"""Attack: make the ``socket`` system call through the x32 ABI (number | 0x40000000), which a filter
that only matches x86_64 numbers would let through. Stopped by seccomp, which kills a process that
uses a foreign system-call ABI (SIGSYS). x86_64 only."""

import ctypes
import os
import platform

X32_SYSCALL_BIT = 0x40000000
SYS_SOCKET = 41


class X32Env:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        if platform.machine() != "x86_64":
            raise NotImplementedError("this attack is written for x86_64")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        fd = libc.syscall(ctypes.c_long(X32_SYSCALL_BIT | SYS_SOCKET), 2, 1, 0)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"x32 socket() failed: {os.strerror(err)}")
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
