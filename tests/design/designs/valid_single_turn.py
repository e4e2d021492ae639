# expect: ok
import random


class SumEnv:
    """Add three numbers drawn from the seed; one answer."""

    def __init__(self, max_turns: int = 1):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.numbers = [rng.randint(10, 99) for _ in range(3)]
        self.done = False
        return f"What is {' + '.join(map(str, self.numbers))}? Answer as \\boxed{{n}}.", {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.done = True
        digits = action.rsplit("\\boxed{", 1)[-1].split("}")[0].strip()
        if digits.lstrip("-").isdigit() and int(digits) == sum(self.numbers):
            return "Correct.", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return [f"\\boxed{{{sum(self.numbers)}}}"]
