"""Attack: SIGKILL the pool's process (the worker's parent) in ``reset``. Stopped by seccomp (kill of
any other pid fails with EPERM), Landlock signal scoping and, under root, the uid drop."""

import os
import signal


class ParricideEnv:
    def reset(self, seed=None):
        os.kill(os.getppid(), signal.SIGKILL)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
