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

The training summary reads each run's ``metrics.jsonl``: iterations, seconds, designs proposed and
valid, and the agent's win rate, the fraction of played environments on the frontier and
the regret, as means over the first and the last third of the iterations.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from spade_rl.evaluate.results import ALPHA, EvalResult, compare
from spade_rl.experiment.runner import RunRecord
from spade_rl.experiment.spec import Experiment
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
            base_rows.append({"start": path.name, "arms": arms, **_score(result)})
        rows = []
        for record in records:
            end = read(record.end_path)
            row = {"arm": record.arm, "seed": record.seed, **_score(end.suites.get(suite))}
            row["vs_base"] = _difference(read(record.start_path), end, suite)
            other = baseline.get(record.seed)
            row["vs_baseline"] = (
                _difference(read(other.end_path), end, suite)
                if other is not None and other is not record
                else None
            )
            rows.append(row)
        suites[suite] = {"base": base_rows, "rows": rows, "means": _means(rows, experiment)}
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
    }
    third = max(1, len(lines) // 3)
    for key in ("agent/win_rate", "frontier/fraction", "regret/mean"):
        summary[key] = {"first": _mean(lines[:third], key), "last": _mean(lines[-third:], key)}
    return summary


def _mean(lines: list[dict], key: str) -> float | None:
    values = [m[key] for m in lines if isinstance(m.get(key), int | float) and math.isfinite(m[key])]
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
        f"the items differ); 'noise' means p >= {comparison['alpha']}.",
    ]
    for suite, table in comparison["suites"].items():
        out += ["", f"## {suite}", ""]
        header = ["arm", "seed", "score %", "95% CI", "n", "vs base (pp)"]
        if baseline:
            header.append(f"vs {baseline} (pp)")
        sampled = any("pass_at_k" in r for r in table["base"] + table["rows"])
        if sampled:
            header += ["sample accuracy %", "pass@k %"]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        several = len(table["base"]) > 1
        for base in table["base"]:
            label = "base model" + (f" ({', '.join(base['arms'])})" if several else "")
            cells = [label, "-", _pct(base["accuracy"]), _ci(base["ci"]), str(base["n"]), ""]
            cells += [""] if baseline else []
            out.append("| " + " | ".join(cells + (_pass_cells(base) if sampled else [])) + " |")
        for row in table["rows"]:
            cells = [row["arm"], str(row["seed"]), _pct(row["accuracy"]), _ci(row["ci"]), str(row["n"])]
            cells.append(_diff(row["vs_base"]))
            if baseline:
                cells.append("" if row["arm"] == baseline else _diff(row["vs_baseline"]))
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
    out += ["", "![training curves](curves.png)", ""]
    return "\n".join(out)


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
