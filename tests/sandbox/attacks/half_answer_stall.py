"""Attack: write half an answer into the worker's protocol pipe, then stall, in ``step``: the pool
read one ready worker to its end or deadline before looking at the others, and judged a deadline
before reading data already waiting, so every other environment of the batch timed out and was
killed. Stopped: the pool reads every worker as its data arrives, and each call has its own
deadline."""

import os
import struct
import sys
import time


def worker_out_fd():
    frame = sys._getframe(1)
    while frame is not None:
        worker = frame.f_locals.get("self")
        if hasattr(worker, "out_fd"):
            return worker.out_fd
        frame = frame.f_back
    raise RuntimeError("the worker's frame is not on the stack")


class StallEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        os.write(worker_out_fd(), struct.pack(">I", 1000) + b'{"ok":true,')
        time.sleep(3600)

    def solution(self):
        return "anything"
