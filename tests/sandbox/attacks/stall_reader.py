"""Attack: answer ``reset`` normally, but patch the worker's frame reader first, so that the worker
never reads another request and its input pipe fills up.

The next call must still end at its deadline (``timeout``), whatever the size of the request: the
host must never block writing a request into a pipe that the worker does not drain.
"""

import sys
import time


class StallEnv:
    def reset(self, seed=None):
        protocol = sys.modules["spade_rl.sandbox.protocol"]

        def never_read(*args, **kwargs):
            while True:
                time.sleep(3600)

        protocol.FrameReader.read = never_read
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
