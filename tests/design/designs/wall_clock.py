# expect: nondeterministic
import time


class ClockEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.start = time.time()
        return f"Started at {self.start:.6f}. Say go.", {}

    def step(self, action):
        won = action.strip() == "go"
        return ("won" if won else "lost"), float(won), True, False, {}

    def solution(self):
        return ["go"]
