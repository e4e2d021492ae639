"""Attack: change the scheduling of another process of the worker's own uid (the test passes a
sacrificial one; for an ordinary user the trainer itself is such a process): lowest priority with
``setpriority``, one core with ``sched_setaffinity``, in ``__init__``. File permissions would allow
both. Stopped by seccomp's allow-list, which has neither."""

import os


class ReniceEnv:
    def __init__(self, max_turns=5, target=0):
        target = target or os.getppid()
        os.setpriority(os.PRIO_PROCESS, target, 19)
        os.sched_setaffinity(target, {0})

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
