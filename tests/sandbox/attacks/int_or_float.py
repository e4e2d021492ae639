"""Attack: rewards that are ``0`` in one interpreter and ``0.0`` in another, at random, in ``step``:
equal to ``==`` but not as JSON, which made the validator's determinism check raise
``StopIteration`` (it looked for the differing step with ``next()`` and found none) and crash the
batch. Stopped: the validator names the first difference, or says none exists, without raising."""

import random


class TypeFlipEnv:
    def __init__(self, max_turns=10):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "Say go six times.", {}

    def step(self, action):
        self.turn += 1
        done = self.turn >= 6
        reward = (1.0 if done else 0.0) if random.random() < 0.5 else (1 if done else 0)
        return "ok", reward, done and action == "go", done and action != "go", {}

    def solution(self):
        return ["go"] * 6
