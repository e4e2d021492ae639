"""Attack: the answer is 42 at every seed but seed 0 (the only one whose answer the hint-leak check
read), and the hint says 42. Stopped: the hint is checked against the answer of every seed played.
(Repeating ``\\boxed{yes}`` also wins, so that it is refused without a hint too.)"""

HINT = "It is always 42."


class LaterLeakEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.answer = "17" if seed == 0 else "42"
        self.turn = 0
        return "Guess my number, in \\boxed{}.", {}

    def step(self, action):
        self.turn += 1
        won = action in ("\\boxed{" + self.answer + "}", "\\boxed{yes}")
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{" + self.answer + "}"
