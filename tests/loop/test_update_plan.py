"""How an iteration's plays and update are laid out: hint plays, shared seeds, draws with replacement,
optimiser steps of a few groups and several epochs (the levers of the CPU learning settings)."""

from __future__ import annotations

import random

import pytest

from fixture_envs import SMALL
from spade_rl.loop.config import ConfigError, LoopConfig, load_config
from spade_rl.loop.run import SelfPlay, combine_step_metrics, plan_steps
from spade_rl.policy import tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.train import Sample


def sample(group: int, advantage: float = 0.0) -> Sample:
    return Sample("agent", (1,), (2,), (1,), (-0.5,), advantage, group)


def groups_of(step: list[Sample]) -> list[int]:
    return list(dict.fromkeys(s.group for s in step))


def test_plan_steps_cuts_whole_groups_and_shuffles_later_epochs():
    samples = [sample(g, a) for g in (0, 1, 2) for a in (-1.0, 1.0)]
    assert [groups_of(s) for s in plan_steps(samples, 0, 1, random.Random(0))] == [[0, 1, 2]]
    assert [groups_of(s) for s in plan_steps(samples, 2, 1, random.Random(0))] == [[0, 1], [2]]
    steps = plan_steps(samples, 1, 3, random.Random(0))
    assert len(steps) == 9 and all(len(step) == 2 for step in steps)  # a group is never split
    assert [groups_of(s)[0] for s in steps[:3]] == [0, 1, 2]  # the first pass keeps the batch's order
    for epoch in range(3):  # every pass trains every group once
        assert sorted(groups_of(s)[0] for s in steps[3 * epoch : 3 * epoch + 3]) == [0, 1, 2]
    orders = {
        tuple(groups_of(s)[0] for s in plan_steps(samples, 1, 2, random.Random(r))[3:]) for r in range(20)
    }
    assert len(orders) > 1  # later passes are shuffled (by the rng given)


def test_step_metrics_sum_counts_and_average_the_rest():
    one = {"train/loss": 0.5, "time/train_s": 2.0, "train/agent/samples": 4.0, "train/step": 7.0}
    assert combine_step_metrics([one]) == one
    two = {"train/loss": 0.1, "time/train_s": 3.0, "train/agent/samples": 2.0, "train/step": 8.0}
    combined = combine_step_metrics([one, two])
    assert combined["train/loss"] == pytest.approx(0.3)
    assert combined["time/train_s"] == 5.0 and combined["train/agent/samples"] == 6.0
    assert (combined["train/step"], combined["train/steps"]) == (8.0, 2.0)
    assert (combined["train/loss_first"], combined["train/loss_last"]) == (0.5, 0.1)


def test_the_levers_are_refused_with_what_is_allowed():
    with pytest.raises(ConfigError, match=r"loop\.group_seeds 'same'; allowed: \['distinct', 'shared'\]"):
        load_config(None, ["loop.group_seeds='same'"])
    with pytest.raises(ConfigError, match=r"loop\.update_epochs must be at least 1"):
        load_config(None, ["loop.update_epochs=0"])
    with pytest.raises(ConfigError, match=r"loop\.groups_per_step must be 0"):
        load_config(None, ["loop.groups_per_step=-1"])
    with pytest.raises(ConfigError, match=r"hint_plays_per_env must be an integer >= 0"):
        load_config(None, ["loop.hint_plays_per_env=-2"])
    # no hint episode, but a designer rewarded by regret: refused; the fixed pool may
    with pytest.raises(ConfigError, match=r"hint_plays_per_env = 0 .*designer\.source = 'none'"):
        load_config(None, ["loop.hint_plays_per_env=0"])
    assert load_config(None, ["loop.hint_plays_per_env=0", "designer.source='none'"]).loop.hint_plays == 0
    assert LoopConfig(plays_per_env=5).hint_plays == 5  # left out: as many as without the hint
    # all groups in one step: the update must hold the whole iteration's; in steps, only one step's
    with pytest.raises(ConfigError, match="rows"):
        load_config(None, ["loop.envs_per_iteration=12", "loop.groups_per_step=0"])
    config = load_config(None, ["loop.envs_per_iteration=12", "loop.groups_per_step=2"])
    assert config.loop.groups_per_step == 2 and config.train.rows_per_update == 16
    with pytest.raises(ConfigError, match=r"groups_per_step = 3 brings up to 24"):
        load_config(None, ["loop.envs_per_iteration=12", "loop.groups_per_step=3"])


def test_a_fixed_pool_run_with_every_lever_through_the_real_sandbox(tmp_path):
    """The tiny model through the real sandbox and TRL: no hint plays, one seed per group, the pool drawn
    with replacement (more groups than environments), steps of one group, two epochs."""
    model, tokenizer = tiny_random_model(seed=0)
    overrides = [
        *SMALL,
        "loop.iterations=1",
        "designer.source='none'",
        "pool.reference=['guess', 'arithmetic']",
        "loop.envs_per_iteration=3",
        "loop.plays_per_env=4",
        "loop.hint_plays_per_env=0",
        "loop.group_seeds='shared'",
        "loop.pool_replace=true",
        "loop.groups_per_step=1",
        "loop.update_epochs=2",
        "loop.drop_zero_signal_groups=false",  # every group reaches the update: the steps are countable
        "train.group_size=4",
        "train.gradient_accumulation_steps=4",
    ]
    policy = TransformersPolicy(model, tokenizer)
    with SelfPlay(load_config(None, overrides), tmp_path / "run", policy=policy) as run:
        steps = []
        update = run.learner.step
        run.learner.step = lambda samples: (steps.append(list(samples)), update(samples))[1]
        played = run._play(run._choose_envs([], random.Random(3)), random.Random(0), 1)
        assert len(played) == 3  # three groups from a pool of two: one environment twice
        assert len({p.env_id for p in played}) < 3
        for env in played:
            assert env.hint == [] and len(env.nohint) == 4
            assert len({e.spec.seed for e in env.nohint}) == 1  # one instance per group
            assert env.stats.episodes_hint == 0 and env.stats.regret == 0.0
        assert len({env.nohint[0].spec.seed for env in played}) == 3  # a new instance per group
        [metrics] = list(run.iterations())
        stats = {env_id: run.archive.stats_history(env_id) for env_id in run.archive.ids(valid=True)}
    assert len(steps) == 6 and all(len({s.group for s in step}) == 1 for step in steps)
    assert metrics["train/steps"] == 6.0 and metrics["train/agent/samples"] == 24.0
    assert metrics["agent/win_rate_hint"] is None and metrics["regret/mean"] is None
    played_stats = [rows[-1].stats for rows in stats.values() if rows]
    assert sum(s.episodes_nohint for s in played_stats) == 12  # a group twice: its plays added up
    assert all(s.episodes_hint == 0 for s in played_stats)
