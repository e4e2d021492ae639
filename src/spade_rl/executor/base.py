"""What the loop needs from the place where environment code runs: the ``Executor`` interface.

    executor.start()
    reports = executor.validate_many([(source, hint), ...], ValidationSettings())  # one per request
    episodes = run_episodes(policy, executor, specs, RolloutConfig())             # open_many/call_many
    executor.stats["timeouts"], executor.close()

An executor offers what ``spade_rl.rollout`` uses of a ``Sandbox`` (``open_many``, ``call_many``,
``close_env``, and handles with ``reset``/``step``/``solution``/``close``), plus ``validate_many``,
which runs the validation battery on many sources at once wherever the executor runs code. Two
implementations: ``LocalExecutor`` (one pool in this process tree) and ``RayExecutor`` (one pool per
Ray actor on a cluster). Both give the same results for the same inputs; only where and how fast differ.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from spade_rl.design.validate import ValidationReport, ValidationSettings
from spade_rl.sandbox import CallResult

ValidationRequest = tuple[str, str]  # (source, hint); the hint may be ""


class ExecutorError(RuntimeError):
    """The executor cannot run work at all (no actor left, none could be placed): the message says why."""


@runtime_checkable
class Executor(Protocol):
    kind: str

    def start(self) -> None: ...

    def close(self) -> None: ...

    @property
    def stats(self) -> dict[str, int]: ...

    def validate_many(
        self, requests: Sequence[ValidationRequest], settings: ValidationSettings
    ) -> list[ValidationReport]: ...

    def open_many(
        self,
        requests: list[tuple[str, dict | None]],
        timeout_s: float | None = None,
        fresh_worker: bool = False,
    ) -> list[CallResult]: ...

    def call_many(
        self, calls: list[tuple[Any, str, dict]], timeout_s: float | None = None
    ) -> list[CallResult]: ...

    def close_env(self, env: Any) -> CallResult: ...


def apply_judge(report: ValidationReport, source: str, hint: str, settings: ValidationSettings) -> None:
    """The battery's last check, run here on a report that passed every other check elsewhere.

    A judge (an LLM, say) lives with the driver, not with the workers that run environments, so a
    remote executor runs the battery without it and then calls this, which does what the battery's
    own judge step does: the ``judge`` check, ``judge_rejected``, and the overall time budget."""
    if not report.valid or settings.judge is None:
        return
    started = time.perf_counter()
    accepted, why = settings.judge(source, hint)
    elapsed = time.perf_counter() - started
    report.seconds += elapsed
    if not accepted:
        report.valid, report.reason, report.message = False, "judge_rejected", f"the judge rejected it: {why}"
        return
    report.checks.append("judge")
    report.timings["judge"] = elapsed
    if report.seconds > settings.total_timeout_s:
        report.valid, report.reason = False, "validation_timeout"
        report.message = f"validation took over its budget of {settings.total_timeout_s} s (after judge)"
