"""End to end: `spade-rl eval` with the real default model (SmolLM2-135M) on a tiny limit, offline on CPU."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spade_rl import cli
from spade_rl.cli import app
from spade_rl.evaluate.results import EvalResult


@pytest.mark.slow
def test_default_model_runs_reasoning_gym_and_envs(tmp_path, monkeypatch):
    monkeypatch.setattr(cli.console, "width", 200)
    out = tmp_path / "eval.json"
    args = ["eval", "--suite", "reasoning_gym", "--suite", "envs", "--limit", "1", "--max-new-tokens", "48"]
    args += ["--option", "reasoning_gym.math=basic_arithmetic", "--option", "reasoning_gym.algorithmic="]
    args += ["--option", "reasoning_gym.cognition=", "--option", "reasoning_gym.logic=syllogism"]
    args += ["--option", "envs.envs=guess,arithmetic", "--option", "envs.max_turns=2"]
    args += ["--option", "envs.max_new_tokens=32", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = EvalResult.read(out)
    assert saved.model == "smollm2-135m" and saved.host["torch"]
    rg, envs = saved.suites["reasoning_gym"], saved.suites["envs"]
    assert rg.n == 2 and rg.version.startswith("reasoning-gym ")
    assert [i.detail["task"] for i in rg.items] == ["basic_arithmetic", "syllogism"]
    assert all(i.response.strip() for i in rg.items)  # the model answered something, scored in the sandbox
    assert all(i.detail.get("reason") != "scorer_error" for i in rg.items)
    assert envs.n == 2 and [i.id for i in envs.items] == ["guess/seed=0", "arithmetic/seed=0"]
    assert all(i.detail["stop_reason"] != "env_error" for i in envs.items)
    assert all(1 <= i.detail["turns"] <= 2 for i in envs.items)
    assert 0.0 <= rg.accuracy <= 1.0 and "win_rate" in envs.metrics
    assert "reasoning_gym" in result.output and str(out) in result.output
