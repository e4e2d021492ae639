"""Attack: a reward of ``10**400``, an integer too large for a float, in ``step``: the contract's
``math.isfinite`` raised ``OverflowError`` on it, which crashed ``spade-rl envs validate`` and
stopped a training run. Stopped at the protocol boundary (integers beyond 2**63 are refused, the
call fails as ``unserializable``) and by the contract (ints are compared as ints)."""


class HugeRewardEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 10**400, True, False, {}

    def solution(self):
        return "anything"
