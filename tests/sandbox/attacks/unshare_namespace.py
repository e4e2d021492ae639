"""Attack: ``unshare`` new user, mount and network namespaces through ctypes, in ``step`` (a user
namespace grants every capability inside it). Stopped by seccomp (``unshare`` fails with EPERM)."""

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


class NamespaceEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare failed: {os.strerror(err)}")
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
