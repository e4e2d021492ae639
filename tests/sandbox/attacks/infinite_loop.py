"""Attack: loop forever inside ``step``. Stopped by the call deadline (the pool kills the worker)."""


class LoopEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        while True:
            pass

    def solution(self):
        return "anything"
