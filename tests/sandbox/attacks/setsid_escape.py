"""Attack: leave the worker's session and process group (``setsid``) in ``__init__``, so that a kill of
the group would miss it. Stopped by seccomp (``setsid`` fails with EPERM)."""

import os


class SessionEnv:
    def __init__(self, max_turns=5):
        os.setsid()

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
