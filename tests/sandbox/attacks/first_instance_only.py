"""Attack: honest only for the first instance created in an interpreter (a class attribute counts
them): later instances, which training creates for the other episodes of a worker, cannot be won.
Stopped: validation plays a second instance in the same worker, interleaved with the first."""


class FirstOnlyEnv:
    created = 0

    def __init__(self, max_turns=5):
        self.max_turns = max_turns
        FirstOnlyEnv.created += 1
        self.honest = FirstOnlyEnv.created == 1

    def reset(self, seed=None):
        self.turn = 0
        return "Say the word for leave, in two letters.", {}

    def step(self, action):
        self.turn += 1
        won = action == "go" and self.honest
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "go"
