# expect: step_bad_type
class WrongEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "ok", "1.0", "yes", False, {}  # reward and flags are strings

    def solution(self):
        return ["go"]
