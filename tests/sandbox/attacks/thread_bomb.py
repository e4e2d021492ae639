"""Attack: start threads without end in ``reset``. Stopped by seccomp (clone fails: no new thread)."""

import threading
import time


class ThreadBombEnv:
    def __init__(self, max_turns=5):
        self.threads = []

    def reset(self, seed=None):
        while True:
            thread = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
