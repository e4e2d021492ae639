# expect: reward_not_finite
class NanEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "ok", float("nan"), True, False, {}

    def solution(self):
        return ["go"]
