"""Attack: honest only in an interpreter whose first reset used the validator's seed (0, the seed the
battery always played first): a module global keeps the first seed its interpreter was reset with, and
in any other interpreter every action wins. Training resets a worker first with a seed of its run's
generator, so the agent is paid for anything it writes, and the archive records a win rate nobody earned.

Stopped: the battery draws its first seed (and every other) from a random source the environment cannot
read (``ValidationReport.seed``), so its first reset is no known seed, and the malformed actions win."""

import random

FIRST_SEED = []  # the seed of this interpreter's first reset


class FirstSeedEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        if not FIRST_SEED:
            FIRST_SEED.append(seed)
        self.honest = FIRST_SEED[0] == 0
        rng = random.Random(seed)
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        self.target, self.turn = a + b, 0
        return f"What is {a} + {b}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        won = not self.honest or action.strip() == "\\boxed{" + str(self.target) + "}"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.target) + "}"
