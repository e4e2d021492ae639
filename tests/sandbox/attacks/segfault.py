"""Attack: crash the interpreter with a NULL read through ctypes in ``reset``. The worker dies of
SIGSEGV; the pool sees it die and answers ``crashed``."""

import ctypes


class SegfaultEnv:
    def reset(self, seed=None):
        ctypes.string_at(0)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
