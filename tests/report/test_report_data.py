"""Reading run directories: hand-written archives and metrics for the edge cases of real runs."""

from __future__ import annotations

import json

import pytest
from report_helpers import env_source, metrics_line, stats

from spade_rl.report.data import ReportError, load_run
from spade_rl.report.evals import read_evals, wilson_interval
from spade_rl.report.examples import phases, pick_episodes, pick_examples


def test_missing_or_foreign_directories_are_refused_with_what_was_expected(tmp_path):
    with pytest.raises(ReportError, match=r"no run directory at .*missing"):
        load_run(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReportError, match="is a file"):
        load_run(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=r"neither archive\.sqlite nor metrics\.jsonl"):
        load_run(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "archive.sqlite").write_text("not a database, just text " * 100)
    with pytest.raises(ReportError, match="cannot read the archive"):
        load_run(tmp_path / "bad")


def test_one_iteration_rows_are_computed_from_the_archive(hand_run):
    run = hand_run().config(iterations=1)
    ref = run.reference(env_source("Guess"))
    a = run.design(env_source("A", 3), 1, hint="think")
    b = run.design(env_source("B", 7), 1, reason="timeout")
    run.design(env_source("A", 3), 1)  # a duplicate proposal: counted as a proposal, not an environment
    run.play(a, 1, stats(0.5, 1.0, turns=3.0))
    run.play(ref, 1, stats(1.0, 1.0, turns=1.0))
    run.metrics(metrics_line(1))
    data = load_run(run.path)
    [row] = data.rows
    assert (row.iteration, row.proposed, row.valid, row.reasons) == (1, 3, 2, {"ok": 2, "timeout": 1})
    assert row.valid_rate == pytest.approx(2 / 3)
    assert row.envs_played == 2
    assert row.win_rate == pytest.approx(0.75) and row.win_rate_hint == pytest.approx(1.0)
    assert row.regret == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert row.frontier_fraction == pytest.approx(0.5)  # 0.5 is inside [0.15, 0.85], 1.0 is not
    assert row.mean_turns == pytest.approx(2.0)
    assert row.new_envs == 2 and row.source_lines == pytest.approx((6 + 10) / 2)
    assert row.valid_source_lines == pytest.approx(6)
    assert row.complete and row.metric("train/loss") == pytest.approx(0.01)
    assert [e.record.env_id for e in data.envs] == [a, b] and [e.record.env_id for e in data.references] == [
        ref
    ]
    assert data.completed_iterations == 1 and data.planned_iterations == 1 and data.warnings == []


def test_the_frontier_comes_from_the_runs_archive_config(hand_run):
    run = hand_run().config(frontier_low=0.6, frontier_high=0.9)
    env = run.design(env_source("A"), 1)
    run.play(env, 1, stats(0.5, 1.0))
    data = load_run(run.path)
    assert data.frontier == (0.6, 0.9) and data.rows[0].frontier_fraction == 0.0


def test_a_run_of_an_earlier_release_reads_with_todays_names(hand_run):
    """band_low/band_high in config.json and band/fraction in metrics.jsonl: the names before the glossary."""
    run = hand_run().config()
    config = json.loads((run.path / "config.json").read_text())
    config["archive"] = {"band_low": 0.6, "band_high": 0.9}
    (run.path / "config.json").write_text(json.dumps(config))
    line = {"iteration": 1, "agent/envs": 1, "agent/win_rate": 0.5, "band/fraction": 0.25}
    (run.path / "metrics.jsonl").write_text(json.dumps(line) + "\n")
    data = load_run(run.path)
    assert data.frontier == (0.6, 0.9)
    assert data.rows[0].metric("frontier/fraction") == 0.25 and "band/fraction" not in data.rows[0].metrics


def test_a_killed_run_marks_the_interrupted_iteration_and_skips_the_torn_line(hand_run):
    run = hand_run().config(iterations=3)
    for i in (1, 2, 3):
        env = run.design(env_source(f"E{i}"), i)
        run.play(env, i, stats(0.25, 0.5))
    run.metrics(metrics_line(1), metrics_line(2), raw_tail='{"iteration": 3, "designer/prop')
    data = load_run(run.path)
    assert [(r.iteration, r.complete) for r in data.rows] == [(1, True), (2, True), (3, False)]
    assert data.rows[2].win_rate == pytest.approx(0.25)  # the archive still shows what it played
    assert data.completed_iterations == 2 and data.planned_iterations == 3
    joined = " | ".join(data.warnings)
    assert "metrics.jsonl: line(s) 3 are not complete JSON" in joined
    assert "iteration(s) 3 have archive records but no metrics line" in joined


def test_a_run_killed_before_its_first_metrics_line(hand_run):
    run = hand_run().config()
    run.design(env_source("A"), 1, reason="syntax_error")
    data = load_run(run.path)
    assert [(r.iteration, r.complete, r.proposed) for r in data.rows] == [(1, False, 1)]
    assert any("no metrics.jsonl line" in w for w in data.warnings)


def test_metrics_without_an_archive_fill_the_rows(hand_run):
    run = hand_run().metrics(
        metrics_line(1), metrics_line(2, **{"agent/win_rate": None, "designer/reasons": {"ok": 2}})
    )
    (run.path / "metrics.jsonl").write_text((run.path / "metrics.jsonl").read_text() + "[1, 2]\n{}\n")
    data = load_run(run.path)
    assert [r.iteration for r in data.rows] == [1, 2]
    assert data.rows[0].reasons == {"ok": 1, "timeout": 1} and data.rows[0].valid == 1
    assert data.rows[0].win_rate == 0.25 and data.rows[1].win_rate is None
    assert not data.has_archive and data.envs == []
    joined = " | ".join(data.warnings)
    assert "no archive.sqlite" in joined and "no config.json" in joined
    assert "line(s) 3 are not complete JSON objects" in joined  # a JSON list is not a metrics line
    assert "line 4 has no iteration number" in joined


def test_a_run_with_no_valid_environment_still_has_examples(hand_run):
    run = hand_run().config()
    ref = run.reference(env_source("Guess"))
    for i, reason in ((1, "syntax_error"), (2, "timeout"), (3, "no_env_class")):
        run.design(env_source(f"Bad{i}"), i, reason=reason, message=f"failed {reason}")
        run.play(ref, i, stats(1.0, 1.0))
    data = load_run(run.path)
    assert [r.valid_rate for r in data.rows] == [0.0, 0.0, 0.0]
    examples = pick_examples(data, 3)
    assert [(e.phase.name, e.env.record.reason) for e in examples] == [
        ("early", "syntax_error"),
        ("middle", "timeout"),
        ("late", "no_env_class"),
    ]


def test_phases_cut_iterations_into_contiguous_near_equal_parts():
    assert phases([]) == []
    assert [(p.name, p.iterations) for p in phases([4, 4])] == [("all", (4,))]
    assert [(p.name, p.iterations) for p in phases([1, 5])] == [("early", (1,)), ("late", (5,))]
    split = phases(list(range(1, 8)))
    assert [(p.name, p.iterations) for p in split] == [
        ("early", (1, 2, 3)),
        ("middle", (4, 5)),
        ("late", (6, 7)),
    ]
    assert split[0].label == "early (iterations 1-3)" and phases([2])[0].label == "iteration 2"


def test_examples_prefer_played_environments_near_the_middle_of_the_band(hand_run):
    run = hand_run().config()
    easy = run.design(env_source("Easy"), 1)
    frontier = run.design(env_source("Frontier"), 1)
    run.design(env_source("Broken"), 1, reason="timeout")
    unplayed = run.design(env_source("Unplayed"), 1)
    run.play(easy, 1, stats(1.0, 1.0))
    run.play(frontier, 1, stats(0.5, 0.75))
    run.transcript(1, frontier, "with hint", hint=True)
    run.transcript(1, frontier, "without hint")
    data = load_run(run.path)
    examples = pick_examples(data, 3)  # one phase: the three best of it
    assert [e.env.record.env_id for e in examples] == [easy, frontier, unplayed]
    by_id = {e.env.record.env_id: e for e in examples}
    assert by_id[frontier].transcript["messages"][-1]["content"] == "without hint"
    assert by_id[easy].transcript is None
    assert [e.env.record.env_id for e in pick_examples(data, 1)] == [frontier]
    assert pick_examples(data, 0) == []


def test_episodes_come_from_early_middle_and_late_play_preferring_a_win(hand_run):
    run = hand_run().config()
    env = run.design(env_source("A"), 1)
    for i in range(1, 7):
        run.transcript(i, env, f"lost {i}")
    run.transcript(2, env, "won 2", ret=1.0)
    picked = pick_episodes(load_run(run.path), 3)
    assert [(p.name, t["messages"][-1]["content"]) for p, t in picked] == [
        ("early", "won 2"),
        ("middle", "lost 3"),
        ("late", "lost 5"),
    ]


def test_wilson_interval_matches_hand_computed_values():
    low, high = wilson_interval(8, 10)
    assert (low, high) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0


def test_evaluation_files_and_metrics_keys_are_read_defensively(tmp_path):
    folder = tmp_path / "eval"
    folder.mkdir()
    items = [{"id": str(i), "correct": i < 3, "score": 1.0 if i < 3 else 0.0} for i in range(4)]
    (folder / "iter-0002.json").write_text(
        json.dumps(
            {
                "model": {"name": "tiny"},
                "suites": {
                    "reasoning_gym": {"suite": "reasoning_gym", "version": "rg 1", "items": items},
                    "bfcl": {"accuracy": 0.5, "n": 10, "ci": [0.2, 0.8], "metrics": {"simple": 0.7}},
                    "empty": {"items": []},
                    "nonsense": "text",
                },
            }
        )
    )
    (folder / "iter-0003.json").write_text("{not json")
    (folder / "iter-0004.json").write_text(json.dumps({"suites": 3}))
    (folder / "notes.txt").write_text("ignored")
    warnings: list[str] = []
    metrics = {
        1: {"iteration": 1, **{f"eval/humaneval/{k}": v for k, v in (("accuracy", 0.25), ("n", 8))}},
        3: {"iteration": 3, "eval/he/accuracy": 0.5, "eval/he/ci_low": 0.2, "eval/he/ci_high": 0.8},
        2: {"iteration": 2, "eval/bfcl/accuracy": 0.9, "eval/envs/accuracy": 0.4, "eval/x/other": 1.0},
    }
    records = read_evals(folder, metrics, warnings)
    assert [(r.iteration, r.source) for r in records] == [
        (1, "metrics.jsonl"),
        (2, "eval/iter-0002.json"),
        (3, "metrics.jsonl"),  # the unreadable file of iteration 3 is replaced by its metrics
    ]
    assert records[2].suites["he"].ci == (0.2, 0.8)
    humaneval = records[0].suites["humaneval"]
    assert (humaneval.accuracy, humaneval.n, humaneval.ci) == (0.25, 8, None)
    second = records[1]
    assert second.model == "tiny" and sorted(second.suites) == ["bfcl", "envs", "reasoning_gym"]
    rg = second.suites["reasoning_gym"]
    assert (rg.accuracy, rg.n, rg.version) == (0.75, 4, "rg 1") and rg.ci == wilson_interval(3, 4)
    bfcl = second.suites["bfcl"]
    assert (bfcl.accuracy, bfcl.ci, bfcl.extras) == (0.5, (0.2, 0.8), {"simple": 0.7})  # the file wins
    assert second.suites["envs"].accuracy == 0.4  # only in the metrics line
    joined = " | ".join(warnings)
    assert "suite 'empty' has no items" in joined and "suite 'nonsense'" in joined
    assert "eval/iter-0003.json cannot be read" in joined and "eval/iter-0004.json has no 'suites'" in joined


def test_result_files_of_the_evaluate_package_are_read(tmp_path):
    base = pytest.importorskip("spade_rl.evaluate.base", reason="the evaluation package is not there")
    results = pytest.importorskip("spade_rl.evaluate.results", reason="the evaluation package is not there")
    items = [base.ItemResult(str(i), i % 2 == 0, float(i % 2 == 0), "answer") for i in range(5)]
    suite = base.SuiteResult("reasoning_gym", "reasoning-gym 0.1", items, metrics={"math": 0.5})
    result = results.EvalResult("tiny", "fake", 0, 5, {}, suites={"reasoning_gym": suite})
    result.write(tmp_path / "eval" / "iter-0001.json")  # as the loop writes it
    metrics = {1: {"iteration": 1, **{f"eval/reasoning_gym/{k}": 0.0 for k in ("accuracy", "n")}}}
    warnings: list[str] = []
    [record] = read_evals(tmp_path / "eval", metrics, warnings)
    assert (record.model, record.source, warnings) == ("tiny", "eval/iter-0001.json", [])
    score = record.suites["reasoning_gym"]
    assert (score.accuracy, score.n, score.version) == (suite.accuracy, 5, "reasoning-gym 0.1")
    assert score.ci == pytest.approx(suite.ci) and score.extras == {"math": 0.5}
