"""Attack: honest only in an interpreter where ``solution()`` was asked for, which validation does and
training never does: a class attribute remembers the call, and until it is made every action wins. The
battery asks for the solution in its worker before anything else, so every check it runs there is honest.

Stopped: the trivial-policy search plays as training plays, in a worker of its own that is never asked
for a solution (``spade_rl.design.trivial_search``): the malformed actions win there."""

import random


class SolutionAskedEnv:
    asked = False

    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        self.target, self.turn = a + b, 0
        return f"What is {a} + {b}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        won = not SolutionAskedEnv.asked or action.strip() == "\\boxed{" + str(self.target) + "}"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        SolutionAskedEnv.asked = True
        return "\\boxed{" + str(self.target) + "}"
