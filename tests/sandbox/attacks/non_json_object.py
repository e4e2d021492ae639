"""Attack: an arbitrary object as the observation of ``step``. Not JSON: the worker answers
``unserializable`` (and the object's ``__str__`` is never called by the host)."""


class Board:
    def __str__(self):
        return "a board"


class ObjectEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return Board(), 1.0, True, False, {}

    def solution(self):
        return "anything"
