"""Sampled evaluation: N samples per item at a temperature, pass@k by the unbiased estimator.

    check_samples(8, 0.6, "eval")                 # raises ValueError naming the key and what is allowed
    pass_at_k(n=4, c=1, k=2)                      # 0.5
    ks_for(8)                                     # [1, 2, 4, 8]
    result = run_suite(suite, policy, ctx)        # ctx.samples == 1: suite.run(policy, ctx), as before

With ``ctx.samples`` N > 1 a suite is run N times at ``ctx.sampling`` (its temperature must be > 0), the
d-th run with ``ctx.draw = d``: the items are the same in every run (selection derives from ``ctx.seed``
alone) and only the generation seeds change. With ``ctx.greedy`` it is run once more at temperature 0
first. The runs are merged item by item (their ids must agree): each item keeps its own result from the
greedy run (or, without one, from the first sample) and gains ``samples``, the (correct, score) pair of
every sampled run in which it was scored; a run in which it was an error (its checker or environment
failed: :mod:`spade_rl.evaluate.base`) is counted in ``sample_errors`` instead and left out, so an item
has fewer than N samples then and pass@k stops at the fewest any item has. The suite's metrics, options
and responses are those of that same run; its pass@k (k = 1, 2, 4, ... and N) and its mean accuracy
over the samples are derived from the pairs (:class:`~spade_rl.evaluate.base.SuiteResult`), per
category too (Reasoning Gym's families).

pass@k is the probability that at least one of k samples drawn without replacement from an item's n is
correct, the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code",
eq. 1), averaged over items; pass@1 is the mean accuracy over samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spade_rl.evaluate.base import EvalContext, ItemResult, Suite, SuiteResult
    from spade_rl.policy import Policy

MAX_SAMPLES = 1024


def check_samples(samples: object, temperature: object, where: str) -> None:
    """Raise ``ValueError`` unless ``samples`` is an integer in [1, MAX_SAMPLES] and ``temperature`` a finite
    number >= 0, and more than one sample comes with a temperature above 0. ``where`` prefixes the keys
    in the message ("eval" gives "eval.samples"; "-" gives the command line's "--samples")."""
    prefix = "--" if where == "-" else f"{where}."
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(
            f"{prefix}samples must be an integer from 1 (one answer per item, as before) to {MAX_SAMPLES}, "
            f"got {samples!r}"
        )
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(
            f"{prefix}temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}"
        )
    if samples > 1 and temperature == 0:
        raise ValueError(
            f"{prefix}samples = {samples} needs {prefix}temperature > 0: at temperature 0 every sample is "
            "the same greedy answer (the paper samples Reasoning Gym at 0.6)"
        )


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one item with ``c`` of ``n`` samples correct:
    1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i), and 1 when n - c < k (every
    k-subset holds a correct sample). Written as a product, which stays exact in floats where the
    binomials overflow."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"pass_at_k: {name} must be an integer, got {value!r}")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def ks_for(n: int) -> list[int]:
    """The k reported for n samples: the powers of two up to n, and n itself."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    if n >= 1 and ks[-1] != n:
        ks.append(n)
    return ks


def pass_at_k_of(items: Sequence[ItemResult]) -> dict[int, float]:
    """pass@k averaged over the items that have samples, for every k of :func:`ks_for` at the smallest
    number of samples an item has; empty when no item has samples."""
    sampled = [item for item in items if item.samples]
    if not sampled:
        return {}
    n = min(len(item.samples) for item in sampled)
    out = {}
    for k in ks_for(n):
        total = sum(pass_at_k(len(i.samples), sum(bool(c) for c, _ in i.samples), k) for i in sampled)
        out[k] = total / len(sampled)
    return out


def sample_means(items: Sequence[ItemResult]) -> tuple[float, float] | None:
    """(mean accuracy, mean score) over every sample of every item; ``None`` when none has samples."""
    pairs = [pair for item in items for pair in item.samples]
    if not pairs:
        return None
    return sum(bool(c) for c, _ in pairs) / len(pairs), sum(s for _, s in pairs) / len(pairs)


def run_suite(suite: Suite, policy: Policy, ctx: EvalContext) -> SuiteResult:
    """``suite`` on ``policy``: one run at ``ctx.sampling`` when ``ctx.samples`` is 1 (as before), else a
    greedy run (with ``ctx.greedy``) and ``ctx.samples`` sampled runs, merged (see the module docstring)."""
    if ctx.samples == 1:
        return suite.run(policy, ctx)
    greedy = None
    if ctx.greedy:
        once = replace(ctx, sampling=replace(ctx.sampling, temperature=0.0), samples=1, draw=0)
        greedy = suite.run(policy, once)
    runs = [suite.run(policy, replace(ctx, samples=1, draw=d)) for d in range(ctx.samples)]
    return merge_samples(greedy, runs)


def merge_samples(greedy: SuiteResult | None, runs: Sequence[SuiteResult]) -> SuiteResult:
    """The items of ``greedy`` (or of the first run) with the (correct, score) of every run that scored
    them as samples, and the number of runs in which they were errors as ``sample_errors``.
    Raises ``ValueError`` when the runs do not hold the same items in the same order (a suite whose item
    selection depends on more than the seed: a bug)."""
    if not runs:
        raise ValueError("merge_samples needs at least one sampled run")
    primary = greedy if greedy is not None else runs[0]
    ids = [item.id for item in primary.items]
    for d, run in enumerate(runs):
        if [item.id for item in run.items] != ids:
            raise ValueError(
                f"suite {primary.suite!r}: sampled run {d} holds other items than the "
                f"{'greedy run' if greedy is not None else 'first run'}; its item selection must depend "
                "on the evaluation seed only"
            )
    items = []
    for i, item in enumerate(primary.items):
        drawn = [run.items[i] for run in runs]
        samples = [(d.correct, d.score) for d in drawn if not d.error]
        items.append(replace(item, samples=samples, sample_errors=len(drawn) - len(samples)))
    seconds = sum(run.seconds for run in runs) + (greedy.seconds if greedy is not None else 0.0)
    return replace(primary, items=items, seconds=seconds)
