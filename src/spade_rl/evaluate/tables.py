"""Rich tables of evaluation results and comparisons, for the command line (built here, printed there).

console.print(results_table(result))
console.print(compare_table(compare(a, b), a, b))
"""

from __future__ import annotations

from rich.table import Table

from spade_rl.evaluate.results import CompareRow, EvalResult

# The metrics shown beside each suite's accuracy (the rest stay in the JSON).
HEADLINE = ("mean_score", "no_answer_rate", "mean_return", "mean_turns")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _ci(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def pass_text(pass_at_k: dict[int, float] | None) -> str:
    """``"pass@1 25.0, pass@2 50.0"`` (percentages); ``"-"`` when not sampled."""
    if not pass_at_k:
        return "-"
    return ", ".join(f"pass@{k} {_pct(v)}" for k, v in pass_at_k.items())


def _accuracy_heading(result: EvalResult) -> str:
    if result.samples is None:
        return "accuracy %"
    return "greedy accuracy %" if result.samples.get("greedy") else "accuracy % (first sample)"


def results_table(result: EvalResult) -> Table:
    """One row per suite: items, correct of scored, errors (items whose checker or environment failed),
    accuracy over the scored items with its 95% Wilson interval, headline metrics, time; a sampled
    evaluation adds the mean accuracy over samples and pass@k."""
    title = f"{result.model} ({result.backend}), seed {result.seed}, limit {result.limit or 'none'}"
    sampled = result.samples is not None
    if sampled:
        title += f", {result.samples['n']} samples at temperature {result.samples.get('temperature')}"
    table = Table(title=title)
    columns = ["suite", "version", "n", "correct/scored", "errors", _accuracy_heading(result), "95% CI"]
    columns += ["sample accuracy %", "pass@k %"] if sampled else []
    for column in [*columns, "metrics", "seconds"]:
        table.add_column(column, overflow="fold")
    for name, suite in result.suites.items():
        metrics = ", ".join(f"{k} {suite.metrics[k]:.3g}" for k in HEADLINE if k in suite.metrics)
        cells = [name, suite.version, str(suite.n), f"{suite.correct}/{suite.scored}", _errors(suite.errors)]
        cells += [_pct(suite.accuracy), _ci(suite.ci)]
        if sampled:
            cells += [_pct(suite.sample_accuracy), pass_text(suite.pass_at_k)]
        table.add_row(*cells, metrics, f"{suite.seconds:.0f}")
    return table


def categories_table(result: EvalResult) -> Table:
    """Accuracy over the scored items per category (``detail["category"]``) of every suite that has
    categories (Reasoning Gym: math, algorithmic, cognition, logic), its errors, and pass@k when sampled."""
    from spade_rl.evaluate.base import ItemResult, wilson_interval
    from spade_rl.evaluate.sampled import pass_at_k_of, sample_means

    sampled = result.samples is not None
    table = Table(title="per category")
    columns = ["suite", "category", "n", "errors", _accuracy_heading(result), "95% CI"]
    for column in columns + (["sample accuracy %", "pass@k %"] if sampled else []):
        table.add_column(column)
    for name, suite in result.suites.items():
        groups: dict[str, list[ItemResult]] = {}
        for item in suite.items:
            category = item.detail.get("category")
            if isinstance(category, str):
                groups.setdefault(category, []).append(item)
        for category, items in groups.items():
            scored = [i for i in items if not i.error]
            correct = sum(i.correct for i in scored)
            accuracy = correct / len(scored) if scored else None
            cells = [name, category, str(len(items)), _errors(len(items) - len(scored)), _pct(accuracy)]
            cells.append(_ci(wilson_interval(correct, len(scored))))
            if sampled:
                means = sample_means(items)
                cells += [_pct(None if means is None else means[0]), pass_text(pass_at_k_of(items))]
            table.add_row(*cells)
    return table


def compare_table(rows: list[CompareRow], a: EvalResult, b: EvalResult) -> Table:
    """Side by side: A and B with their intervals (over the scored items, paired ones when the test is
    paired), the difference, the test and its verdict, and how many items errors left out."""
    table = Table(title=f"A = {a.model} ({a.created})   B = {b.model} ({b.created})")
    columns = ("suite", "category", "n A", "A %", "A 95% CI", "n B", "B %", "B 95% CI", "B - A", "p")
    columns += ("verdict",)
    sampled = any(row.pass_a or row.pass_b for row in rows)
    if sampled:
        columns += ("pass@k % A -> B (not tested)",)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        if not row.comparable:
            verdict = f"[yellow]{row.note}[/]"
        elif row.p_value is None:
            verdict = row.note
        elif row.significant:
            verdict = f"[bold]{'better' if (row.diff or 0) > 0 else 'worse'}[/] ({_test_name(row.test)})"
        else:
            verdict = f"within noise ({_test_name(row.test)})"
        if row.left_out and row.comparable and row.p_value is not None:
            verdict += f"; [yellow]{row.left_out} left out for errors[/]"
        extra = [_pass_change(row)] if sampled else []
        table.add_row(
            row.suite if row.category is None else "",
            row.category or "(all)",
            str(row.n_a),
            _pct(row.acc_a),
            _ci(row.ci_a),
            str(row.n_b),
            _pct(row.acc_b),
            _ci(row.ci_b),
            "-" if row.diff is None else f"{100 * row.diff:+.1f}",
            "-" if row.p_value is None else f"{row.p_value:.3g}",
            verdict,
            *extra,
        )
    return table


def _pass_change(row: CompareRow) -> str:
    """pass@k of both sides at the k both have: ``"pass@1 20.0 -> 30.0 (+10.0)"``; one side alone as is."""
    a, b = row.pass_a, row.pass_b
    if not a or not b:
        return f"{'A' if a else 'B'} only: {pass_text(a or b)}" if (a or b) else "-"
    parts = [f"pass@{k} {_pct(a[k])} -> {_pct(b[k])} ({100 * (b[k] - a[k]):+.1f})" for k in a if k in b]
    text = ", ".join(parts) or "no common k"
    return f"[yellow]{text}; not comparable: {row.pass_note}[/]" if row.pass_note else text


def _errors(count: int) -> str:
    return f"[yellow]{count}[/]" if count else "0"


def _test_name(test: str) -> str:
    return {"mcnemar_exact": "McNemar exact, paired", "two_proportion_z": "two-proportion z, unpaired"}.get(
        test, test
    )
