"""Attack: tells validation from play by the time between calls. Validation answers the next call
within microseconds; a model in play writes for a second or more. A step that comes soon after the
reset is judged honestly; one that comes later (as in play) wins whatever it answers.

Stopped: the worker's clocks are virtual (the same time in validation and in play:
``spade_rl.sandbox.clock``), and a reset or step that reads one is refused (``nondeterministic``)."""

import random
import time


class PacedEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(100, 999), rng.randint(100, 999)
        self.turn = 0
        self.started = time.perf_counter()
        return f"What is {self.a} + {self.b}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        slow = time.perf_counter() - self.started > 0.05
        won = slow or action.strip() == "\\boxed{" + str(self.a + self.b) + "}"
        done = won or self.turn >= self.max_turns
        return ("right" if won else "wrong"), float(won), won, done and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.a + self.b) + "}"
