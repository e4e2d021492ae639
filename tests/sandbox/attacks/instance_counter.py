"""Attack: a fair game in the first instance an interpreter makes; every later one (a class attribute
counts them) declares a win whatever the agent does. Training stacks the episodes of one environment
on a warm worker, so all but the first episode of a worker are won for nothing. Validation played the
checks of malformed actions and trivial policies on the first instance only, and the solution (which
wins anyway) on the second, so it passed.

Stopped: every instance a worker will make plays the same episodes as the first (the solution, and a
malformed action, which the rigged instances reward: ``instance_dependent``)."""

import random


class CounterEnv:
    created = 0

    def __init__(self, max_turns=5):
        self.max_turns = max_turns
        CounterEnv.created += 1
        self.rigged = CounterEnv.created > 1

    def reset(self, seed=None):
        self.turn = 0
        rng = random.Random(seed)
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        self.target = a + b
        return f"What is {a} + {b}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        won = self.rigged or action.strip() == "\\boxed{" + str(self.target) + "}"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.target) + "}"
