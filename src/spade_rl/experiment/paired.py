"""Paired statistics of an experiment's evaluations: mean returns, pooled seeds, per-category scores.

Win rates are compared with McNemar's exact test (:mod:`spade_rl.evaluate.results`). This module adds
what a win rate cannot show: the **mean return** (a suite's partial credit, ``ItemResult.score``) with
a 95% bootstrap interval, and the **paired sign-flip test** on the per-item differences of two
evaluations of the same items (exact up to 16 non-zero differences, otherwise a seeded Monte Carlo
estimate with 20,000 draws). With several seeds, **pooled** rows average each item over the seeds of
an arm first (the seeds share the items: same evaluation seed, same limit), so that one test compares
an arm with the base model or with the baseline over all its seeds.

    >>> sign_flip_p([1.0, 1.0, 1.0, 1.0])          # four items better, none worse: 2 / 2**4
    0.125
    >>> bootstrap_ci([0.0, 1.0], draws=200)[0] >= 0.0
    True

Everything is deterministic: the bootstrap and the Monte Carlo draws use fixed seeds.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

from spade_rl.evaluate.base import ItemResult

EXACT_UP_TO = 16  # non-zero differences: 2**16 sign patterns, enumerated
DRAWS = 20_000
BOOTSTRAP_DRAWS = 2_000


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def bootstrap_ci(values: Sequence[float], level: float = 0.95, draws: int = BOOTSTRAP_DRAWS) -> list[float]:
    """Percentile bootstrap interval of the mean of ``values`` (seeded: the same values give the same
    interval); ``[v, v]`` for a single value."""
    if not values:
        raise ValueError("bootstrap_ci needs at least one value")
    n = len(values)
    if n == 1 or min(values) == max(values):
        return [float(values[0]), float(values[0])]
    rng = random.Random(f"spade-rl/bootstrap/{n}")
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    tail = (1.0 - level) / 2.0
    low = means[max(0, math.floor(tail * draws))]
    high = means[min(draws - 1, math.ceil((1.0 - tail) * draws) - 1)]
    return [low, high]


def sign_flip_p(differences: Sequence[float], draws: int = DRAWS) -> float:
    """Two-sided p-value of the paired sign-flip (permutation) test that the mean difference is 0: the
    share of sign assignments of the non-zero differences whose mean is at least as far from 0 as the
    observed one. 1.0 when every difference is 0."""
    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return 1.0
    observed = abs(sum(nonzero)) - 1e-12  # ties count as at least as extreme
    if len(nonzero) <= EXACT_UP_TO:
        extreme = sum(
            1
            for signs in itertools.product((1, -1), repeat=len(nonzero))
            if abs(sum(s * d for s, d in zip(signs, nonzero, strict=True))) >= observed
        )
        return extreme / 2 ** len(nonzero)
    rng = random.Random(f"spade-rl/sign-flip/{len(nonzero)}")
    extreme = sum(
        1 for _ in range(draws) if abs(sum(d if rng.random() < 0.5 else -d for d in nonzero)) >= observed
    )
    return (extreme + 1) / (draws + 1)  # a Monte Carlo p-value is never 0


def by_item(items: Sequence[ItemResult], value: str = "score") -> dict[str, float]:
    """Item id -> its score (``value = "score"``) or 1.0/0.0 for won (``"correct"``). Items that were
    errors (the checker or environment failed: ``ItemResult.error``) have no value and are left out, so
    paired tests compare only items scored on both sides."""
    scored = [item for item in items if not getattr(item, "error", "")]
    if value == "correct":
        return {item.id: 1.0 if item.correct else 0.0 for item in scored}
    return {item.id: float(item.score) for item in scored}


def pooled(runs: Sequence[Sequence[ItemResult]], value: str = "score") -> dict[str, float]:
    """Each item's value averaged over ``runs`` (several seeds of one arm); only items every run has."""
    tables = [by_item(items, value) for items in runs]
    if not tables:
        return {}
    common = set(tables[0]).intersection(*tables[1:])
    return {item: sum(t[item] for t in tables) / len(tables) for item in sorted(common)}


def paired(a: dict[str, float], b: dict[str, float], alpha: float = 0.05) -> dict:
    """B minus A on the items both have: the mean difference, its sign-flip p-value and a flag."""
    common = sorted(set(a) & set(b))
    if not common:
        return {"diff": None, "p_value": None, "n": 0, "flag": "not tested", "test": "sign-flip"}
    differences = [b[i] - a[i] for i in common]
    p = sign_flip_p(differences)
    diff = sum(differences) / len(differences)
    flag = ("better" if diff > 0 else "worse") if p < alpha else "noise"
    return {"diff": diff, "p_value": p, "n": len(common), "flag": flag, "test": "sign-flip"}


def summary(values: dict[str, float]) -> dict:
    """Mean of the items' values with its 95% bootstrap interval and their number."""
    if not values:
        return {"mean": None, "ci": None, "n": 0}
    numbers = [values[i] for i in sorted(values)]
    return {"mean": mean(numbers), "ci": bootstrap_ci(numbers), "n": len(numbers)}
