"""Attack: watch a directory with inotify, in ``__init__`` (to learn when the trainer writes its
checkpoints, say). Stopped by seccomp's allow-list, which has no ``inotify_init1`` (nor
``fanotify_init`` or ``fcntl(F_NOTIFY)``)."""

import ctypes


class WatchEnv:
    def __init__(self, max_turns=5):
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(0)
        if fd < 0:
            raise PermissionError(ctypes.get_errno(), "inotify_init1 refused")
        self.fd = fd

    def reset(self, seed=None):
        return "Watching. Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
