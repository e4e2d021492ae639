"""Environments that several test folders play: a parity game any model wins about half the time
(GRPO gets a signal even from a random policy), and one whose step never returns."""

PARITY = '''
class ParityEnv:
    """Win when the seed plus the length of the action is even."""

    def __init__(self, max_turns=2):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.seed = 0 if seed is None else seed
        self.turn = 0
        return "Say something of the right length.", {}

    def step(self, action):
        self.turn += 1
        won = (self.seed + len(action)) % 2 == 0
        if won:
            return "yes", 1.0, True, False, {}
        return "no", 0.0, False, self.turn >= self.max_turns, {}

    def solution(self):
        return ["xx" if self.seed % 2 == 0 else "x"]
'''
HANGS = PARITY.replace("self.turn += 1", "while True:\n            pass").replace("ParityEnv", "HangEnv")
