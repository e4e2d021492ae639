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
CURRICULUM_MEANS = ("format/malformed", "format/illegal", "pool/groups")


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


# --- writing ---------------------------------------------------------------------------------------------
def write_comparison(comparison: dict, folder: Path) -> tuple[Path, Path]:
    json_path, md_path = folder / "comparison.json", folder / "comparison.md"
    for path, text in (
        (json_path, json.dumps(comparison, indent=1) + "\n"),
        (md_path, to_markdown(comparison)),
    ):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return json_path, md_path


def to_markdown(comparison: dict) -> str:
    """The comparison as Markdown: the setting, a table per suite, the training summary, the figure."""
    evaluation = comparison["eval"]
    baseline = comparison["baseline"]
    samples = evaluation.get("samples", 1)  # comparisons written before sampled evaluation have none
    if samples > 1:
        how = f"{samples} samples per item at temperature {evaluation.get('temperature')}" + (
            ", scores greedy" if evaluation.get("greedy", True) else ", scores of the first sample"
        )
    else:
        how = "greedy" if not evaluation.get("temperature") else f"temperature {evaluation['temperature']}"
    out = [
        f"# Experiment {comparison['name']}",
        "",
        f"Budget: {comparison['budget']}; seeds: {', '.join(map(str, comparison['seeds']))}. "
        f"Evaluation ({how}, at most {evaluation['max_new_tokens']} new tokens): suites "
        f"{', '.join(evaluation['suites'])}, limit {evaluation['limit']}, seed {evaluation['seed']}.",
        "",
        "Scores are the percentage of items fully right, with a 95% Wilson interval. Differences are in "
        "percentage points, tested on the paired items (McNemar's exact test; two-proportion z-test when "
        f"the items differ); 'noise' means p >= {comparison['alpha']}. Mean returns (partial credit) have "
        "95% bootstrap intervals; their differences are tested with the paired sign-flip test.",
    ]
    for group in comparison.get("scores") or []:
        out += _group_markdown(group, baseline)
    for suite, table in comparison["suites"].items():
        out += ["", f"## {suite}" + (" (every game)" if comparison.get("scores") else ""), ""]
        header = ["arm", "seed", "score %", "95% CI", "n", "vs base (pp)"]
        if baseline:
            header.append(f"vs {baseline} (pp)")
        header += ["mean return [95% CI]", "vs base (return)"]
        if baseline:
            header.append(f"vs {baseline} (return)")
        sampled = any("pass_at_k" in r for r in table["base"] + table["rows"])
        if sampled:
            header += ["sample accuracy %", "pass@k %"]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        several = len(table["base"]) > 1
        for base in table["base"]:
            label = "base model" + (f" ({', '.join(base['arms'])})" if several else "")
            cells = [label, "-", _pct(base["accuracy"]), _ci(base["ci"]), str(base["n"]), ""]
            cells += [""] if baseline else []
            cells += [_ret(base.get("mean_return")), ""] + ([""] if baseline else [])
            out.append("| " + " | ".join(cells + (_pass_cells(base) if sampled else [])) + " |")
        for row in table["rows"]:
            cells = [row["arm"], str(row["seed"]), _pct(row["accuracy"]), _ci(row["ci"]), str(row["n"])]
            cells.append(_diff(row["vs_base"]))
            if baseline:
                cells.append("" if row["arm"] == baseline else _diff(row["vs_baseline"]))
            cells += [_ret(row.get("mean_return")), _pdiff(row.get("vs_base_return"))]
            if baseline:
                cells.append("" if row["arm"] == baseline else _pdiff(row.get("vs_baseline_return")))
            out.append("| " + " | ".join(cells + (_pass_cells(row) if sampled else [])) + " |")
        if table["means"]:
            out += [
                "",
                "Mean over seeds (range): "
                + "; ".join(
                    f"{m['arm']} {_pct(m['mean'])} ({_pct(m['min'])}-{_pct(m['max'])})"
                    for m in table["means"]
                ),
            ]
        out += _pooled_markdown(table.get("pooled") or [], baseline)
        out += _categories_markdown(table.get("categories") or [])
    out += ["", "## Training", ""]
    header = ["arm", "seed", "iterations", "training s", "designs valid/proposed", "updates"]
    header += ["agent win rate (first → last third)", "frontier fraction", "regret"]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in comparison["training"]:
        cells = [
            t["arm"],
            str(t["seed"]),
            f"{t['iterations']} ({t['stopped_by']})",
            f"{t['train_seconds']:.0f}",
        ]
        cells += [f"{t['designs_valid']}/{t['designs_proposed']}", str(t["updates"])]
        for key in ("agent/win_rate", "frontier/fraction", "regret/mean"):
            cells.append(f"{_num(t[key]['first'])} → {_num(t[key]['last'])}")
        out.append("| " + " | ".join(cells) + " |")
    out += _cost_markdown(comparison["training"])
    out += _curriculum_markdown(comparison["training"])
    out += ["", "![training curves](curves.png)", ""]
    return "\n".join(out)


def _group_markdown(group: dict, baseline: str) -> list[str]:
    """A score group's table: base, each arm and seed, and the arms pooled over seeds."""
    title = "Primary score" if group.get("primary") else "Score"
    out = [
        "",
        f"## {title}: {group['name']} ({', '.join(group['categories'])})",
        "",
        "Win % over these games only, 95% bootstrap interval over their items; differences in points, "
        "paired sign-flip test on the items (McNemar's exact test for wins); then the mean return.",
        "",
    ]
    header = ["arm", "seed", "n", "win %", "95% CI", "vs base (pp)"]
    header += [f"vs {baseline} (pp)"] if baseline else []
    header += ["mean return [95% CI]", "vs base (return)"]
    header += [f"vs {baseline} (return)"] if baseline else []
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    several = len(group["base"]) > 1
    for base in group["base"]:
        label = "base model" + (f" ({', '.join(base['arms'])})" if several else "")
        cells = [label, "-", str(base["n"]), _pct(base["win"]["mean"]), _ci(base["win"]["ci"]), ""]
        cells += [""] if baseline else []
        cells += [_ret(base["return"]), ""] + ([""] if baseline else [])
        out.append("| " + " | ".join(cells) + " |")
    for row in [
        *group["rows"],
        *({**r, "seed": "pooled " + ", ".join(map(str, r["seeds"]))} for r in group["pooled"]),
    ]:
        n = row.get("n", row["win"].get("n", "-"))
        cells = [row["arm"], str(row["seed"]), str(n), _pct(row["win"]["mean"]), _ci(row["win"]["ci"])]
        cells.append(_pdiff(row["win_vs_base"], scale=100))
        if baseline:
            cells.append("" if row["arm"] == baseline else _pdiff(row["win_vs_baseline"], scale=100))
        cells += [_ret(row["return"]), _pdiff(row["return_vs_base"])]
        if baseline:
            cells.append("" if row["arm"] == baseline else _pdiff(row["return_vs_baseline"]))
        out.append("| " + " | ".join(cells) + " |")
    return out


def _cost_markdown(training: list[dict]) -> list[str]:
    """Each run's training seconds and trained tokens side by side (a dash: not in its metrics)."""
    header = ["arm", "seed", "training s", "update s", "agent tokens trained", "designer tokens trained"]
    header += ["tokens processed"]
    out = [
        "",
        "Training cost: seconds of training (the budget) and of updates, completion tokens trained on per "
        "role (train/<role>/model_tokens) and every token the updates processed (train/num_tokens), "
        "summed over the run's iterations:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for t in training:
        cells = [t["arm"], str(t["seed"]), f"{t['train_seconds']:.0f}", _count(t.get("update_seconds"))]
        cells += [_count(t.get(k)) for k in ("agent_tokens", "designer_tokens", "processed_tokens")]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _curriculum_markdown(training: list[dict]) -> list[str]:
    """Per run, first third -> last third: the new designs' band fraction and win rate, the groups on the
    pool's older games, the agent's malformed and illegal turns; only where some run recorded them."""
    rows = [t for t in training if t.get("curriculum")]
    keys = ("designer/band_fraction", "designer/new_win_rate", *CURRICULUM_MEANS)
    if not any(t["curriculum"][k][end] is not None for t in rows for k in keys for end in ("first", "last")):
        return []
    out = [
        "",
        "## Curriculum",
        "",
        "First third of the run → last third. Band fraction: the share of the new valid designs played whose "
        "no-hint win rate lies in the frontier band (over all of that third's new designs together); new "
        "win rate: their mean no-hint win rate; malformed / illegal: the share of the agent's turns "
        "without a closed answer, and refused by the game; pool groups: full groups per iteration on the "
        "pool's older games; retired: designs retired from play by the end.",
        "",
    ]
    header = ["arm", "seed", "new designs played (in band)", "band fraction", "new win rate", "malformed"]
    header += ["illegal", "pool groups", "retired"]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in rows:
        c = t["curriculum"]
        cells = [t["arm"], str(t["seed"]), f"{_count(c['new_played'])} ({_count(c['new_in_band'])})"]
        cells += [f"{_num(c[k]['first'])} → {_num(c[k]['last'])}" for k in keys]
        cells.append(_count(c["retired_total"]))
        out.append("| " + " | ".join(cells) + " |")
    return out


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _pooled_markdown(pooled: list[dict], baseline: str) -> list[str]:
    if not pooled:
        return []
    header = ["arm", "seeds", "win %", "95% CI", "vs base (pp)"]
    header += [f"vs {baseline} (pp)"] if baseline else []
    header += ["mean return [95% CI]", "vs base (return)"]
    header += [f"vs {baseline} (return)"] if baseline else []
    out = [
        "",
        "Pooled over seeds (each item averaged over the arm's seeds; intervals: bootstrap over items; "
        "tests: paired sign-flip on the items):",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in pooled:
        win = row["win"]
        cells = [row["arm"], ", ".join(map(str, row["seeds"])), _pct(win["mean"]), _ci(win["ci"])]
        cells.append(_pdiff(row["win_vs_base"], scale=100))
        if baseline:
            cells.append("" if row["arm"] == baseline else _pdiff(row["win_vs_baseline"], scale=100))
        cells += [_ret(row["return"]), _pdiff(row["return_vs_base"])]
        if baseline:
            cells.append("" if row["arm"] == baseline else _pdiff(row["return_vs_baseline"]))
        out.append("| " + " | ".join(cells) + " |")
    return out


def _categories_markdown(categories: list[dict]) -> list[str]:
    if not categories:
        return []
    arms = list(categories[0]["arms"])
    header = ["category", "n", "base model", *arms]
    out = [
        "",
        "Per category, win % / mean return (arms pooled over their seeds):",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in categories:
        cells = [row["category"], str(row["base"]["n"]), _win_return(row["base"])]
        cells += [_win_return(row["arms"].get(arm) or {}) for arm in arms]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _win_return(score: dict) -> str:
    return f"{_pct(score.get('win'))} / {_num(score.get('return'))}"


def _ret(summary: dict | None) -> str:
    if not summary or summary.get("mean") is None:
        return "-"
    return f"{summary['mean']:.3f} {_ci3(summary['ci'])}"


def _ci3(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _pdiff(d: dict | None, scale: float = 1.0) -> str:
    """A sign-flip difference: ``+0.042 (p 0.31, noise)``; in points when ``scale`` is 100."""
    if d is None or d.get("diff") is None:
        return "-"
    text = f"{scale * d['diff']:+.1f}" if scale != 1.0 else f"{d['diff']:+.3f}"
    return f"{text} (p {d['p_value']:.2g}, {d['flag']})"


def _pass_cells(score: dict) -> list[str]:
    """Mean accuracy over samples and ``pass@1 25.0, pass@2 50.0`` of a row; dashes when not sampled."""
    passes = score.get("pass_at_k") or {}
    text = ", ".join(f"pass@{k} {_pct(v)}" for k, v in passes.items()) or "-"
    return [_pct(score.get("sample_accuracy")), text]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _ci(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _diff(d: dict | None) -> str:
    if d is None or d["diff"] is None:
        return "-"
    text = f"{100 * d['diff']:+.1f}"
    if d["p_value"] is None:
        return f"{text} (not tested: {d['note']})"
    return f"{text} (p {d['p_value']:.2g}, {d['flag']})"
