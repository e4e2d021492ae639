"""Attack: create a System V shared memory segment of 1 GiB, in ``__init__``: it outlives the
worker (nothing removes it when the process dies) and holds the host's memory. Stopped by seccomp's
allow-list, which has no ``shmget`` (nor semaphores or message queues)."""

import ctypes

IPC_PRIVATE, IPC_CREAT = 0, 0o1000


class ShmEnv:
    def __init__(self, max_turns=5):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmget.restype = ctypes.c_int
        segment = libc.shmget(IPC_PRIVATE, ctypes.c_size_t(1 << 30), IPC_CREAT | 0o666)
        if segment < 0:
            raise PermissionError(ctypes.get_errno(), "shmget refused")
        self.segment = segment

    def reset(self, seed=None):
        return f"Segment {self.segment} left behind. Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
