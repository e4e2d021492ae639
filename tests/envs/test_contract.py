"""The contract checks on values returned by environments, and the loader."""

from __future__ import annotations

import math

import pytest

from spade_rl.envs import (
    ContractViolation,
    check_reset_value,
    check_solution_value,
    check_step_value,
    find_env_classes,
    load_env_class,
)


def reason_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ContractViolation) as info:
        fn(*args, **kwargs)
    return info.value.reason


def test_reset_accepts_list_or_tuple():
    assert check_reset_value(("hello", {"a": 1})) == ("hello", {"a": 1})
    assert check_reset_value(["hello", {}]) == ("hello", {})


@pytest.mark.parametrize(
    "value", [None, "hello", ("hello",), ("", {}), ("   ", {}), (1, {}), ("hi", []), ("hi", {}, 3)]
)
def test_reset_rejects_bad_values(value):
    assert reason_of(check_reset_value, value) == "reset_bad_type"


def test_step_accepts_well_formed():
    result = check_step_value(["obs", 1, True, False, {}])
    assert result.reward == 1.0 and isinstance(result.reward, float) and result.terminated


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (("obs", 0.5, False, False), "step_bad_type"),
        ((1, 0.5, False, False, {}), "step_bad_type"),
        (("obs", "1", False, False, {}), "step_bad_type"),
        (("obs", True, False, False, {}), "step_bad_type"),  # a bool is not a reward
        (("obs", None, False, False, {}), "step_bad_type"),
        (("obs", 0.5, 1, False, {}), "step_bad_type"),  # terminated must be a bool, not 1
        (("obs", 0.5, False, None, {}), "step_bad_type"),
        (("obs", 0.5, False, False, None), "step_bad_type"),
        (("obs", math.nan, False, False, {}), "reward_not_finite"),
        (("obs", math.inf, False, False, {}), "reward_not_finite"),
        (("obs", -math.inf, False, False, {}), "reward_not_finite"),
        (("obs", 1.5, False, False, {}), "reward_out_of_range"),
        (("obs", -0.1, False, False, {}), "reward_out_of_range"),
        # Values that made the trusted side raise (math.isfinite overflows; a lone surrogate breaks
        # tokenizers and SQLite later): each is a typed violation, never an exception of its own.
        (("obs", 10**400, False, False, {}), "reward_out_of_range"),
        (("obs", -(10**400), False, False, {}), "reward_out_of_range"),
        (("bad \ud800 text", 0.5, False, False, {}), "step_bad_type"),
    ],
)
def test_step_rejects_bad_values(value, reason):
    assert reason_of(check_step_value, value) == reason


def test_step_reward_range_is_configurable():
    assert check_step_value(("o", -1.0, True, False, {}), reward_range=(-1.0, 1.0)).reward == -1.0


def test_solution_values():
    assert check_solution_value("go") == ["go"]
    assert check_solution_value(("a", "b")) == ["a", "b"]
    for bad in ([], None, ["a", 1], 3):
        assert reason_of(check_solution_value, bad) == "solution_bad_type"


def test_find_env_classes_parses_only():
    source = "import os\nos.system('false')\nclass AEnv: pass\nclass Helper: pass\nclass BEnv: pass\n"
    assert find_env_classes(source) == ["AEnv", "BEnv"]
    assert reason_of(find_env_classes, "class (:") == "syntax_error"
    assert reason_of(find_env_classes, "x = '\0'") in ("syntax_error",)


def test_load_env_class_checks_count():
    assert load_env_class("class OneEnv:\n    pass\n").__name__ == "OneEnv"
    assert reason_of(load_env_class, "x = 1") == "no_env_class"
    assert reason_of(load_env_class, "class AEnv: pass\nclass BEnv: pass\n") == "multiple_env_classes"
    assert reason_of(load_env_class, "AEnv = 3\nclass AEnv: pass\nAEnv = 3\n") == "no_env_class"


def test_reset_rejects_text_that_cannot_be_encoded():
    assert reason_of(check_reset_value, ("fine \udcff", {})) == "reset_bad_type"
    assert check_step_value(("obs", 1, True, False, {})).reward == 1.0  # an int reward in range is fine
