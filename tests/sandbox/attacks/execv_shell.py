"""Attack: replace the worker with a shell (``os.execv``) in ``step``. Stopped by seccomp (``execve``
fails with EPERM) and Landlock (nothing is executable)."""

import os


class ExecEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-exec"):
        self.target = target

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        os.execv("/bin/sh", ["sh", "-c", f"echo pwned > {self.target}"])

    def solution(self):
        return "anything"
