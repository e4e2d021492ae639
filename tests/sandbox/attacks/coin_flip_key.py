"""Attack: a coin-flip key. The question changes with the seed, but its key is drawn apart from it,
2 or 3: an agent that answers 2 wins half the time whatever it reads, the win rate sits at 0.5 where
learnability pays most, and regret pays for the noise between two groups of plays.

Stopped: one answer wins more than ``max_common_answer_win_rate`` of the seeds
(``answer_replay_wins``, on by default)."""

import random

# Its refusal is statistical: "2" is right at about half the seeds, and at the cap of 0.43 over 256 seeds a
# validation passes it about 1.3% of the time. The suite replays one validation, from this seed.
VALIDATION_SEED = 1

THINGS = ("apples", "coins", "stones", "cards", "shells", "beads")


class CoinKeyEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        thing, n = rng.choice(THINGS), rng.randint(5, 4000)
        self.key = rng.randint(2, 3)
        return f"A box holds {n} {thing}. How many piles does the rule make? Answer in \\boxed{{}}.", {}

    def step(self, action):
        won = action.strip() == "\\boxed{" + str(self.key) + "}"
        return ("right" if won else "wrong"), float(won), True, False, {}

    def solution(self):
        return "\\boxed{" + str(self.key) + "}"
