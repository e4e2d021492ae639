"""Attack: lift the recursion limit and recurse through C (``map`` calls back into Python) until the
C stack overflows, in ``reset``. The worker dies of SIGSEGV; the pool answers ``crashed``."""

import sys


def dive(depth):
    return list(map(dive, [depth + 1]))


class StackEnv:
    def reset(self, seed=None):
        sys.setrecursionlimit(10**6)
        dive(0)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
