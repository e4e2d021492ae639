"""The validation battery: every reference environment is valid; each broken one gets its reason."""

from __future__ import annotations

import pytest

from spade_rl.design import ValidationSettings, validate_source
from spade_rl.envs import reference
from spade_rl.sandbox import SandboxConfig, SandboxPool


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxConfig(pool_size=2, call_timeout_s=1.0, load_timeout_s=2.0)) as p:
        yield p


GOOD = """
class GoodEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
    def reset(self, seed=None):
        self.turn = 0
        return "say go", {}
    def step(self, action):
        self.turn += 1
        won = action.strip() == "go"
        out = self.turn >= self.max_turns and not won
        return ("won" if won else "no"), (1.0 if won else 0.0), won, out, {}
    def solution(self):
        return "go"
"""


def broken(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


@pytest.mark.parametrize("name", reference.NAMES)
def test_reference_environments_are_valid(pool, name):
    report = validate_source(pool, reference.source(name))
    assert report.valid, report
    assert report.reason == "ok" and report.checks[-1] == "step_types"


CASES = {
    "syntax_error": "class GoodEnv(:\n",
    "no_env_class": "class Good:\n    pass\n",
    "multiple_env_classes": GOOD + "\nclass OtherEnv:\n    pass\n",
    "load_raised": "raise ImportError('nope')\n" + GOOD,
    "init_raised": broken("self.max_turns = max_turns", "self.max_turns = 1 / 0"),
    "reset_raised": broken('self.turn = 0\n        return "say go", {}', "raise KeyError('x')"),
    "reset_bad_type": broken('return "say go", {}', 'return "say go"'),
    "step_raised": broken("self.turn += 1", "self.turn += None"),
    "step_bad_type": broken('return ("won" if won else "no"),', "return 5,"),
    "reward_not_finite": broken("(1.0 if won else 0.0)", "float('nan')"),
    "reward_out_of_range": broken("(1.0 if won else 0.0)", "(2.0 if won else 0.0)"),
    "solution_bad_type": broken('return "go"', "return 42"),
    "solution_raised": broken('return "go"', "raise RuntimeError('no solution')"),
    "timeout": broken("self.turn += 1", "while True: pass"),
    "crashed": broken("self.turn += 1", "import os; os._exit(1)"),
}


@pytest.mark.parametrize("reason", CASES)
def test_broken_environments_get_their_reason(pool, reason):
    report = validate_source(pool, CASES[reason])
    assert not report.valid
    assert report.reason == reason, report
    assert report.message


def test_unserializable_step_value_is_a_type_error(pool):
    report = validate_source(pool, broken("{}\n    def solution", "{1, 2}\n    def solution"))
    assert (report.valid, report.reason) == (False, "step_bad_type")


def test_settings_pass_kwargs_and_range(pool):
    negative = broken("(1.0 if won else 0.0)", "(1.0 if won else -1.0)")
    assert validate_source(pool, negative).reason == "reward_out_of_range"
    assert validate_source(pool, negative, ValidationSettings(reward_range=(-1.0, 1.0))).valid
    strict = broken("def __init__(self, max_turns=3)", "def __init__(self, max_turns)")
    assert validate_source(pool, strict).reason == "init_raised"
    assert validate_source(pool, strict, ValidationSettings(env_kwargs={"max_turns": 2})).valid


def test_pool_survives_a_run_of_failures(pool):
    for source in CASES.values():
        validate_source(pool, source)
    assert validate_source(pool, GOOD).valid
    assert sum(1 for w in pool._workers if not w.dead) <= pool.config.max_workers
