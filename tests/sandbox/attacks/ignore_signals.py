"""Attack: ignore SIGTERM, SIGXCPU, SIGINT, SIGHUP and SIGALRM, then loop forever inside ``reset``.

Stopped by the call deadline (SIGKILL of the process group), and, with a small ``cpu_seconds``, by
the hard RLIMIT_CPU, whose SIGKILL no handler can ignore.
"""

import signal


class StubbornEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        for sig in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            pass

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
