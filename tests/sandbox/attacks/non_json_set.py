"""Attack: a set inside the info of ``reset``. Not JSON: the worker answers ``unserializable``."""


class SetEnv:
    def reset(self, seed=None):
        return "Say anything.", {"allowed": {"a", "b"}}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
