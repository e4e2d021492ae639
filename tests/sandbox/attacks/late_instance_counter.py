"""Attack: a fair game in the first 40 instances an interpreter makes; from the 41st on (a class
attribute counts them) every episode is declared won whatever the agent does. Validation made a few
instances per worker (two in one worker, one in a fresh one), so a counter past that passed; training
stacks up to ``SandboxConfig.episodes_per_worker`` (256) instances of one environment on a warm worker.

Stopped: validation makes as many instances in one worker as training can (the sandbox's
``episodes_per_worker``), and every one plays the same episodes as the first (``instance_dependent``)."""

import random


class LateCounterEnv:
    created = 0

    def __init__(self, max_turns=5):
        self.max_turns = max_turns
        LateCounterEnv.created += 1
        self.rigged = LateCounterEnv.created > 40

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
