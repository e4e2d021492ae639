"""Attack: a TCP connection made with the raw ``socket`` system call (``syscall(2)`` through ctypes,
past the socket module) and libc ``connect``, in ``step``. Stopped by seccomp (``socket`` fails with
EPERM) and Landlock (no TCP connect)."""

import ctypes
import os
import platform
import socket
import struct

SYS_SOCKET = {"x86_64": 41, "aarch64": 198}


class RawSocketEnv:
    def __init__(self, max_turns=5, port=9):
        self.port = port

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        number = SYS_SOCKET.get(platform.machine(), 41)
        fd = libc.syscall(ctypes.c_long(number), socket.AF_INET, socket.SOCK_STREAM, 0)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syscall(SYS_socket) failed: {os.strerror(err)}")
        address = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(self.port), bytes([127, 0, 0, 1]))
        if libc.connect(int(fd), address, len(address)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"libc connect() failed: {os.strerror(err)}")
        libc.write(int(fd), b"pwned", 5)
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
