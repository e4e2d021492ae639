"""Attack: an answer of millions of tiny values (``[[], [], ...]``), in ``reset``: three bytes of
frame per value became about sixty bytes of Python objects in the host (47 MB of frames, 1.2 GB).
Stopped at the protocol boundary, which counts the values in the bytes before building any, and
by the frame cap."""


class FloodEnv:
    def __init__(self, max_turns=5, count=2_000_000):
        self.count = count

    def reset(self, seed=None):
        return "Say anything.", {"flood": [[]] * self.count}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
