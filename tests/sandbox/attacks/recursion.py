"""Attack: unbounded recursion in ``step``. Stopped by the recursion limit (RecursionError)."""


def dive(depth):
    return dive(depth + 1) + 1


class RecursionEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", float(dive(0)), True, False, {}

    def solution(self):
        return "anything"
