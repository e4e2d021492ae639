"""Attack: ``os.system`` a shell command that writes a file, in ``reset``. Stopped by seccomp: the C
library cannot start the shell and ``os.system`` returns a non-zero status, which is raised here."""

import os


class SystemEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-os-system"):
        self.target = target

    def reset(self, seed=None):
        status = os.system(f"echo pwned > {self.target}")
        if status != 0:
            raise RuntimeError(f"os.system returned status {status}")
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
