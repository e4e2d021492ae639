"""Attack: read the pool's environment through ``os.environ`` (a naive sandbox passes it on) and
return it, in ``reset``. Stopped by the pool, which starts workers with an empty environment: the
secret's variable is missing (KeyError)."""

import os


class EnvironEnv:
    def __init__(self, max_turns=5, secret_name="SPADE_ATTACK_SECRET"):
        self.secret_name = secret_name

    def reset(self, seed=None):
        dump = "\n".join(f"{key}={value}" for key, value in os.environ.items())
        return dump + "\nsecret=" + os.environ[self.secret_name], {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
