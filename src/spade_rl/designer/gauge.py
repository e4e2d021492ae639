"""The gaming gauge: the share of an iteration's won designs that a gate would refuse on revalidation.

A designer paid for the agent's plays finds the designs validation lets through that pay without
teaching (docs/designing.md, "Designs that pay without teaching"). The gauge watches for them where they
matter: each of the iteration's new valid designs that the agent won at least once without the hint
(a design that pays) is validated again, with every gate on (``all_gates``: the common-answer and copy
caps, undetermined answers, the cap on a trivial policy's mean return, each at its default where the
run's configuration has it off) and seeds drawn anew. Metrics (``designer/`` namespace):

- ``won_designs``: the iteration's new valid designs won at least once without the hint;
- ``gaming_refused``: how many of them revalidation refused;
- ``gaming_gauge``: their share (None when no design was won): 0 is the target; above it, the
  designer is paid for something a gate catches (at the run's own gates, the luck of validation's
  seeds; with gates off, the class the gate closes).

A design revalidation refuses is gated: the gate multiplies, so its designer reward is the validity floor
(``rewards.designer_reward(gate=False)``, whenever it falls due), and it is flagged in the archive
(``gate_on_revalidation``), so the pool and the memory never draw it again. ``loop.gaming_gauge = false``
turns all of it off (it costs one validation per won design, about a second).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade_rl.design.report import ValidationSettings

if TYPE_CHECKING:
    from spade_rl.archive import Archive
    from spade_rl.executor import Executor
    from spade_rl.loop.stages import Design, PlayedEnv

log = logging.getLogger(__name__)
_DEFAULTS = ValidationSettings()


def all_gates(settings: ValidationSettings) -> ValidationSettings:
    """``settings`` with every gate that can be turned off on (at its default where it is off), and a
    seed drawn for each validation."""
    return dataclasses.replace(
        settings,
        seed=None,
        max_common_answer_win_rate=_or_default(settings, "max_common_answer_win_rate"),
        max_copy_win_rate=_or_default(settings, "max_copy_win_rate"),
        max_trivial_mean_return=_or_default(settings, "max_trivial_mean_return"),
        refuse_undetermined_answers=True,
        judge=None,  # the judge (an LLM) is the design phase's: not run again here
    )


def _or_default(settings: ValidationSettings, name: str):
    value = getattr(settings, name)
    return getattr(_DEFAULTS, name) if value is None else value


def won_designs(designs: Sequence[Design], played: Sequence[PlayedEnv]) -> list[Design]:
    """The new valid designs (not duplicates of archived ones) whose no-hint plays won at least once."""
    won = {p.env_id for p in played if any(e.won for e in p.nohint)}
    return [d for d in designs if d.valid and not d.duplicate and d.env_id in won]


FLAG_REASON = "gate_on_revalidation"  # the archive's flag of a design the gauge refused


@dataclass(frozen=True)
class Gauge:
    """One iteration's gauge: its metrics and the environment ids revalidation refused."""

    metrics: dict[str, float | None]
    refused: frozenset[int]


def gaming_gauge(
    designs: Sequence[Design],
    played: Sequence[PlayedEnv],
    archive: Archive,
    executor: Executor,
    settings: ValidationSettings,
    iteration: int,
) -> Gauge:
    """The gauge of ``iteration`` (see the module docstring): its won designs validated again with every
    gate on; those refused flagged in ``archive``. ``settings`` is how the iteration's designs were
    validated."""
    won = won_designs(designs, played)
    refused: set[int] = set()
    if won:
        requests = []
        for design in won:
            record = archive.get(design.env_id)
            requests.append((record.source, record.hint or ""))
        reports = executor.validate_many(requests, all_gates(settings))
        for design, report in zip(won, reports, strict=True):
            if not report.valid:
                refused.add(design.env_id)
                message = f"{report.reason}: {report.message}"[:1000]
                archive.flag(design.env_id, iteration, FLAG_REASON, message)
                log.info("gaming gauge: design %d refused on revalidation: %s", design.env_id, message)
    metrics = {
        "designer/won_designs": float(len(won)),
        "designer/gaming_refused": float(len(refused)),
        "designer/gaming_gauge": len(refused) / len(won) if won else None,
    }
    return Gauge(metrics, frozenset(refused))
