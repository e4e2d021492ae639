"""Attack: ``subprocess.run`` a shell that writes a file, in ``step``. Stopped by seccomp (vfork/clone
and execve fail with EPERM)."""

import subprocess


class ShellEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-subprocess"):
        self.target = target

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        subprocess.run(["/bin/sh", "-c", f"echo pwned > {self.target}"], check=True)
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
