"""Attack: the answer printed at one fixed place of the question: the last number, after a preamble
of more numbers and words than a copy policy that counts from the start looks at (16 of each). An
agent trained on it learns to copy the last number.

Stopped: the copy policies also count from the end of the first observation
(``trivial_policy_wins``, ``max_copy_win_rate``, on by default)."""

import random


class PrintedEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        values = [rng.randint(10, 99) for _ in range(rng.randint(18, 24))]
        self.answer = sum(values)
        listing = ", ".join(str(v) for v in values)
        return (
            f"Ledger of the day, entries in order: {listing}. Add every entry of the ledger and give "
            f"the total in \\boxed{{}}. (Checksum for the clerk: {self.answer})",
            {},
        )

    def step(self, action):
        won = action.strip() == "\\boxed{" + str(self.answer) + "}"
        return ("right" if won else "wrong"), float(won), True, False, {}

    def solution(self):
        return "\\boxed{" + str(self.answer) + "}"
