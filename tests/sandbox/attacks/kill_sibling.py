"""Attack: SIGKILL a process of the worker's own uid (the test passes a sacrificial one), in
``__init__``. File permissions would allow it; seccomp and Landlock signal scoping stop it."""

import os
import signal


class SiblingEnv:
    def __init__(self, max_turns=5, target=0):
        os.kill(target or os.getppid(), signal.SIGKILL)

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
