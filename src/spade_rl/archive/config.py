"""Configuration of the environment archive: the frontier, memory and training-pool sampling, SQLite.

One frozen dataclass, validated on construction; every bad value raises ``ValueError`` saying what
was wrong and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SYNCHRONOUS_MODES = ("FULL", "EXTRA", "NORMAL")


MEMORY_MODES = ("weighted", "reference")


@dataclass(frozen=True)
class ArchiveConfig:
    """How the archive chooses environments for the designer's memory and the agent's training pool.

    - ``frontier_low``/``frontier_high``: the frontier, the range of latest no-hint win rates
      (inclusive). Memory positives lie inside it; memory negatives outside it (too hard below, too
      easy above).
    - ``memory_positives``/``memory_negatives``: how many of each a memory sample asks for.
    - ``memory_size``: positives are drawn from the best ``memory_size`` frontier environments (ranked
      by :func:`~spade_rl.archive.sampling.pool_weight`): the "most useful few hundred" of SPADE.
    - ``weight_floor``, ``regret_mix``, ``unplayed_weight``: the training-pool weight, see
      :func:`~spade_rl.archive.sampling.pool_weight`. The floor keeps every valid environment drawable.
    - ``memory_mode``: "weighted" (ours, above) or "reference", the reference implementation's memory
      (spade-rl/spade, ``spade/core/env_memory.py``): only the latest ``memory_window`` played
      environments count (its FIFO of 200); positives are drawn uniformly from the top ``max(3 n, 10)``
      frontier ones by regret; negatives from those with a win rate below ``memory_negative_below`` or
      above ``memory_negative_above`` (0.1, 0.9); no reference environments stand in for missing positives.
    - ``flag_changed``, ``flag_win_rate_shift``, ``flag_p_value``: the play-time guard
      (:mod:`spade_rl.loop.guard`): flag, and so leave out of the pool and the memory, an environment
      won by an empty action in training, one answer of which won at far more seeds than validation lets
      one answer win (a binomial tail probability below ``flag_p_value``), or whose win rate moved by
      at least ``flag_win_rate_shift`` from what was recorded before with a binomial tail probability
      below ``flag_p_value``.
    - ``busy_timeout_s``: how long a writer waits for another writer's transaction before failing.
    - ``synchronous``: SQLite's ``PRAGMA synchronous``. ``FULL`` (default) also survives a power cut;
      ``NORMAL`` survives a killed process but may lose the last commits on a power cut.
    """

    frontier_low: float = 0.15
    frontier_high: float = 0.85
    memory_positives: int = 2
    memory_negatives: int = 1
    memory_size: int = 256
    memory_mode: str = "weighted"
    memory_window: int = 200
    memory_negative_below: float = 0.1
    memory_negative_above: float = 0.9
    weight_floor: float = 0.05
    regret_mix: float = 0.5
    unplayed_weight: float = 0.5
    flag_changed: bool = True
    flag_win_rate_shift: float = 0.6
    flag_p_value: float = 1e-4
    busy_timeout_s: float = 30.0
    synchronous: str = "FULL"

    def __post_init__(self) -> None:
        for name in (
            "frontier_low",
            "frontier_high",
            "weight_floor",
            "regret_mix",
            "unplayed_weight",
            "busy_timeout_s",
        ):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value):
                raise ValueError(f"archive setting {name} must be a finite number, got {value!r}")
        if not 0.0 <= self.frontier_low < self.frontier_high <= 1.0:
            raise ValueError(
                f"archive frontier [{self.frontier_low}, {self.frontier_high}] is not allowed: "
                "need 0 <= frontier_low < frontier_high <= 1"
            )
        if self.memory_mode not in MEMORY_MODES:
            raise ValueError(f"archive memory_mode {self.memory_mode!r} is not one of {list(MEMORY_MODES)}")
        if not 0.0 <= self.memory_negative_below <= self.memory_negative_above <= 1.0:
            raise ValueError(
                "archive memory_negative_below and memory_negative_above must satisfy 0 <= below <= "
                f"above <= 1, got {self.memory_negative_below!r} and {self.memory_negative_above!r}"
            )
        for name, least in (
            ("memory_positives", 0),
            ("memory_negatives", 0),
            ("memory_size", 1),
            ("memory_window", 1),
        ):
            value = getattr(self, name)
            if type(value) is not int or value < least:
                raise ValueError(f"archive setting {name} must be an integer >= {least}, got {value!r}")
        if not 0.0 < self.weight_floor <= 1.0:
            raise ValueError(
                f"archive setting weight_floor must lie in (0, 1] so that every valid environment "
                f"can be drawn, got {self.weight_floor!r}"
            )
        if not 0.0 <= self.regret_mix <= 1.0:
            raise ValueError(f"archive setting regret_mix must lie in [0, 1], got {self.regret_mix!r}")
        if self.unplayed_weight <= 0.0:
            raise ValueError(
                f"archive setting unplayed_weight must be positive, got {self.unplayed_weight!r}"
            )
        if self.busy_timeout_s < 0.0:
            raise ValueError(f"archive setting busy_timeout_s must be >= 0, got {self.busy_timeout_s!r}")
        if type(self.flag_changed) is not bool:
            raise ValueError(f"archive setting flag_changed must be true or false, got {self.flag_changed!r}")
        for name, high in (("flag_win_rate_shift", 1.0), ("flag_p_value", 1.0)):
            value = getattr(self, name)
            if type(value) not in (int, float) or not 0.0 < value <= high:
                raise ValueError(f"archive setting {name} must lie in (0, {high:g}], got {value!r}")
        if self.synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(
                f"archive setting synchronous is {self.synchronous!r}; allowed: {list(SYNCHRONOUS_MODES)}"
            )
