"""Attack: counts the instances its interpreter made (a class attribute) and pays any well-formed
answer at counts a fixed list of probes never plays: 10, 26, 42, ... (every 16th from the 10th; never
a power of two, the one after it, or the last two before a worker is retired). One training episode
in sixteen is won without reading, too few for the trivial policies' cap.

Stopped: the stacked-instance check plays a well-formed answer at half its instances, drawn from a
source the environment cannot read, and replays solutions and probes at instance numbers drawn from it
(``instance_dependent``): 16 rigged counts of 256 all missed about once in 65,000 validations."""

import random


class CountingEnv:
    made = 0

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        CountingEnv.made += 1
        self.rigged = CountingEnv.made % 16 == 10

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(100, 999), rng.randint(100, 999)
        self.turn = 0
        return f"What is {self.a} - {self.b}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        inside = action.rsplit("\\boxed{", 1)[-1].split("}")[0].strip()
        well_formed = "\\boxed{" in action and inside.lstrip("-").isdigit()
        won = inside == str(self.a - self.b) or (self.rigged and well_formed)
        done = won or self.turn >= self.max_turns
        return ("right" if won else "wrong"), float(won), won, done and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.a - self.b) + "}"
