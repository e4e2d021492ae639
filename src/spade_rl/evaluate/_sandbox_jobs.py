"""One-step jobs in the sandbox: run a trusted runner class on untrusted input, many at a time.

    results = run_jobs(sandbox, RUNNER_SOURCE, [Job(kwargs={"entry": ...}, action=model_text)], timeout_s=10)
    results[0].ok, results[0].value          # CallResult of the job's step: [obs, reward, term, trunc, info]

The evaluation suites check or execute what a model wrote (BFCL's checkers and simulated APIs, HumanEval
programs) only inside :class:`~spade_rl.sandbox.Sandbox` workers. Each check is a *job*: open one
instance of a runner class (an environment class whose ``step`` does the work; its source is ours, the
``action`` carries the model's text), call ``step(action)`` once, close it. Jobs run on several
workers at once.

Failures of a job are its result (a timeout, a crashed worker, memory exhaustion), except:

- a job whose worker was killed because of *another* job on it (``worker_lost``) runs again, so that
  one hostile input never costs its neighbours their score;
- a runner source that fails to load or to instantiate raises :class:`SandboxJobError`: the source is
  ours, so that is a broken installation (for example a package the worker cannot import), not an
  answer of the model.

With ``fresh=True`` each job gets a new interpreter that has run nothing before (no job can see or
change what another left behind); otherwise jobs of the same runner share warm workers.

A job whose step never ran (:func:`never_ran`: its instance could not be opened, for instance because
its worker did not start, or its worker was lost to other jobs on every try) has a result that says
nothing about its input: the suites count it as an error, not as a wrong answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from spade_rl.sandbox import CallResult, EnvHandle, Sandbox, Status

log = logging.getLogger(__name__)

NOT_OPENED = "not_opened_"  # prefix of the reason of a job whose instance could not be opened
# A step stopped at one of these limits was stopped by what it was given (a checker judging a model's
# answer past its deadline or memory): a verdict on that input, unlike a crash or a lost worker.
INPUT_LIMITS = frozenset({Status.TIMEOUT, Status.MEMORY})


class SandboxJobError(RuntimeError):
    """The runner itself could not be loaded in the sandbox (an installation problem, not the model's)."""


@dataclass(frozen=True)
class Job:
    action: str  # what step() receives: the untrusted part
    kwargs: dict = field(default_factory=dict)  # the runner's constructor arguments (JSON; trusted data)


def run_jobs(
    sandbox: Sandbox,
    source: str,
    jobs: list[Job],
    timeout_s: float,
    *,
    fresh: bool = False,
    batch: int = 16,
) -> list[CallResult]:
    """The ``step`` result of each job, in order. ``batch`` jobs are opened at a time (with ``fresh``,
    that many new workers start together)."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    results: list[CallResult | None] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    while pending:
        lost = []
        for start in range(0, len(pending), batch):
            chunk = pending[start : start + batch]
            for index, result in zip(
                chunk, _run_chunk(sandbox, source, [jobs[i] for i in chunk], timeout_s, fresh), strict=True
            ):
                results[index] = result
                if result.status is Status.WORKER_LOST:
                    lost.append(index)
        if len(lost) == len(pending):  # nobody's own call ran: the workers die for another reason
            log.warning("%d sandbox jobs lost their workers without running; giving up on them", len(lost))
            break
        if lost:
            log.info("running %d sandbox jobs again: another job killed their worker", len(lost))
        pending = lost
    return results  # type: ignore[return-value]


def _run_chunk(
    sandbox: Sandbox, source: str, jobs: list[Job], timeout_s: float, fresh: bool
) -> list[CallResult]:
    out: list[CallResult | None] = [None] * len(jobs)
    handles: list[tuple[int, EnvHandle]] = []
    try:
        opened = sandbox.open_many([(source, job.kwargs) for job in jobs], fresh_worker=fresh)
        for index, result in enumerate(opened):
            if result.ok:
                handles.append((index, result.value))
            elif result.status is Status.EXCEPTION:
                raise SandboxJobError(
                    f"the sandbox could not load the evaluation runner ({result.reason}): {result.error}\n"
                    f"{result.traceback}".rstrip()
                )
            else:  # the worker did not start or load it: the step, and the input, never ran
                out[index] = replace(result, reason=NOT_OPENED + result.reason)
        steps = sandbox.call_many(
            [(handle, "step", {"action": jobs[index].action}) for index, handle in handles], timeout_s
        )
        for (index, _), result in zip(handles, steps, strict=True):
            out[index] = result
    finally:
        for _, handle in handles:
            handle.close()
    return out  # type: ignore[return-value]


def never_ran(result: CallResult) -> bool:
    """Whether a job's step never ran: the sandbox failed it before its input was used (an error of
    the harness, not a verdict on the input)."""
    return result.reason.startswith(NOT_OPENED) or result.status is Status.WORKER_LOST


def step_value(result: CallResult) -> tuple[str, float, dict] | None:
    """``(observation, reward, info)`` of a successful step with the types a runner returns, else
    ``None``. The value crossed from a worker where model code may have run: check every type."""
    value = result.value
    if not result.ok or not isinstance(value, list) or len(value) != 5:
        return None
    observation, reward, _, _, info = value
    if type(observation) is not str or type(reward) not in (int, float) or type(info) is not dict:
        return None
    return observation, float(reward), info
