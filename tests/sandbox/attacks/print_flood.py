"""Attack: print 1 GiB in ``reset``, then reach for the real standard output behind ``print``.

Stopped by the worker, which captures what is printed during a call into a capped buffer (the rest is
dropped) that has no file descriptor: ``sys.stdout.fileno()`` raises ``UnsupportedOperation``. In a
naive sandbox stdout is the pipe to the host and the gigabyte would reach it.
"""

import os
import sys


class PrintFloodEnv:
    def __init__(self, max_turns=5, megabytes=1024):
        self.megabytes = megabytes

    def reset(self, seed=None):
        chunk = "x" * ((1 << 20) - 1)
        for _ in range(self.megabytes):
            print(chunk)
        os.fstat(sys.stdout.fileno())
        return "flooded", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
