"""`spade-rl config`: the resolved configuration as JSON (what a run's config.json holds), or each value
with its source; a configuration that cannot run is refused as `spade-rl run` refuses it."""

from __future__ import annotations

import json
from pathlib import Path

from spade_rl.cli import app
from spade_rl.loop.config import load_config, saved_data

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "configs" / "spade-paper-games.toml"


def test_json_is_the_resolved_configuration(runner):
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(json.dumps(saved_data(load_config())))


def test_the_paper_recipe_shows_the_reference_numbers(runner):
    result = runner.invoke(app, ["config", "--config", str(PAPER), "loop.iterations=3"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    loop, train = data["loop"], data["train"]
    assert (loop["iterations"], loop["plays_per_env"], loop["hint_plays_per_env"]) == (3, 8, 16)
    assert (data["rollout"]["max_turns"], train["learning_rate"], train["weight_decay"]) == (25, 1e-6, 0.1)


def test_explain_names_each_value_s_source(runner):
    result = runner.invoke(app, ["config", "-c", str(PAPER), "loop.iterations=3", "--explain"])
    assert result.exit_code == 0, result.output
    lines = {line.split(" = ")[0]: line for line in result.stdout.splitlines()}
    assert lines["loop.iterations"].endswith("# override")
    assert lines["loop.hint_plays_per_env"].split("#")[0].strip().endswith("= 16")
    assert lines["loop.hint_plays_per_env"].endswith(f"# file {PAPER}")
    assert lines["loop.seed"].endswith("# default")
    assert "design.n" not in lines  # derived from loop.designs_per_iteration: left out, as in config.json
    cpu = runner.invoke(app, ["config", "--explain"]).stdout
    assert "loop.hint_plays_per_env = 4" in cpu and "# profile cpu" in cpu


def test_explain_says_what_a_run_decides_from_who_samples(runner):
    servers = ROOT / "configs" / "servers-vllm.toml"
    result = runner.invoke(app, ["config", "-c", str(servers), "--explain"])
    assert result.exit_code == 0, result.output
    lines = {line.split(" = ")[0]: line for line in result.stdout.splitlines()}
    assert 'the run uses "recompute"' in lines["train.old_logprobs"]
    assert "the run uses 2.0" in lines["train.tis_cap"] and "'servers' samples" in lines["train.tis_cap"]
    cpu = {
        line.split(" = ")[0]: line for line in runner.invoke(app, ["config", "--explain"]).stdout.splitlines()
    }
    assert 'the run uses "sampling"' in cpu["train.old_logprobs"]
    assert cpu["train.tis_cap"].endswith("# default")  # nothing decided: no cap where the trainer samples


def test_a_configuration_that_cannot_run_is_refused(runner, clean_failure, tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[loop]\niterations = 2\n")
    clean_failure(runner.invoke(app, ["config", "-c", str(path)]), "names no profile")
    clean_failure(runner.invoke(app, ["config", "loop.no_such_key=1"]), "no_such_key")
