# expect: never_terminates
class EndlessEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say win.", {}

    def step(self, action):
        won = action == "win"
        return "ok", float(won), won, False, {}  # never truncates

    def solution(self):
        return ["win"]
