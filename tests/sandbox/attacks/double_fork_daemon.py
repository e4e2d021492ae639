"""Attack: a double-fork daemon that leaves its session and outlives the worker, started in
``__init__``. Stopped by seccomp (fork fails with EPERM; setsid is denied too)."""

import os
import time


class DaemonEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-daemon"):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    with open(target, "a") as f:
                        f.write("still here\n")
                    time.sleep(0.1)
            os._exit(0)

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
