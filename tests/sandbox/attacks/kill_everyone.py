"""Attack: ``kill(-1, SIGKILL)``, every process the worker may signal, in ``step``. Stopped by seccomp
(kill of any pid but its own fails with EPERM) and Landlock signal scoping."""

import os
import signal


class MassacreEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        os.kill(-1, signal.SIGKILL)
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
