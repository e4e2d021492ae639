"""Rich tables of evaluation results and comparisons, for the command line (built here, printed there).

console.print(results_table(result))
console.print(compare_table(compare(a, b), a, b))
"""

from __future__ import annotations

from rich.table import Table

from spade_rl.evaluate.results import CompareRow, EvalResult

# The metrics shown beside each suite's accuracy (the rest stay in the JSON).
HEADLINE = ("mean_score", "no_answer_rate", "mean_return", "mean_turns", "env_errors", "scorer_errors")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _ci(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def results_table(result: EvalResult) -> Table:
    """One row per suite: items, accuracy with its 95% Wilson interval, headline metrics, time."""
    title = f"{result.model} ({result.backend}), seed {result.seed}, limit {result.limit or 'none'}"
    table = Table(title=title)
    for column in ("suite", "version", "n", "correct", "accuracy %", "95% CI", "metrics", "seconds"):
        table.add_column(column, overflow="fold")
    for name, suite in result.suites.items():
        metrics = ", ".join(f"{k} {suite.metrics[k]:.3g}" for k in HEADLINE if k in suite.metrics)
        table.add_row(
            name,
            suite.version,
            str(suite.n),
            str(suite.correct),
            _pct(suite.accuracy),
            _ci(suite.ci),
            metrics,
            f"{suite.seconds:.0f}",
        )
    return table


def categories_table(result: EvalResult) -> Table:
    """Accuracy per category (``detail["category"]``) of every suite that has categories."""
    table = Table(title="per category")
    for column in ("suite", "category", "n", "accuracy %", "95% CI"):
        table.add_column(column)
    from spade_rl.evaluate.base import wilson_interval

    for name, suite in result.suites.items():
        groups: dict[str, list[bool]] = {}
        for item in suite.items:
            category = item.detail.get("category")
            if isinstance(category, str):
                groups.setdefault(category, []).append(item.correct)
        for category, flags in groups.items():
            n, correct = len(flags), sum(flags)
            table.add_row(name, category, str(n), _pct(correct / n), _ci(wilson_interval(correct, n)))
    return table


def compare_table(rows: list[CompareRow], a: EvalResult, b: EvalResult) -> Table:
    """Side by side: A and B with their intervals, the difference, the test and its verdict."""
    table = Table(title=f"A = {a.model} ({a.created})   B = {b.model} ({b.created})")
    columns = ("suite", "category", "n A", "A %", "A 95% CI", "n B", "B %", "B 95% CI", "B - A", "p")
    columns += ("verdict",)
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
        )
    return table


def _test_name(test: str) -> str:
    return {"mcnemar_exact": "McNemar exact, paired", "two_proportion_z": "two-proportion z, unpaired"}.get(
        test, test
    )
