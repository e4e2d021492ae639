"""Attack: a final action of 1.26 million characters, ``\\boxed{`` repeated, in ``solution``: the
validator's hint-leak check searched it with ``\\\\boxed\\{(.*)\\}``, which backtracks in quadratic
time (0.4 s at 35,000 characters, 1.5 s at 70,000, 6 s at 140,000: about eight minutes at this
size). Stopped: the validator's own text processing is linear. (Repeating ``\\boxed{0}`` also wins,
so that it is refused without a hint too.)"""

LONG = "\\boxed{" * 180_000


class BacktrackEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "Answer inside \\boxed{}.", {}

    def step(self, action):
        self.turn += 1
        won = action == LONG or action == "\\boxed{0}"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return LONG
