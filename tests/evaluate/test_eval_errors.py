"""Errors are not wrong answers: an item whose checker or environment failed is counted and shown as an
error and left out of accuracy, its interval, pass@k and comparisons (hand-built results, hand-counted)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spade_rl import cli
from spade_rl.cli import app
from spade_rl.evaluate.base import ItemResult, SuiteResult, wilson_interval
from spade_rl.evaluate.results import EvalResult, compare, mcnemar_exact
from spade_rl.evaluate.sampled import merge_samples, pass_at_k_of
from spade_rl.evaluate.tables import categories_table, compare_table, results_table


def _item(id_: str, outcome: str, category: str = "c") -> ItemResult:
    """``outcome``: "right", "wrong", or "error" (the checker failed)."""
    error = "the checker raised KeyError: 'x'" if outcome == "error" else ""
    right = outcome == "right"
    return ItemResult(id_, right, float(right), "answer", {"category": category}, error=error)


def _suite(outcomes: list[str], prefix: str = "q") -> SuiteResult:
    return SuiteResult(
        "s", "v1", [_item(f"{prefix}{i}", o) for i, o in enumerate(outcomes)], config={"seed": 0}
    )


def _result(suite: SuiteResult, model: str = "m") -> EvalResult:
    return EvalResult(
        model=model, backend="fake", seed=0, limit=None, sampling={"temperature": 0.0},
        suites={"s": suite}, created="now",
    )  # fmt: skip


def _text(renderable) -> str:
    console = Console(width=300, record=True)
    console.print(renderable)
    return console.export_text()


def test_accuracy_and_its_interval_are_over_the_scored_items():
    suite = _suite(["right", "wrong", "error", "right", "error"])
    assert (suite.n, suite.scored, suite.errors, suite.correct) == (5, 3, 2, 2)
    assert suite.accuracy == pytest.approx(2 / 3)  # not 2/5: the errors are not wrong answers
    assert suite.ci == wilson_interval(2, 3)
    assert suite.summary() == "2/3 correct, 2 errors"
    assert _suite(["error"]).accuracy == 0.0 and _suite(["error"]).ci == (0.0, 1.0)
    assert _suite(["right", "error"]).summary() == "1/1 correct, 1 error"
    assert _suite(["right"]).summary() == "1/1 correct, 0 errors"


def test_an_error_cannot_be_correct():
    with pytest.raises(ValueError, match=r"is an error .* cannot be correct"):
        ItemResult("q", True, 1.0, "", error="the environment failed")
    with pytest.raises(ValueError, match="error must be text"):
        ItemResult("q", False, 0.0, "", error=None)  # type: ignore[arg-type]


def test_errors_round_trip_and_older_files_still_read(tmp_path):
    result = _result(_suite(["right", "error", "wrong"]))
    result.write(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    suite = data["suites"]["s"]
    assert (suite["n"], suite["scored"], suite["errors"], suite["correct"]) == (3, 2, 1, 1)
    assert suite["accuracy"] == 0.5
    assert suite["items"][1]["error"] == "the checker raised KeyError: 'x'"
    assert "error" not in suite["items"][0]  # scored items carry no error field
    again = EvalResult.read(tmp_path / "r.json")
    assert again == result and again.suites["s"].errors == 1
    # A file written before errors were told apart: no error fields, every item scored as written.
    for key in ("scored", "errors"):
        del suite[key]
    del suite["items"][1]["error"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = EvalResult.read(tmp_path / "old.json").suites["s"]
    assert (old.errors, old.scored, old.accuracy) == (0, 3, pytest.approx(1 / 3))
    # A broken error field says what is wrong.
    suite["items"][1]["error"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="error must be text"):
        EvalResult.read(tmp_path / "bad.json")
    suite["items"][1].update(error="it broke", correct=True)
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="is an error, so it cannot be correct"):
        EvalResult.read(tmp_path / "bad.json")


def test_paired_comparison_uses_only_items_scored_on_both_sides():
    # q0..q7. A errors on q0; B errors on q1 and q2. Pairs left: q3..q7 (5 pairs).
    a = _result(_suite(["error", "wrong", "wrong", "wrong", "wrong", "wrong", "wrong", "right"]))
    b = _result(_suite(["right", "error", "error", "right", "right", "right", "right", "right"]))
    [row, category] = compare(a, b)
    assert row.test == "mcnemar_exact" and (row.n_a, row.n_b) == (5, 5) and row.left_out == 3
    # q3..q6 wrong in A and right in B: 0 vs 4 discordant; q7 right in both.
    assert (row.acc_a, row.acc_b) == (pytest.approx(1 / 5), pytest.approx(1.0))
    assert row.p_value == pytest.approx(mcnemar_exact(0, 4))
    assert row.note == (
        "paired on 5 items: 0 right only in A, 4 right only in B; 3 left out for errors (1 in A, 2 in B)"
    )
    assert category.left_out == 3 and category.n_a == 5
    shown = _text(compare_table([row], a, b))
    assert "3 left out for errors" in shown


def test_unpaired_comparison_uses_each_sides_scored_items():
    a = _result(_suite(["right", "error", "wrong", "wrong"]))
    b = _result(_suite(["right", "right", "error", "error"], prefix="other"))
    [row, _] = compare(a, b)
    assert row.test == "two_proportion_z" and (row.n_a, row.n_b) == (3, 2) and row.left_out == 3
    assert (row.acc_a, row.acc_b) == (pytest.approx(1 / 3), 1.0)
    assert row.note == "unpaired: the item ids differ; errors left out: 1 in A, 2 in B"
    empty = _result(_suite([]))
    empty.suites = {}
    [only] = compare(a, empty)
    assert only.note == "only in A; 1 left out for errors" and only.n_a == 3 and only.left_out == 1


def test_a_side_of_errors_alone_is_not_tested():
    a = _result(_suite(["right", "wrong"]))
    b = _result(_suite(["error", "error"]))
    [row, _] = compare(a, b)
    assert row.p_value is None and row.comparable and row.left_out == 2
    assert row.note == "no items scored on both sides; 2 left out for errors (0 in A, 2 in B)"


def test_tables_show_errors():
    result = _result(_suite(["right", "error", "wrong", "error"]))
    shown = _text(results_table(result))
    assert "correct/scored" in shown and "errors" in shown
    row = next(line for line in shown.splitlines() if line.strip().startswith("│ s "))
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[:6] == ["s", "v1", "4", "1/2", "2", "50.0"]
    per_category = _text(categories_table(result))
    row = next(line for line in per_category.splitlines() if line.strip().startswith("│ s "))
    assert [cell.strip() for cell in row.split("│")[1:-1]][:5] == ["s", "c", "4", "2", "50.0"]


def test_sampled_runs_leave_errored_samples_out_of_pass_at_k():
    runs = [
        _suite(["right", "wrong"]),
        _suite(["error", "wrong"]),
        _suite(["wrong", "right"]),
    ]
    merged = merge_samples(None, runs)
    first, second = merged.items
    assert first.samples == [(True, 1.0), (False, 0.0)] and first.sample_errors == 1
    assert second.samples == [(False, 0.0), (False, 0.0), (True, 1.0)] and second.sample_errors == 0
    # n = 2 (the fewest scored samples): item 0 one of two, item 1 one of three.
    # pass@1 = (1/2 + 1/3) / 2; pass@2 = (1 + (1 - C(2,2)/C(3,2))) / 2 = (1 + 2/3) / 2.
    assert pass_at_k_of(merged.items) == pytest.approx({1: (1 / 2 + 1 / 3) / 2, 2: (1 + 2 / 3) / 2})
    again = SuiteResult.from_dict(merged.to_dict())
    assert again.items == merged.items and again.to_dict()["items"][0]["sample_errors"] == 1
    every = merge_samples(None, [_suite(["error"]), _suite(["error"])])
    assert every.items[0].samples == [] and every.items[0].sample_errors == 2 and every.pass_at_k == {}


def test_the_command_line_comparison_says_how_many_were_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(cli.console, "width", 250)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _result(_suite(["right", "error", "wrong"])).write(a)
    _result(_suite(["right", "right", "error"])).write(b)
    result = CliRunner().invoke(app, ["eval", "--compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "2 item(s) left out of the comparison: errors" in result.output
    assert "within noise (McNemar exact, paired); 2 left out for errors" in result.output
