"""Attack: start a ``multiprocessing.Process`` that writes a file, in ``reset``. Stopped by seccomp
(fork/clone fail with EPERM)."""

import multiprocessing


def plant(target):
    with open(target, "w") as f:
        f.write("pwned")


class PoolEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-multiprocessing"):
        self.target = target

    def reset(self, seed=None):
        process = multiprocessing.get_context("fork").Process(target=plant, args=(self.target,))
        process.start()
        process.join()
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
