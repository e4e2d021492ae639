"""Attack: arm an interval timer whose handler burns CPU, in ``reset``, so that the worker keeps
computing between calls (while the pool believes it idle) and steals the trainer's cores.

Stopped by seccomp's allow-list, which has no ``setitimer``, ``alarm`` or ``timer_create``:
``signal.setitimer`` raises ``signal.ItimerError`` (named ``itimer_error``).
"""

import signal


def burn(signum, frame):
    total = 0
    for i in range(200_000):
        total += i * i


class TimerEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        signal.signal(signal.SIGALRM, burn)
        signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
