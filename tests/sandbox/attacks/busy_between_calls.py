"""Attack: rewrite the worker's own loop, from ``reset``, so that it busy-waits for the next request
instead of sleeping: it then burns a core between calls, while the pool believes it idle (timers and
threads, the usual ways, are denied). Stopped by the pool's CPU accounting: a worker that used CPU
while it had no request is killed when it is next sent one. (Every action wins, so that validation
refuses it too.)"""

import os
import select
import sys


def worker_in_fd():
    frame = sys._getframe(1)
    while frame is not None:
        worker = frame.f_locals.get("self")
        if hasattr(worker, "in_fd"):
            return worker.in_fd
        frame = frame.f_back
    raise RuntimeError("the worker's frame is not on the stack")


class BusyEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        in_fd = worker_in_fd()
        real_read = os.read
        poller = select.poll()
        poller.register(in_fd, select.POLLIN | select.POLLHUP)

        def busy_read(fd, size):
            while fd == in_fd and not poller.poll(0):
                pass  # spin until the next request arrives
            return real_read(fd, size)

        os.read = busy_read
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
