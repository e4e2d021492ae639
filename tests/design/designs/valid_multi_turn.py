# expect: ok
import random


class CounterEnv:
    """Reach a target count by adding 1, 2 or 3 each turn, in few turns, without overshooting."""

    def __init__(self, max_turns: int = 12):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.target = random.Random(seed).randint(5, 15)
        self.total = 0
        self.turn = 0
        self.limit = min(self.max_turns, -(-self.target // 3))
        return (
            f"Reach exactly {self.target} in at most {self.limit} turns. Each turn add 1, 2 or 3: "
            "answer \\boxed{k}.",
            {"target": self.target},
        )

    def step(self, action):
        if self.turn >= self.limit or self.total >= self.target:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        move = action.rsplit("\\boxed{", 1)[-1].split("}")[0].strip()
        if move in ("1", "2", "3"):
            self.total += int(move)
        if self.total == self.target:
            return f"Total {self.total}: done.", 1.0, True, False, {"total": self.total}
        if self.total > self.target:
            return f"Total {self.total}: overshot.", 0.0, True, False, {"total": self.total}
        truncated = self.turn >= self.limit
        return f"Total {self.total}.", 0.0, False, truncated, {"total": self.total}

    def solution(self):
        moves, total = [], 0
        while total < self.target:
            step = min(3, self.target - total)
            moves.append(f"\\boxed{{{step}}}")
            total += step
        return moves
