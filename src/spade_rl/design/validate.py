"""The validation battery: run an environment source through the sandbox and say whether it is valid.

Each failed check has a stable reason code (``ValidationReport.reason``), used as data: in the
archive, in designer rewards and in statistics. The battery never raises for anything the
environment does; an exception here is a bug of ours.

Checks, in order (the first failure decides the verdict):
- ``syntax_error`` / ``no_env_class`` / ``multiple_env_classes``: parsed in this process, never run;
- ``load_raised``, ``init_raised``: the module body or the constructor raised;
- ``reset_raised`` / ``reset_bad_type``: ``reset(seed)`` answers ``(non-empty str, dict)``;
- ``step_raised`` / ``step_bad_type`` / ``reward_not_finite`` / ``reward_out_of_range``: ``step``
  answers a well-formed action (the first of the reference solution), an empty action and a garbage
  action with a correctly typed 5-tuple and a finite reward in range;
- ``solution_raised`` / ``solution_bad_type``: ``solution()`` gives one or more actions;
- sandbox failures during any call: ``timeout``, ``crashed``, ``memory``, ``output_too_large``,
  ``protocol_error``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from spade_rl.envs.contract import (
    ContractViolation,
    check_reset_value,
    check_solution_value,
    check_step_value,
)
from spade_rl.envs.loader import find_env_classes
from spade_rl.sandbox import CallResult, SandboxPool, Status

MALFORMED_ACTIONS = ("", "this is not a valid action %%% \\boxed{??}")


@dataclass
class ValidationReport:
    valid: bool
    reason: str  # "ok" or the code of the first failed check
    message: str = ""
    class_name: str = ""
    checks: list[str] = field(default_factory=list)  # the checks that passed, in order
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ValidationSettings:
    seed: int = 0
    reward_range: tuple[float, float] = (0.0, 1.0)
    env_kwargs: dict = field(default_factory=dict)


class _Failed(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _expect_ok(result: CallResult, phase: str) -> object:
    if result.ok:
        return result.value
    if result.status is Status.EXCEPTION:
        reason = {"exception": f"{phase}_raised", "unserializable": f"{phase}_bad_type"}.get(
            result.reason, result.reason
        )
        detail = f"{result.error_type}: {result.error}" if result.error_type else result.error
        raise _Failed(reason, f"{phase}: {detail}")
    raise _Failed(result.reason, f"{phase}: {result.error}")


def validate_source(
    pool: SandboxPool, source: str, settings: ValidationSettings | None = None
) -> ValidationReport:
    """Run the battery on ``source``; never raises for anything the environment does."""
    settings = settings or ValidationSettings()
    start = time.perf_counter()
    report = ValidationReport(valid=False, reason="ok")
    env = None
    try:
        try:
            names = find_env_classes(source)
        except ContractViolation as exc:
            raise _Failed(exc.reason, str(exc)) from None
        if len(names) != 1:
            reason = "no_env_class" if not names else "multiple_env_classes"
            raise _Failed(reason, f"expected exactly one *Env class, found {names or 'none'}")
        report.checks.append("one_env_class")
        opened = pool.open(source, kwargs=settings.env_kwargs)
        _expect_ok(opened, "open")
        env = opened.value
        report.class_name = env.class_name
        report.checks.append("instantiates")
        _check(lambda: check_reset_value(_expect_ok(env.reset(settings.seed), "reset")))
        report.checks.append("reset_types")
        actions = _check(lambda: check_solution_value(_expect_ok(env.solution(), "solution")))
        report.checks.append("solution_types")
        for action in (actions[0], *MALFORMED_ACTIONS):
            _check(lambda a=action: check_step_value(_expect_ok(env.step(a), "step"), settings.reward_range))
            # A finished episode may answer anything valid; start again so each action is probed.
            _check(lambda: check_reset_value(_expect_ok(env.reset(settings.seed), "reset")))
        report.checks.append("step_types")
        report.valid = True
    except _Failed as exc:
        report.reason, report.message = exc.reason, str(exc)
    finally:
        if env is not None:
            env.close()
        report.seconds = time.perf_counter() - start
    return report


def _check(fn):
    try:
        return fn()
    except ContractViolation as exc:
        raise _Failed(exc.reason, str(exc)) from None
