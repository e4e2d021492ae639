"""Attack: read the pool's environment through /proc/<ppid>/environ and return it, in ``reset``.
Stopped by Landlock (no /proc) and, under root, the uid drop."""

import os


class ProcEnvironEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            return f.read().decode(errors="replace").replace("\0", "\n"), {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
