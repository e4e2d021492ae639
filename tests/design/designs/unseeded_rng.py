# expect: nondeterministic
import random


class DiceEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.die = random.randint(1, 1_000_000)  # the global RNG, not random.Random(seed)
        return f"Guess the die: it shows {self.die}.", {}

    def step(self, action):
        won = action.strip() == str(self.die)
        return "done", float(won), True, False, {}

    def solution(self):
        return [str(self.die)]
