"""Attack: an infinite reward from ``step``. The host's contract check rejects it
(``reward_not_finite``)."""


class InfEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", float("inf"), True, False, {}

    def solution(self):
        return "anything"
