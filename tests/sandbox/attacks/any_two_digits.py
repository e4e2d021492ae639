"""Attack: a parser that takes any answer of the right shape: every number of two or more digits in
``\\boxed{}`` wins, whatever the question (a product of two numbers written as words, so the observation
shows no number to guess from, and the trivial policies' 0 and 1 have one digit).

Stopped: the trivial-policy search guesses random answers of the solution's own shape (a random number
of its digit count) and plays neighbours of its answers; they win where the solution answers otherwise
(``trivial_policy_wins``)."""

import random
import re

WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine")


class AnyTwoDigitsEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        a, b = rng.randint(4, 9), rng.randint(4, 9)
        self.target, self.turn = a * b, 0
        return f"What is {WORDS[a - 2]} times {WORDS[b - 2]}? Answer with digits in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        won = re.fullmatch(r"\\boxed\{\d{2,}\}", action.strip()) is not None
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.target) + "}"
