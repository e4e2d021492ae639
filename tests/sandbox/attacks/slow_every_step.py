"""Attack: answer every step just under the call deadline and never end, so that every turn of a
training batch waits for it. Stopped by the rollout's per-episode time budget (the episode ends as
``time_budget``) and, in validation, by the battery's budget (``validation_timeout``)."""

import time


class SlowEnv:
    def __init__(self, max_turns=50, delay=0.4):
        self.delay = delay

    def reset(self, seed=None):
        return "Say anything, as often as you like.", {}

    def step(self, action):
        time.sleep(self.delay)
        return "Go on.", 0.0, False, False, {}

    def solution(self):
        return "anything"
