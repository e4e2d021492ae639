"""`spade-rl run`: its refusals before anything starts, and its line per iteration. A whole run through
the command: tests/loop/ (the default run takes minutes)."""

from __future__ import annotations

from spade_rl.cli import app
from spade_rl.cli.run import _iteration_line


def test_conflicting_directories_and_bad_overrides_are_clean_errors(runner, clean_failure, tmp_path):
    both = ["run", "--resume", str(tmp_path / "a"), "--out", str(tmp_path / "b")]
    clean_failure(runner.invoke(app, both), "give either --resume RUN_DIR or --out RUN_DIR, not both")
    bad = runner.invoke(app, ["run", "--out", str(tmp_path / "run"), "loop.no_such_key=1"])
    clean_failure(bad, "no_such_key")


def test_the_iteration_line_shows_missing_metrics_as_a_dash():
    metrics = {
        "iteration": 3,
        "designer/valid_rate": 0.5,
        "agent/win_rate": 0.25,
        "regret/mean": 0.125,
        "train/loss": 0.012345,
        "time/iteration_s": 61.4,
    }
    line = _iteration_line(metrics)
    assert line == (
        "iter   3  valid 0.50  win 0.25  win+hint -  regret 0.12  frontier -  loss 0.01235  61 s"
    ), line
