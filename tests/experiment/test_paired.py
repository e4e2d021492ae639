"""The experiment's paired statistics (mean returns, pooled seeds, categories) on hand-computed numbers."""

from __future__ import annotations

import json

import pytest

from spade_rl.evaluate.base import ItemResult, SuiteResult
from spade_rl.evaluate.results import EvalResult
from spade_rl.experiment import RunRecord, load_experiment
from spade_rl.experiment.compare import build_comparison, to_markdown
from spade_rl.experiment.paired import bootstrap_ci, paired, pooled, sign_flip_p, summary

TWO_SEEDS = """
[experiment]
iterations = 1
seeds = [0, 1]
baseline = "a"
overrides = ["policy.model='tiny-random'"]
[eval]
suites = ["envs"]
[arms.a]
[arms.b]
overrides = ["design.memory=false"]
"""


def test_sign_flip_p_enumerates_every_sign_pattern():
    assert sign_flip_p([1.0, 1.0, 1.0, 1.0]) == pytest.approx(2 / 16)  # only all + and all -
    assert sign_flip_p([1.0, -1.0]) == 1.0
    assert sign_flip_p([0.0, 0.0]) == 1.0  # no difference at all
    # sum 1.75: as extreme are (+,+,+,-), (+,+,+,+) and their negatives: 4 of 16
    assert sign_flip_p([0.5, 0.5, 1.0, -0.25]) == pytest.approx(4 / 16)
    # zeros carry no sign: the same as without them
    assert sign_flip_p([1.0, 0.0, 1.0, 0.0, 1.0]) == pytest.approx(2 / 8)


def test_sign_flip_p_beyond_the_exact_range_is_a_seeded_monte_carlo_estimate():
    differences = [1.0] * 20
    p = sign_flip_p(differences)
    assert p == sign_flip_p(differences)  # deterministic
    assert 0 < p < 0.001  # the exact value is 2 / 2**20; Monte Carlo with 20,000 draws floors at 1/20,001
    balanced = [1.0, -1.0] * 15
    assert sign_flip_p(balanced) == pytest.approx(1.0, abs=0.01)


def test_bootstrap_interval_brackets_the_mean_and_is_reproducible():
    values = [0.0, 0.25, 0.5, 1.0, 1.0, 0.75]
    low, high = bootstrap_ci(values)
    assert low < sum(values) / len(values) < high and 0.0 <= low and high <= 1.0
    assert bootstrap_ci(values) == [low, high]
    assert bootstrap_ci([0.5]) == [0.5, 0.5] and bootstrap_ci([1.0, 1.0]) == [1.0, 1.0]
    with pytest.raises(ValueError):
        bootstrap_ci([])
    assert summary({}) == {"mean": None, "ci": None, "n": 0}


def items(scores: list[float], categories: str = "xxyy") -> list[ItemResult]:
    return [ItemResult(f"q/{i}", s == 1.0, s, "", {"category": categories[i]}) for i, s in enumerate(scores)]


def test_pooled_averages_each_item_over_seeds_and_paired_tests_the_difference():
    seed0, seed1 = items([1.0, 1.0, 1.0, 0.5]), items([1.0, 0.5, 1.0, 0.5])
    assert pooled([seed0, seed1]) == {"q/0": 1.0, "q/1": 0.75, "q/2": 1.0, "q/3": 0.5}
    assert pooled([seed0, seed1], "correct") == {"q/0": 1.0, "q/1": 0.5, "q/2": 1.0, "q/3": 0.0}
    base = {"q/0": 0.0, "q/1": 0.5, "q/2": 1.0, "q/3": 0.0}
    row = paired(base, pooled([seed0, seed1]))
    # differences 1, 0.25, 0, 0.5: mean 0.4375; three non-zero, all positive: p = 2 / 8
    assert row["diff"] == pytest.approx(0.4375) and row["p_value"] == pytest.approx(0.25)
    assert row["flag"] == "noise" and row["n"] == 4
    assert paired({"q/9": 1.0}, base)["flag"] == "not tested"  # no common item


def result(scores: list[float], model: str) -> EvalResult:
    suite = SuiteResult("envs", "v1", items(scores))
    return EvalResult(model, "fake", 0, 4, {"temperature": 0.6}, {"envs": suite})


def test_comparison_reports_returns_pooled_seeds_and_categories(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(TWO_SEEDS)
    spec = load_experiment(path)
    start = tmp_path / "start.json"
    result([0.0, 0.5, 1.0, 0.0], "base").write(start)
    ends = {
        ("a", 0): [0.0, 0.5, 1.0, 0.0],
        ("a", 1): [0.0, 0.5, 1.0, 0.0],
        ("b", 0): [1.0, 1.0, 1.0, 0.5],
        ("b", 1): [1.0, 0.5, 1.0, 0.5],
    }
    records = []
    for (arm, seed), scores in ends.items():
        run_dir = tmp_path / f"{arm}-{seed}"
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text(json.dumps({"iteration": 1}) + "\n")
        result(scores, arm).write(run_dir / "end.json")
        records.append(RunRecord(arm, seed, run_dir, 1, 3.0, "iterations", start, run_dir / "end.json"))
    table = build_comparison(spec, records)["suites"]["envs"]
    assert table["base"][0]["mean_return"]["mean"] == pytest.approx(0.375)
    b0 = table["rows"][2]
    assert (b0["arm"], b0["seed"]) == ("b", 0) and b0["mean_return"]["mean"] == pytest.approx(0.875)
    # b seed 0 against the base: differences 1, 0.5, 0, 0.5 -> mean 0.5, p = 2/8
    assert b0["vs_base_return"]["diff"] == pytest.approx(0.5)
    assert b0["vs_base_return"]["p_value"] == pytest.approx(0.25)
    # against a seed 0 (= the base): the same differences
    assert b0["vs_baseline_return"]["diff"] == pytest.approx(0.5)
    pooled_a, pooled_b = table["pooled"]
    assert pooled_a["arm"] == "a" and pooled_a["return_vs_base"]["diff"] == 0.0
    assert pooled_a["return_vs_baseline"] is None
    assert pooled_b["seeds"] == [0, 1] and pooled_b["return"]["mean"] == pytest.approx(0.8125)
    assert pooled_b["return_vs_base"]["diff"] == pytest.approx(0.4375)
    assert pooled_b["return_vs_base"]["p_value"] == pytest.approx(0.25)
    # win: pooled b 1, 0.5, 1, 0 against base 0, 0, 1, 0: mean +0.375, two positive: p = 2/4
    assert pooled_b["win"]["mean"] == pytest.approx(0.625)
    assert pooled_b["win_vs_baseline"]["diff"] == pytest.approx(0.375)
    assert pooled_b["win_vs_baseline"]["p_value"] == pytest.approx(0.5)
    x, y = table["categories"]
    assert x["category"] == "x" and x["base"] == {"win": 0.0, "return": 0.25, "n": 2}
    assert x["arms"]["b"] == {"win": 0.75, "return": pytest.approx(0.875), "n": 2}
    assert y["arms"]["b"] == {"win": 0.5, "return": 0.75, "n": 2}
    markdown = to_markdown(build_comparison(spec, records))
    assert "| b | 0, 1 | 62.5 |" in markdown and "+0.438 (p 0.25, noise)" in markdown
    assert "| x | 2 | 0.0 / 0.25 | 0.0 / 0.25 | 75.0 / 0.88 |" in markdown


def test_figure_draws_held_out_curves_from_the_evaluation_files_against_training_seconds(tmp_path):
    from spade_rl.experiment.figure import _held_out, plot_curves

    start = tmp_path / "start.json"
    result([0.0, 0.5, 1.0, 0.0], "base").write(start)
    run_dir = tmp_path / "run"
    (run_dir / "eval").mkdir(parents=True)
    lines = [{"iteration": i, "time/iteration_s": 10.0, "agent/win_rate": 0.1 * i} for i in (1, 2, 3, 4)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    result([1.0, 0.5, 1.0, 0.0], "it2").write(run_dir / "eval" / "iter-0002.json")
    (run_dir / "eval" / "iter-0004.json").write_text("{broken")  # a gap, not a failure
    result([1.0, 1.0, 1.0, 0.5], "end").write(run_dir / "end.json")
    record = RunRecord("b", 0, run_dir, 4, 40.0, "iterations", start, run_dir / "end.json")
    points = _held_out(record, lines)["envs"]
    assert [seconds for seconds, _ in points] == [0.0, 20.0, 40.0]
    assert [p["win"] for _, p in points] == [0.25, 0.5, 0.75]
    assert [p["return"] for _, p in points] == [0.375, 0.625, 0.875]
    figure = plot_curves([record], tmp_path / "curves.png")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_items_that_were_errors_are_left_out_of_paired_values():
    from spade_rl.experiment.paired import by_item

    a = [ItemResult("x", True, 1.0, ""), ItemResult("y", False, 0.0, "", error="the checker raised")]
    b = [ItemResult("x", False, 0.0, ""), ItemResult("y", True, 1.0, "")]
    assert by_item(a, "correct") == {"x": 1.0}  # y has no verdict on side a
    result = paired(by_item(a, "correct"), by_item(b, "correct"))
    assert result["n"] == 1 and result["diff"] == -1.0
