"""Attack: a fair game until its interpreter has made 5000 resets (a class attribute counts them), then
every action wins, an empty one included. Validation resets a worker some hundreds of times (every
instance of its stacked-instance check plays a probe): this passes it (``PASSES_VALIDATION``);
training resets a warm worker for every episode.

Stopped at play time: the loop's guard (``spade_rl.loop.guard``) sees an episode won by an empty
action, flags the environment in the archive (``empty_action_won``) and the pool never draws it again."""

import random

PASSES_VALIDATION = True


class ResetCounterEnv:
    resets = 0

    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        ResetCounterEnv.resets += 1
        self.rigged = ResetCounterEnv.resets > 5000
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
