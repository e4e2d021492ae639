"""Attack: raise the limit of the worker's output capture (``sys.stdout`` is the worker's capped
buffer, in the same interpreter) and print 3 MB in ``reset``, so that the host keeps far more than
``max_captured_output``. The frame cap still bounds it (4 MiB), but ``CallResult.output`` should
never exceed the configured capture size: the host must cut it.

The exception at the end only ends the call (so that no validator mistakes this for an environment);
what is under test is how much printed output reaches the host with the answer.
"""

import sys


class CapBypassEnv:
    def __init__(self, max_turns=5, size=3_000_000):
        self.size = size

    def reset(self, seed=None):
        sys.stdout.limit = 1 << 40
        sys.stdout.write("y" * self.size)
        raise RuntimeError("printed past the capture limit")

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
