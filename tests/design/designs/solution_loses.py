# expect: solution_does_not_win
class LoserEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "Say win.", {}

    def step(self, action):
        self.turn += 1
        won = action == "win"
        return "ok", float(won), won, self.turn >= self.max_turns, {}

    def solution(self):
        return ["lose"]
