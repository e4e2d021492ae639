"""A comparison (:func:`spade_rl.experiment.compare.build_comparison`) written out: ``comparison.json`` and
``comparison.md``, its tables in Markdown."""

from __future__ import annotations

import json
from pathlib import Path

CURRICULUM_MEANS = ("format/malformed", "format/illegal", "pool/groups")
# (the training means of the curriculum table, read by compare._curriculum)


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
