"""The maths of choosing environments: frontier weights, weighted draws, and the memory pick.

Pure functions over plain values; the archive feeds them rows and turns their choices into records.

- :func:`frontier_closeness`: 1 at the middle of the frontier, 0 at its edges and outside;
- :func:`pool_weight`: ``floor + (1 - mix) * closeness + mix * clip(regret, 0, 1)``;
- :func:`weighted_sample`: k distinct items, each draw proportional to weight among those left;
- :func:`draw_pool`: the training pool's draw from its weights, some environments left out;
- :func:`retired`: designed environments that many plays never won (``loop.retire_after_plays``);
- :func:`pick_memory`: SPADE step 1, positives from the frontier and negatives from outside it.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from spade_rl.archive.config import ArchiveConfig

T = TypeVar("T")


def frontier_closeness(win_rate: float, low: float, high: float) -> float:
    """``max(0, 1 - |win_rate - mid| / half)`` with ``mid = (low + high) / 2``, ``half = (high - low) / 2``.

    Band [0.15, 0.85]: 0.5 -> 1.0, 0.325 -> 0.5, 0.15 -> 0.0, 0.95 -> 0.0.
    """
    mid, half = (low + high) / 2.0, (high - low) / 2.0
    return max(0.0, 1.0 - abs(win_rate - mid) / half)


def on_frontier(win_rate: float, low: float, high: float) -> bool:
    """The frontier is inclusive at both edges."""
    return low <= win_rate <= high


def pool_weight(win_rate: float | None, regret: float | None, config: ArchiveConfig) -> float:
    """Training-pool weight of a valid environment from its latest no-hint win rate and regret.

    ``w = floor + (1 - mix) * frontier_closeness(win_rate) + mix * clip(regret, 0, 1)``, so every
    environment weighs at least ``floor`` > 0, and at most ``floor + 1``. An environment never played
    (``win_rate is None``) weighs ``unplayed_weight``.
    Defaults (frontier [0.15, 0.85], floor 0.05, mix 0.5): win 0.5, regret 0.4 -> 0.05 + 0.5 + 0.2 = 0.75.
    """
    if win_rate is None:
        return config.unplayed_weight
    closeness = frontier_closeness(win_rate, config.frontier_low, config.frontier_high)
    regret_part = min(max(regret or 0.0, 0.0), 1.0)
    return config.weight_floor + (1.0 - config.regret_mix) * closeness + config.regret_mix * regret_part


def probabilities(weights: Sequence[float]) -> list[float]:
    """``w_i / sum(w)``: the chance of each item on one draw."""
    total = sum(weights)
    return [w / total for w in weights]


def weighted_sample(items: Sequence[T], weights: Sequence[float], k: int, rng: random.Random) -> list[T]:
    """``min(k, len(items))`` distinct items; each draw picks among the items left with chance
    proportional to weight. Deterministic for a given ``rng`` state and item order."""
    if len(items) != len(weights):
        raise ValueError(f"{len(items)} items but {len(weights)} weights")
    if any(w <= 0.0 for w in weights):
        raise ValueError("weights must be positive")
    left, left_w, chosen = list(items), list(weights), []
    for _ in range(min(k, len(left))):
        x, acc = rng.random() * sum(left_w), 0.0
        index = len(left) - 1  # rounding can leave x just above the last cumulative sum
        for i, w in enumerate(left_w):
            acc += w
            if x < acc:
                index = i
                break
        chosen.append(left.pop(index))
        left_w.pop(index)
    return chosen


def draw_pool(
    weights: dict[int, float],
    n: int,
    rng: random.Random,
    *,
    replace: bool = False,
    exclude: Collection[int] = (),
) -> list[int]:
    """``n`` ids of ``weights`` (id -> pool weight) drawn by weight, the ids in ``exclude`` left out:
    independent draws with ``replace`` (``rng.choices``), else distinct ones (:func:`weighted_sample`, at
    most all of them). Nothing to draw from: ``[]``. With nothing excluded this is ``Archive.sample_pool``'s
    draw, with the same ``rng`` calls."""
    ids = [env_id for env_id in weights if env_id not in exclude]
    if not ids or n <= 0:
        return []
    w = [weights[env_id] for env_id in ids]
    return rng.choices(ids, w, k=n) if replace else weighted_sample(ids, w, n, rng)


def retired(plays: dict[int, Sequence[tuple[int, float]]], after_plays: int) -> set[int]:
    """The environments whose recorded no-hint plays (per environment, ``(episodes, win rate)`` of each
    recorded iteration) add up to at least ``after_plays`` episodes without a single win. ``after_plays``
    0: none. An iteration's wins are ``round(episodes * win_rate)``."""
    if after_plays <= 0:
        return set()
    out = set()
    for env_id, rows in plays.items():
        episodes = sum(n for n, _ in rows)
        wins = sum(round(n * rate) for n, rate in rows)
        if episodes >= after_plays and wins == 0:
            out.add(env_id)
    return out


@dataclass(frozen=True)
class Candidate:
    """A valid environment as the memory sees it: its latest no-hint win rate and regret, if played."""

    env_id: int
    win_rate: float | None
    regret: float | None


@dataclass(frozen=True)
class MemoryPick:
    """Which environments to show the designer, and why.

    ``kinds`` maps each chosen id to ``"frontier"`` (on the frontier), ``"reference"`` (fallback),
    ``"too_easy"`` (above the frontier) or ``"too_hard"`` (below it). ``complete`` says whether every
    requested example was found; ``message`` says what was missing and what was used instead.
    """

    positives: tuple[int, ...]
    negatives: tuple[int, ...]
    kinds: dict[int, str]
    fallback: bool
    complete: bool
    message: str


def pick_memory(
    candidates: Sequence[Candidate],
    reference_ids: Sequence[int],
    rng: random.Random,
    config: ArchiveConfig,
    n_positive: int,
    n_negative: int,
) -> MemoryPick:
    """SPADE step 1: ``n_positive`` frontier environments and ``n_negative`` too easy or too hard ones.

    Positives: played candidates whose win rate lies on the frontier; the best ``config.memory_size`` of
    them by :func:`pool_weight` (ties: lower id first) are drawn by that weight without replacement.
    Negatives: played candidates outside the frontier, drawn uniformly. Without any positive, up to
    ``n_positive`` of ``reference_ids`` are drawn uniformly instead (``fallback=True``); with fewer
    than asked, the sample is smaller. Never raises for a sparse archive: ``message`` explains it.
    """
    if config.memory_mode == "reference":
        return _pick_memory_as_the_reference(candidates, rng, config, n_positive, n_negative)
    low, high = config.frontier_low, config.frontier_high
    played = [c for c in candidates if c.win_rate is not None]
    frontier = [c for c in played if on_frontier(c.win_rate, low, high)]  # type: ignore[arg-type]
    outside = [c for c in played if not on_frontier(c.win_rate, low, high)]  # type: ignore[arg-type]
    weight = {c.env_id: pool_weight(c.win_rate, c.regret, config) for c in frontier}
    best = sorted(frontier, key=lambda c: (-weight[c.env_id], c.env_id))[: config.memory_size]
    positives = weighted_sample([c.env_id for c in best], [weight[c.env_id] for c in best], n_positive, rng)
    kinds = dict.fromkeys(positives, "frontier")
    notes, fallback = [], False
    if n_positive and not positives:
        # Prefer references the agent has not shown to be too easy or too hard (those are negatives).
        outside_ids = {c.env_id for c in outside}
        eligible = [r for r in reference_ids if r not in outside_ids] or list(reference_ids)
        positives = rng.sample(eligible, min(n_positive, len(eligible)))
        kinds.update(dict.fromkeys(positives, "reference"))
        fallback = True
        notes.append(
            f"no played environment has a win rate on the frontier [{low}, {high}]; "
            f"using {len(positives)} reference environment(s) as positive examples"
        )
    if len(positives) < n_positive:
        notes.append(f"found {len(positives)} of {n_positive} positive examples")
    outside = [c for c in outside if c.env_id not in kinds]  # an example is shown once, in one role
    negatives = rng.sample(outside, min(n_negative, len(outside)))
    for c in negatives:
        kinds[c.env_id] = "too_hard" if c.win_rate < low else "too_easy"  # type: ignore[operator]
    if len(negatives) < n_negative:
        notes.append(
            f"found {len(negatives)} of {n_negative} negative examples (win rate outside the frontier)"
        )
    complete = len(positives) == n_positive and len(negatives) == n_negative and not fallback
    return MemoryPick(
        positives=tuple(positives),
        negatives=tuple(c.env_id for c in negatives),
        kinds=kinds,
        fallback=fallback,
        complete=complete,
        message="; ".join(notes) if notes else "ok",
    )


def _pick_memory_as_the_reference(
    candidates: Sequence[Candidate],
    rng: random.Random,
    config: ArchiveConfig,
    n_positive: int,
    n_negative: int,
) -> MemoryPick:
    """``memory_mode = "reference"`` (see :class:`ArchiveConfig`): the latest ``memory_window`` played
    environments; positives uniformly from the top ``max(3 n, 10)`` frontier ones by regret (ties: the
    newer first), negatives uniformly from the too easy and too hard ones."""
    low, high = config.frontier_low, config.frontier_high
    played = sorted((c for c in candidates if c.win_rate is not None), key=lambda c: c.env_id)
    window = played[-config.memory_window :]
    frontier = [c for c in window if on_frontier(c.win_rate, low, high)]  # type: ignore[arg-type]
    ranked = sorted(frontier, key=lambda c: (-(c.regret or 0.0), -c.env_id))[: max(3 * n_positive, 10)]
    positives = [c.env_id for c in rng.sample(ranked, min(n_positive, len(ranked)))]
    kinds = dict.fromkeys(positives, "frontier")
    extremes = [
        c
        for c in window
        if c.env_id not in kinds
        and (c.win_rate < config.memory_negative_below or c.win_rate > config.memory_negative_above)  # type: ignore[operator]
    ]
    negatives = rng.sample(extremes, min(n_negative, len(extremes)))
    for c in negatives:
        kinds[c.env_id] = "too_hard" if c.win_rate < low else "too_easy"  # type: ignore[operator]
    notes = []
    if len(positives) < n_positive:
        notes.append(f"found {len(positives)} of {n_positive} positive examples (reference memory)")
    if len(negatives) < n_negative:
        notes.append(f"found {len(negatives)} of {n_negative} negative examples (reference memory)")
    return MemoryPick(
        positives=tuple(positives),
        negatives=tuple(c.env_id for c in negatives),
        kinds=kinds,
        fallback=False,
        complete=not notes,
        message="; ".join(notes) if notes else "ok",
    )
