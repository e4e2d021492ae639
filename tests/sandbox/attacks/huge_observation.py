"""Attack: answer ``step`` with a 200 MB observation. Stopped by the frame cap (max_message_bytes):
the worker refuses to send it, and the pool would refuse to read it."""


class HugeEnv:
    def __init__(self, max_turns=5, size=200_000_000):
        self.size = size

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "x" * self.size, 1.0, True, False, {}

    def solution(self):
        return "anything"
