"""Attack: allocate memory without end in ``__init__``. Stopped by RLIMIT_AS (MemoryError), which
counts address space whether or not the pages are touched (so this bomb does not spend time filling
them)."""


class BombEnv:
    def __init__(self, max_turns=5, chunk_mb=64):
        self.hoard = []
        while True:
            self.hoard.append(bytes(chunk_mb << 20))

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
