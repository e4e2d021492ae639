"""The environment contract: what a generated (or hand-written) environment must look like.

An environment is one Python module that defines exactly one class whose name ends in ``Env``::

    class GuessEnv:
        def __init__(self, max_turns: int = 10): ...
        def reset(self, seed: int | None = None) -> tuple[str, dict]: ...
        def step(self, action: str) -> tuple[str, float, bool, bool, dict]: ...
        def solution(self) -> str | list[str]: ...   # reference play after reset()
        def close(self) -> None: ...                 # optional

``step`` answers in Gymnasium order: observation, reward, terminated, truncated, info. Rewards lie
in ``[0, 1]`` by default; an episode's return is its final reward (0 if truncated).

This module only describes the contract and checks values that came back from an environment. It
never runs environment code: untrusted code runs only in :mod:`spade_rl.sandbox`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

ENV_CLASS_SUFFIX = "Env"


@runtime_checkable
class Environment(Protocol):
    """The structural type every environment class satisfies."""

    def reset(self, seed: int | None = None) -> tuple[str, dict]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]: ...

    def solution(self) -> str | list[str]: ...


@dataclass(frozen=True)
class StepResult:
    """One checked answer of ``step``."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict


class ContractViolation(ValueError):
    """A value returned by an environment does not follow the contract.

    ``reason`` is a stable code (used in validation reports and statistics); the message says what
    was wrong and what is allowed.
    """

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def check_reset_value(value: Any) -> tuple[str, dict]:
    """Check the value of ``reset``: a list/tuple ``(observation: str, info: dict)``."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ContractViolation(
            "reset_bad_type",
            f"reset() must return (observation: str, info: dict), got {_describe(value)}",
        )
    obs, info = value
    if type(obs) is not str or not obs.strip():
        raise ContractViolation(
            "reset_bad_type", f"reset() observation must be a non-empty str, got {_describe(obs)}"
        )
    _check_text("reset_bad_type", "reset() observation", obs)
    if type(info) is not dict:
        raise ContractViolation("reset_bad_type", f"reset() info must be a dict, got {_describe(info)}")
    return obs, info


def check_step_value(value: Any, reward_range: tuple[float, float] = (0.0, 1.0)) -> StepResult:
    """Check the value of ``step``: ``(obs: str, reward: float, terminated: bool, truncated: bool,
    info: dict)`` with a finite reward inside ``reward_range`` (inclusive)."""
    if not isinstance(value, (list, tuple)) or len(value) != 5:
        raise ContractViolation(
            "step_bad_type",
            "step() must return (observation: str, reward: float, terminated: bool, "
            f"truncated: bool, info: dict), got {_describe(value)}",
        )
    obs, reward, terminated, truncated, info = value
    if type(obs) is not str:
        raise ContractViolation("step_bad_type", f"step() observation must be a str, got {_describe(obs)}")
    _check_text("step_bad_type", "step() observation", obs)
    # bool is an int subclass: a reward of True is a type error, not 1.0.
    if type(reward) not in (int, float):
        raise ContractViolation("step_bad_type", f"step() reward must be a number, got {_describe(reward)}")
    # An int is compared as an int: math.isfinite(10**400) raises OverflowError.
    if type(reward) is float and not math.isfinite(reward):
        raise ContractViolation("reward_not_finite", f"step() reward must be finite, got {reward!r}")
    low, high = reward_range
    if not low <= reward <= high:
        raise ContractViolation(
            "reward_out_of_range",
            f"step() reward {_describe(reward)} is outside the allowed range [{low}, {high}]",
        )
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if type(flag) is not bool:
            raise ContractViolation("step_bad_type", f"step() {name} must be a bool, got {_describe(flag)}")
    if type(info) is not dict:
        raise ContractViolation("step_bad_type", f"step() info must be a dict, got {_describe(info)}")
    return StepResult(obs, float(reward), terminated, truncated, info)


def check_solution_value(value: Any) -> list[str]:
    """Check the value of ``solution``: one action (str) or a non-empty list of actions."""
    if type(value) is str:
        return [value]
    if isinstance(value, (list, tuple)) and value and all(type(a) is str for a in value):
        return list(value)
    raise ContractViolation(
        "solution_bad_type",
        f"solution() must return a str or a non-empty list of str, got {_describe(value)}",
    )


def _check_text(reason: str, what: str, text: str) -> None:
    """Text that the trusted side can encode (a lone surrogate makes tokenizers and SQLite raise)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ContractViolation(
            reason, f"{what} must be valid text; it holds {text[exc.start : exc.end]!a} at {exc.start}"
        ) from None


def _describe(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an int of more than 4300 digits has no repr; nothing may raise here
        return f"{type(value).__name__} (not shown)"
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"
