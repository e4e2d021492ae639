"""Attack: honest only at seed 0, the seed validation used to play: at any other seed its own
solution loses (training plays other seeds, so its designer is rewarded for an environment nobody
validated). Stopped: validation plays several seeds drawn as training draws them."""


class SeedZeroEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.seed, self.turn = seed, 0
        return f"Game {seed}: say the word for leave, in two letters.", {}

    def step(self, action):
        self.turn += 1
        won = action == "go"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "go" if self.seed == 0 else "stop"
