"""The comparison of an experiment's arms: one table per suite, and a summary of each arm's training.

    comparison = build_comparison(experiment, records)      # plain data, written as comparison.json
    json_path, md_path = write_comparison(comparison, folder)   # and comparison.md

Per suite, a row for the starting model ("base") and a row per arm and seed with its score after
training, the 95% Wilson interval, and two differences, each tested by
:func:`spade_rl.evaluate.results.compare` (McNemar's exact test on the paired items, since start and
end are evaluated on the same items): from the base model (the arm's own start) and from the baseline
arm (the fixed-pool arm, same seed). A difference whose p-value is not below 0.05 is flagged
"noise". With several seeds, a row per arm gives the mean score over seeds and its range. A sampled
evaluation (``[eval] samples`` > 1) adds each row's pass@k and mean accuracy over samples (shown, not
tested).

Beside the win rate, every row has the mean return (the suite's partial credit) with a 95% bootstrap
interval and its paired sign-flip tests against the same two references
(:mod:`spade_rl.experiment.paired`). With several seeds, "pooled" rows average each item over an arm's
seeds and test the arm once against the base model and the baseline; a per-category table (each held-out
environment or task family) shows where a difference comes from.

Score groups (the experiment's ``[scores]``, :class:`~spade_rl.experiment.spec.ScoreGroup`) each get a
table of their own over their games only, the first the primary score: the base model's and every
arm's win rate and mean return per seed and pooled over seeds, each tested with the paired sign-flip
test on the group's items against the base model and the baseline arm (on wins, which are 0 or 1, the
sign-flip test is McNemar's exact test). A game in no group is in neither score.

The training summary reads each run's ``metrics.jsonl``: iterations, seconds, designs proposed and
valid, and the agent's win rate, the fraction of played environments on the frontier and
the regret, as means over the first and the last third of the iterations. Beside it, the cost of
each run: its seconds of training and the tokens its updates trained on, the agent's and the
designer's (completion tokens with a loss, ``train/<role>/model_tokens``), and every token the updates
processed (``train/num_tokens``, prompts included), summed over its iterations.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from spade_rl.evaluate.results import ALPHA, EvalResult, compare
from spade_rl.experiment import paired
from spade_rl.experiment.arm_run import RunRecord
from spade_rl.experiment.comparison_markdown import CURRICULUM_MEANS, to_markdown, write_comparison
from spade_rl.experiment.spec import Experiment, ScoreGroup
from spade_rl.loop.stages import upgrade_metrics

FORMAT = "spade-rl-comparison/1"


def build_comparison(experiment: Experiment, records: list[RunRecord]) -> dict:
    """Plain data of the comparison (see the module docstring); ``records`` in the experiment's order."""
    results: dict[Path, EvalResult] = {}

    def read(path: Path) -> EvalResult:
        if path not in results:
            results[path] = EvalResult.read(path)
        return results[path]

    baseline = {r.seed: r for r in records if r.arm == experiment.baseline}
    starts = list(dict.fromkeys(r.start_path for r in records))
    suites: dict[str, dict] = {}
    for suite in experiment.evaluation.suites:
        base_rows = []
        for path in starts:
            result = read(path).suites.get(suite)
            arms = sorted(
                {r.arm for r in records if r.start_path == path}, key=[a.name for a in experiment.arms].index
            )
            base_rows.append(
                {"start": path.name, "arms": arms, **_score(result), "mean_return": _returns(result)}
            )
        rows = []
        for record in records:
            end = read(record.end_path)
            row = {"arm": record.arm, "seed": record.seed, **_score(end.suites.get(suite))}
            row["mean_return"] = _returns(end.suites.get(suite))
            start = read(record.start_path)
            row["vs_base"] = _difference(start, end, suite)
            row["vs_base_return"] = _return_difference(start, end, suite)
            other = baseline.get(record.seed)
            against = other is not None and other is not record
            row["vs_baseline"] = _difference(read(other.end_path), end, suite) if against else None
            row["vs_baseline_return"] = (
                _return_difference(read(other.end_path), end, suite) if against else None
            )
            rows.append(row)
        suites[suite] = {
            "base": base_rows,
            "rows": rows,
            "means": _means(rows, experiment),
            "pooled": _pooled(suite, records, read, experiment),
            "categories": _categories(suite, records, read, experiment),
        }
    return {
        "format": FORMAT,
        "name": experiment.name,
        "seeds": list(experiment.seeds),
        "budget": experiment.budget.describe(),
        "baseline": experiment.baseline,
        "alpha": ALPHA,
        "eval": {
            "suites": list(experiment.evaluation.suites),
            "limit": experiment.evaluation.limit,
            "seed": experiment.evaluation.seed,
            "max_new_tokens": experiment.evaluation.max_new_tokens,
            "samples": getattr(experiment.evaluation, "samples", 1),
            "temperature": getattr(experiment.evaluation, "temperature", 0.0),
            "greedy": getattr(experiment.evaluation, "greedy", True),
            "options": experiment.evaluation.options,
        },
        "suites": suites,
        "scores": [_group(group, records, read, experiment) for group in experiment.scores],
        "training": [_training(record) for record in records],
    }


def _score(suite) -> dict:
    if suite is None:
        return {"accuracy": None, "ci": None, "n": 0}
    score = {"accuracy": suite.accuracy, "ci": list(suite.ci), "n": suite.n}
    if suite.samples:  # a sampled evaluation: pass@k (keys are text, as JSON has them)
        score["pass_at_k"] = {str(k): v for k, v in suite.pass_at_k.items()}
        score["sample_accuracy"] = suite.sample_accuracy
    return score


def _difference(a: EvalResult, b: EvalResult, suite: str) -> dict | None:
    rows = [row for row in compare(a, b) if row.suite == suite and row.category is None]
    if not rows:
        return None
    row = rows[0]
    if not row.comparable or row.p_value is None:
        flag = "not tested"
    elif row.significant:
        flag = "better" if (row.diff or 0.0) > 0 else "worse"
    else:
        flag = "noise"
    return {
        "diff": row.diff,
        "p_value": row.p_value,
        "test": row.test,
        "significant": row.significant,
        "comparable": row.comparable,
        "flag": flag,
        "note": row.note,
    }


def _items(result: EvalResult | None, suite: str) -> list:
    found = None if result is None else result.suites.get(suite)
    return [] if found is None else found.items


def _returns(suite_result) -> dict:
    """Mean return (the suite's partial credit) of a result's items with its 95% bootstrap interval."""
    if suite_result is None:
        return paired.summary({})
    return paired.summary(paired.by_item(suite_result.items))


def _return_difference(a: EvalResult, b: EvalResult, suite: str) -> dict:
    return paired.paired(paired.by_item(_items(a, suite)), paired.by_item(_items(b, suite)), ALPHA)


def _pooled(suite: str, records: list[RunRecord], read, experiment: Experiment) -> list[dict]:
    """Per arm, every item averaged over the arm's seeds: win rate and mean return with intervals, and
    paired sign-flip tests against the base model and the baseline arm (pooled the same way)."""
    if len(experiment.seeds) < 2:
        return []
    by_arm: dict[str, list[RunRecord]] = {}
    for record in records:
        by_arm.setdefault(record.arm, []).append(record)
    pools = {
        arm: {
            value: paired.pooled([_items(read(r.end_path), suite) for r in runs], value)
            for value in ("correct", "score")
        }
        for arm, runs in by_arm.items()
    }
    out = []
    for arm, runs in by_arm.items():
        start = _items(read(runs[0].start_path), suite)
        row = {"arm": arm, "seeds": [r.seed for r in runs]}
        for value, name in (("correct", "win"), ("score", "return")):
            row[name] = paired.summary(pools[arm][value])
            row[f"{name}_vs_base"] = paired.paired(paired.by_item(start, value), pools[arm][value], ALPHA)
            base = pools.get(experiment.baseline)
            row[f"{name}_vs_baseline"] = (
                paired.paired(base[value], pools[arm][value], ALPHA)
                if base is not None and arm != experiment.baseline
                else None
            )
        out.append(row)
    return out


def _categories(suite: str, records: list[RunRecord], read, experiment: Experiment) -> list[dict]:
    """Per category (an environment, a task family): the base model's and each arm's win rate and mean
    return, the arm's pooled over its seeds."""
    starts = {r.start_path for r in records}
    names: list[str] = []
    for path in [*starts, *(r.end_path for r in records)]:
        for item in _items(read(path), suite):
            category = item.detail.get("category")
            if isinstance(category, str) and category not in names:
                names.append(category)
    if not names:
        return []
    first = records[0]
    out = []
    for category in names:

        def of(items, category=category):
            return [i for i in items if i.detail.get("category") == category]

        base_items = of(_items(read(first.start_path), suite))
        row = {
            "category": category,
            "base": {
                "win": paired.mean([1.0 if i.correct else 0.0 for i in base_items]),
                "return": paired.mean([i.score for i in base_items]),
                "n": len(base_items),
            },
            "arms": {},
        }
        for arm in dict.fromkeys(r.arm for r in records):
            runs = [of(_items(read(r.end_path), suite)) for r in records if r.arm == arm]
            wins = paired.pooled(runs, "correct")
            scores = paired.pooled(runs, "score")
            row["arms"][arm] = {
                "win": paired.mean(list(wins.values())),
                "return": paired.mean(list(scores.values())),
                "n": len(scores),
            }
        out.append(row)
    return out


def _group(group: ScoreGroup, records: list[RunRecord], read, experiment: Experiment) -> dict:
    """One score group: the base model's and each arm's win rate and mean return over the group's games,
    per seed and pooled over seeds, each tested (paired sign-flip on the group's items) against the base
    model and the baseline arm."""

    def items(path: Path) -> list:
        return [i for i in _items(read(path), group.suite) if i.detail.get("category") in group.categories]

    def values(found: list, value: str) -> dict[str, float]:
        return paired.by_item(found, value)

    starts = list(dict.fromkeys(r.start_path for r in records))
    base = []
    for path in starts:
        found = items(path)
        base.append(
            {
                "start": path.name,
                "arms": [
                    a.name
                    for a in experiment.arms
                    if any(r.arm == a.name and r.start_path == path for r in records)
                ],
                "win": paired.summary(values(found, "correct")),
                "return": paired.summary(values(found, "score")),
                "n": len(found),
            }
        )
    baseline = {r.seed: r for r in records if r.arm == experiment.baseline}
    rows = []
    for record in records:
        end, start = items(record.end_path), items(record.start_path)
        other = baseline.get(record.seed)
        against = other is not None and other is not record
        row = {"arm": record.arm, "seed": record.seed, "n": len(end)}
        for value, name in (("correct", "win"), ("score", "return")):
            row[name] = paired.summary(values(end, value))
            row[f"{name}_vs_base"] = paired.paired(values(start, value), values(end, value), ALPHA)
            row[f"{name}_vs_baseline"] = (
                paired.paired(values(items(other.end_path), value), values(end, value), ALPHA)
                if against
                else None
            )
        rows.append(row)
    pooled = []
    if len(experiment.seeds) > 1:
        by_arm: dict[str, list[RunRecord]] = {}
        for record in records:
            by_arm.setdefault(record.arm, []).append(record)
        pools = {
            arm: {v: paired.pooled([items(r.end_path) for r in runs], v) for v in ("correct", "score")}
            for arm, runs in by_arm.items()
        }
        for arm, runs in by_arm.items():
            start = items(runs[0].start_path)
            row = {"arm": arm, "seeds": [r.seed for r in runs]}
            for value, name in (("correct", "win"), ("score", "return")):
                row[name] = paired.summary(pools[arm][value])
                row[f"{name}_vs_base"] = paired.paired(values(start, value), pools[arm][value], ALPHA)
                reference = pools.get(experiment.baseline)
                row[f"{name}_vs_baseline"] = (
                    paired.paired(reference[value], pools[arm][value], ALPHA)
                    if reference is not None and arm != experiment.baseline
                    else None
                )
            pooled.append(row)
    return {
        "name": group.name,
        "suite": group.suite,
        "categories": list(group.categories),
        "primary": group == experiment.scores[0],
        "base": base,
        "rows": rows,
        "pooled": pooled,
    }


def _means(rows: list[dict], experiment: Experiment) -> list[dict]:
    if len(experiment.seeds) < 2:
        return []
    means = []
    for arm in experiment.arms:
        scores = [r["accuracy"] for r in rows if r["arm"] == arm.name and r["accuracy"] is not None]
        if scores:
            mean = sum(scores) / len(scores)
            means.append(
                {"arm": arm.name, "mean": mean, "min": min(scores), "max": max(scores), "seeds": len(scores)}
            )
    return means


def _training(record: RunRecord) -> dict:
    lines = []
    path = record.run_dir / "metrics.jsonl"
    if path.exists():
        lines = [
            upgrade_metrics(json.loads(line))
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    summary = {
        "arm": record.arm,
        "seed": record.seed,
        "iterations": record.iterations,
        "train_seconds": record.train_seconds,
        "stopped_by": record.stopped_by,
        "designs_proposed": sum(m.get("designer/proposed") or 0 for m in lines),
        "designs_valid": sum(
            round((m.get("designer/valid_rate") or 0.0) * (m.get("designer/proposed") or 0)) for m in lines
        ),
        "updates": sum(1 for m in lines if not m.get("train/skipped")),
        # What the updates trained on: completion tokens with a loss per role, every token processed
        # (None where the run's metrics have no such key: runs from before it was recorded)
        "agent_tokens": _total(lines, "train/agent/model_tokens"),
        "designer_tokens": _total(lines, "train/designer/model_tokens"),
        "processed_tokens": _total(lines, "train/num_tokens"),
        "update_seconds": _total(lines, "time/update_s"),
    }
    third = max(1, len(lines) // 3)
    for key in ("agent/win_rate", "frontier/fraction", "regret/mean"):
        summary[key] = {"first": _mean(lines[:third], key), "last": _mean(lines[-third:], key)}
    summary["curriculum"] = _curriculum(lines, third)
    return summary


# Issue 40's curriculum, per run: how the new designs played (the band fraction and win rate of the new
# designs, over the designs of a third of the run taken together, not a mean of per-iteration fractions),
# what the agent's groups were spent on, and the agent's format (malformed / illegal turns). Absent keys
# (runs that record no such metric: the fixed pool designs nothing) stay None.


def _curriculum(lines: list[dict], third: int) -> dict:
    played = _total(lines, "designer/new_played")
    in_band = _weighted_total(lines, "designer/band_fraction", "designer/new_played")
    out: dict = {
        "new_played": played,
        "new_in_band": in_band,
        "retired_total": _last(lines, "pool/retired_total"),
    }
    for key in ("designer/band_fraction", "designer/new_win_rate"):
        out[key] = {
            "first": _weighted_mean(lines[:third], key, "designer/new_played"),
            "last": _weighted_mean(lines[-third:], key, "designer/new_played"),
        }
    for key in CURRICULUM_MEANS:
        out[key] = {"first": _mean(lines[:third], key), "last": _mean(lines[-third:], key)}
    return out


def _pairs(lines: list[dict], key: str, weight: str) -> list[tuple[float, float]]:
    """(value, weight) of the lines holding both as finite numbers, with a positive weight."""
    pairs = []
    for m in lines:
        value, w = m.get(key), m.get(weight)
        if all(isinstance(x, int | float) and math.isfinite(x) for x in (value, w)) and w > 0:
            pairs.append((float(value), float(w)))
    return pairs


def _weighted_total(lines: list[dict], key: str, weight: str) -> float | None:
    pairs = _pairs(lines, key, weight)
    return sum(v * w for v, w in pairs) if pairs else None


def _weighted_mean(lines: list[dict], key: str, weight: str) -> float | None:
    pairs = _pairs(lines, key, weight)
    return sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else None


def _numbers(lines: list[dict], key: str) -> list:
    """The finite numbers ``key`` holds in ``lines``, in order."""
    return [m[key] for m in lines if isinstance(m.get(key), int | float) and math.isfinite(m[key])]


def _last(lines: list[dict], key: str) -> float | None:
    values = _numbers(lines, key)
    return float(values[-1]) if values else None


def _total(lines: list[dict], key: str) -> float | None:
    values = _numbers(lines, key)
    return float(sum(values)) if values else None


def _mean(lines: list[dict], key: str) -> float | None:
    values = _numbers(lines, key)
    return sum(values) / len(values) if values else None


__all__ = ["FORMAT", "build_comparison", "to_markdown", "write_comparison"]
