"""Attack: a fork bomb in the module body. Stopped by seccomp (fork/clone fail with EPERM)."""

import os

while True:
    os.fork()


class ForkBombEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
