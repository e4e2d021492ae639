# expect: timeout
class HangEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        while True:
            pass

    def solution(self):
        return ["go"]
