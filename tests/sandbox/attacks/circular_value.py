"""Attack: a list that contains itself in the info of ``reset``. Not encodable: ``unserializable``."""


class CircularEnv:
    def reset(self, seed=None):
        loop = []
        loop.append(loop)
        return "Say anything.", {"loop": loop}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
