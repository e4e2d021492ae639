"""`spade-rl experiment --check`: the file and every arm's configuration checked, nothing run. A whole
experiment through the command: tests/experiment/test_experiment.py."""

from __future__ import annotations

from pathlib import Path

from spade_rl.cli import app

EXPERIMENTS = Path(__file__).parents[2] / "experiments"


def test_check_describes_the_experiment_and_runs_nothing(runner, tmp_path):
    out = tmp_path / "exp"
    result = runner.invoke(
        app, ["experiment", str(EXPERIMENTS / "ci-tiny.toml"), "--out", str(out), "--check"]
    )
    assert result.exit_code == 0, result.output
    assert "experiment " in result.output and "nothing run (--check)" in result.output
    assert not out.exists()


def test_a_missing_file_is_a_clean_error(runner, clean_failure, tmp_path):
    clean_failure(runner.invoke(app, ["experiment", str(tmp_path / "none.toml")]), "none.toml")
