"""Attack: ``system(3)`` through ctypes in ``__init__``, past any Python-level guard. Stopped by
seccomp: libc cannot spawn the shell and returns a non-zero status, which is raised here."""

import ctypes


class LibcSystemEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-libc-system"):
        libc = ctypes.CDLL(None, use_errno=True)
        status = libc.system(f"echo pwned > {target}".encode())
        if status != 0:
            raise RuntimeError(f"libc system() returned status {status}")

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
