"""Attack: a NaN reward from ``step``. It crosses the pipe as NaN; the host's contract check rejects
it (``reward_not_finite``)."""


class NanEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", float("nan"), True, False, {}

    def solution(self):
        return "anything"
