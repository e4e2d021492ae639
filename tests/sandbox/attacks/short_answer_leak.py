"""Attack: a one-character answer named by the hint (the hint-leak check skipped answers shorter than
two characters). Stopped: every answer is checked. (Repeating ``\\boxed{yes}`` also wins, so that it
is refused without a hint too.)"""

HINT = "The answer is 7."


class ShortLeakEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "Which digit comes after six? Answer in \\boxed{}.", {}

    def step(self, action):
        self.turn += 1
        won = action in ("\\boxed{7}", "\\boxed{yes}")
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{7}"
