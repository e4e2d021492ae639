"""Profiles: every configuration file names the one it builds on, `spade-rl run` without a file builds on
the CPU profile and resolves as it did before profiles existed, and each value's source is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spade_rl.loop.config import ConfigError, RunConfig, load_config, resolve_config, save_config, to_data
from spade_rl.loop.profiles import PROFILES

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "configs").glob("*.toml"))


def test_a_run_without_a_file_builds_on_the_cpu_profile():
    """The CPU profile's values, checked one by one against those `spade-rl run` used before profiles (the
    values of docs/learning-signal.md); the components' own defaults differ from it."""
    config = load_config(processes=1)
    loop = config.loop
    assert config.profile == "cpu"
    assert (loop.iterations, loop.designs_per_iteration, loop.envs_per_iteration) == (4, 4, 6)
    assert (loop.plays_per_env, loop.hint_plays, loop.group_seeds, loop.pool_replace) == (
        8,
        4,
        "shared",
        True,
    )
    assert loop.groups_per_step == 2
    transformers = config.policy.transformers
    assert (transformers.autocast, transformers.batch_tokens, transformers.prefix_cache_tokens) == (
        "auto",
        16384,
        12288,
    )
    train = config.train
    assert (train.learning_rate, train.group_size, train.rows_per_update, train.bf16) == (5e-5, 8, 16, "auto")
    # "auto": the trainer samples itself here, so the ratio is taken against the sampler's log-probs (as
    # "sampling" did before "auto" existed); a servers backend over this profile recomputes them with TIS
    update = config.update_config
    assert (train.old_logprobs, update.old_logprobs, update.tis_cap) == ("auto", "sampling", None)
    served = load_config(None, ["policy.backend='servers'", "warmup.designs=0"], processes=1).update_config
    assert (served.old_logprobs, served.tis_cap) == ("recompute", 2.0)
    assert (config.design.form, config.rollout.max_turns, config.warmup.designs) == ("question", 8, 48)
    bare = RunConfig()
    assert bare.profile == "none" and bare.loop.plays_per_env != loop.plays_per_env


def test_configs_cpu_default_writes_the_cpu_profile_out():
    assert to_data(load_config(ROOT / "configs" / "cpu-default.toml")) == to_data(load_config())


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_configuration_names_its_profile(path):
    resolved = resolve_config(path, processes=1)
    assert resolved.source("profile") == f"file {path}"
    assert resolved.config.profile in PROFILES


def test_a_file_that_names_no_profile_is_refused_with_the_choices(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[loop]\niterations = 2\n")
    with pytest.raises(ConfigError, match=r"names no profile: add a top-level profile = 'cpu'.*'none'"):
        load_config(path)
    assert load_config(path, ["profile='cpu'"]).loop.iterations == 2  # or named by an override
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"list.json must hold a table of settings, got list"):
        load_config(listed)
    path.write_text('profile = "laptop"\n')
    with pytest.raises(ConfigError, match=r"profile 'laptop' does not exist; allowed: \['cpu', 'none'\]"):
        load_config(path)


def test_each_value_names_its_source(tmp_path):
    """Override over file over profile over the component's default; a plain table is one value."""
    path = tmp_path / "run.toml"
    path.write_text(
        'profile = "cpu"\n[loop]\niterations = 2\nplays_per_env = 6\n[rollout]\naction_stop = {}\n'
    )
    resolved = resolve_config(path, ["loop.iterations=3"], processes=1)
    config = resolved.config
    assert (config.loop.iterations, config.loop.plays_per_env, config.loop.hint_plays) == (3, 6, 4)
    assert resolved.source("loop.iterations") == "override"
    assert resolved.source("loop.plays_per_env") == f"file {path}"
    assert resolved.source("loop.hint_plays_per_env") == "profile cpu"
    assert resolved.source("loop.seed") == "default"
    # a table the file sets replaces the profile's whole: the CPU profile's "}" stop is gone
    assert config.rollout.action_stop == {} and resolved.source("rollout.action_stop") == f"file {path}"
    assert config.rollout.action_prefix == {"games": "\\boxed{"}


def test_a_saved_configuration_resolves_to_itself(tmp_path):
    """config.json holds the profile and every key: read back (a resume), it is the same configuration."""
    config = load_config(ROOT / "configs" / "spade-paper-games.toml", processes=1)
    save_config(config, tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text())["profile"] == "none"
    assert load_config(tmp_path / "config.json", processes=1) == config
    # one saved before profiles existed: it was resolved over the CPU defaults, and is read over them
    data = json.loads((tmp_path / "config.json").read_text())
    del data["profile"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = resolve_config(tmp_path / "old.json", processes=1)
    assert old.config.profile == "cpu" and old.source("profile").startswith("default: a saved run's")
    assert old.config.loop == config.loop
