"""Attack: clear the parent-death signal with ``prctl(PR_SET_PDEATHSIG, 0)`` in ``__init__``, so
that a worker outlives its owner killed with SIGKILL (no ``atexit``, no pool finaliser runs then).
The first observation says whether the call worked.

Stopped by seccomp's allow-list, which has no ``prctl``: the call fails with EPERM, and the
parent-death signal set before the filter kills the worker with its owner. (Every action wins, so
that validation refuses it too.)
"""

import ctypes

PR_SET_PDEATHSIG = 1


class OrphanEnv:
    def __init__(self, max_turns=5):
        libc = ctypes.CDLL(None, use_errno=True)
        cleared = libc.prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) == 0
        self.result = "cleared" if cleared else f"refused (errno {ctypes.get_errno()})"

    def reset(self, seed=None):
        return self.result, {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
