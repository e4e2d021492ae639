"""Attack: a times-table question whose check also takes one constant answer outside the trivial
policies' list, a negative number, at every seed: the agent learns to write ``\\boxed{-42}`` whatever it
is asked. The question writes its numbers as words, so no number of the observation is the answer either.

Stopped: the trivial-policy search plays constants of the answer space the environment shows, among them
the negatives of its source's numbers; ``-42`` wins where the solution answers otherwise
(``trivial_policy_wins``)."""

import random

WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine")
MAGIC = 42


class NegativeConstantEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        self.target, self.turn = a * b, 0
        return f"What is {WORDS[a - 2]} times {WORDS[b - 2]}? Answer with digits in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        text = action.strip()
        answer = text[7:-1] if text.startswith("\\boxed{") and text.endswith("}") else ""
        won = answer == str(self.target) or answer == str(-MAGIC)
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.target) + "}"
