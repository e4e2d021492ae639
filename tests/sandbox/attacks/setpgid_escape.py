"""Attack: move into a new process group (``setpgid(0, 0)``) in ``reset``, so that a kill of the
worker's group would miss it. Stopped by seccomp (``setpgid`` fails with EPERM)."""

import os


class GroupEnv:
    def reset(self, seed=None):
        os.setpgid(0, 0)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
