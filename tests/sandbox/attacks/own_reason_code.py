"""Attack: raise the contract's own exception class (found in the worker's ``sys.modules``) with a
reason code of the attacker's choice, in ``reset``: the worker copied it through, the validator
reported it, and ``archive.add`` raised on a verdict "invalid" with reason "ok". Stopped by the pool,
which takes reason codes from the worker only for a source it could not load, and by the validator,
whose reports carry only its own codes."""

import sys


class ReasonEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        contract = sys.modules["spade_rl.envs.contract"]

        class Forged(contract.ContractViolation):
            pass

        raise Forged("ok", "all is well")

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
