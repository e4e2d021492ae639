"""Attack: a yes-or-no question with several tries: repeating one short answer, or answering at
random, wins almost every seed, so the designer is rewarded for an environment that needs no skill.
Stopped by the trivial-policy check (at most 15% of seeds may be won that way)."""

import random


class CoinEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.answer = random.Random(seed).choice(["yes", "no"])
        self.turn = 0
        return "Did the coin land heads? Answer yes or no in \\boxed{}.", {}

    def step(self, action):
        self.turn += 1
        won = action == "\\boxed{" + self.answer + "}"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{" + self.answer + "}"
