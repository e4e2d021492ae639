"""What the validation battery does with the answers of the sandbox: a call's value or its failure as
a reason code, transcripts compared, the seeds validation plays (derived from the battery's random
seed) and the instances of one worker it plays.

Pure functions (no sandbox call here); :mod:`spade_rl.design.validate` runs the battery with them.
"""

from __future__ import annotations

import hashlib
import json
import random

from spade_rl.design.report import Failed
from spade_rl.envs.contract import ContractViolation
from spade_rl.sandbox import CallResult, Status

PLAY_PHASES = ("reset", "step", "solution")  # the calls in which reading a clock is refused


def value_of(result: CallResult, phase: str):
    """The value of a sandbox call, or ``Failed`` with its reason: the environment's own exception in
    ``phase`` is ``<phase>_raised`` (an unserializable value ``<phase>_bad_type``), a failure of the
    sandbox (timeout, crash, ...) keeps the sandbox's code, and a ``reset``, ``step`` or ``solution``
    that read a clock is ``nondeterministic`` (the worker's clock is virtual, the same in validation
    and in play, but an environment that reads one is written to tell the two apart, or depends on
    the time; its import and constructor may read one, as some modules do when imported)."""
    if result.ok and result.clock_reads and phase in PLAY_PHASES:
        raise Failed(
            "nondeterministic",
            f"{phase} read the clock ({', '.join(result.clock_reads)}): an environment must give the same "
            "transcript for a seed whatever the time, and play is paced otherwise than validation",
        )
    if result.ok:
        return result.value
    if result.status is Status.EXCEPTION:
        reason = {"exception": f"{phase}_raised", "unserializable": f"{phase}_bad_type"}.get(
            result.reason, result.reason
        )
        detail = f"{result.error_type}: {result.error}" if result.error_type else result.error
        raise Failed(reason, f"{phase}: {detail}")
    raise Failed(result.reason, f"{phase}: {result.error}")


def contract(check, *args):
    """``check(*args)`` of the environment contract, its violation as ``Failed``."""
    try:
        return check(*args)
    except ContractViolation as exc:
        raise Failed(exc.reason, str(exc)) from None


def short(value) -> str:
    """A value as JSON of at most 60 characters, for a message."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def canonical(transcript: list) -> str:
    """One text per transcript (JSON, keys sorted): equal texts, equal transcripts."""
    return json.dumps(transcript, sort_keys=True, default=repr)


def ended(transcript: list) -> bool:
    """Whether a transcript (the reset, then ``(observation, reward, terminated, truncated, info)`` per
    step) has a step that ended its episode, terminated or truncated."""
    return len(transcript) > 1 and bool(transcript[-1][2] or transcript[-1][3])


def difference(transcript: list, expected: list) -> str | None:
    """Where two transcripts first differ ("reset", "step N", or None when they are the same)."""
    if canonical(transcript) == canonical(expected):
        return None
    for index in range(max(len(transcript), len(expected))):
        if index >= len(transcript) or index >= len(expected):
            return f"step {index} (one transcript ends earlier)"
        if canonical(transcript[index]) != canonical(expected[index]):
            return "reset" if index == 0 else f"step {index}"
    return "an unknown place"  # equal item by item, yet not as a whole: not reachable with JSON values


def probed_instances(first: int, last: int) -> list[int]:
    """The instance numbers in ``[first, last]`` that the stacked-instance check plays (the others are
    only made and closed): every power of two and the number after it (both parities at every scale),
    and the last two. A counter that turns an environment from honest to rigged at any count is met
    before twice that count, and one that rigs every other instance at once."""
    numbers = {n for k in range(max(last, 1).bit_length() + 1) for n in (2**k, 2**k + 1)} | {last - 1, last}
    return sorted(n for n in numbers if first <= n <= last)


def derived_seeds(source: str, purpose: str, seed: int, count: int) -> list[int]:
    """``count`` distinct seeds in [0, 2**31), other than ``seed``, drawn from ``seed``, ``purpose`` and
    the source's hash: the same three always give the same ones (a report's ``seed`` replays its
    validation). The battery draws ``seed`` itself from a random source the environment cannot read,
    so that none of them can be computed by the environment (its module can read its own source)."""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    rng = random.Random(f"{purpose}:{seed}:{digest}")
    seeds: list[int] = []
    while len(seeds) < count:
        drawn = rng.randrange(2**31)
        if drawn != seed and drawn not in seeds:
            seeds.append(drawn)
    return seeds


def validation_seeds(source: str, seed: int, count: int) -> list[int]:
    """The ``count`` seeds the solution is played on: ``seed`` (the battery's), then derived ones."""
    return [seed, *derived_seeds(source, "seeds", seed, count - 1)]
