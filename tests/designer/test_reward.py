"""The designer's delayed reward (rewards.delay, designer/reward.py) as the reference trains its proposer
(spade-rl/spade, spade/slime/spade_rollout.py, --spade-proposer-training-delay): designs held with their
token ids until D iterations later, their environments played first meanwhile, rewarded from the window;
the learning-potential averages; checkpoints. Hand-computed numbers; the last test runs the loop."""

from __future__ import annotations

import json
import random
import shutil
from types import SimpleNamespace

import pytest

from spade_rl.design.parse import Parsed
from spade_rl.design.validate import ValidationReport
from spade_rl.designer.reward import STATE_FILE, DesignerRewards, cohorts_due_at_once
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.loop.stages import Design, PlayedEnv, Proposal, UpdateResult, iteration_metrics
from spade_rl.policy import Generation
from spade_rl.rewards import DesignerRewardConfig, LearningPotential, WindowPlay
from spade_rl.rollout import Episode, EpisodeSpec, Turn
from spade_rl.stats import play_stats


def generation(token: int) -> Generation:
    return Generation("x", (1, 2), (token, token + 1), (-0.5, -0.25), "stop")


def design(env_id: int, skill: str = "math", valid: bool = True, token: int = 10) -> Design:
    report = ValidationReport(True, "ok") if valid else None
    parsed = Parsed("ok" if valid else "syntax_error")
    return Design(Proposal(skill, None, (), [], generation(token), parsed), report, env_id, False)


def episode(reward: float) -> Episode:
    turn = Turn("a", "o", reward, True, False, "stop")
    return Episode(
        EpisodeSpec(""),
        turns=[turn],
        stop_reason="terminated",
        token_ids=[1, 2],
        mask=[0, 1],
        logprobs=[0.0, -1.0],
        prompt_length=1,
    )


def played(env_id: int, win: float, hint: float | None = None, n: int = 4) -> PlayedEnv:
    """An environment's play: ``n`` no-hint episodes of which ``win * n`` are won (return 1, the others 0),
    and ``n`` with the hint winning ``hint`` (default: ``win``)."""
    hint = win if hint is None else hint
    nohint = [episode(1.0 if k < round(win * n) else 0.0) for k in range(n)]
    with_hint = [episode(1.0 if k < round(hint * n) else 0.0) for k in range(n)]
    return PlayedEnv(env_id, nohint, with_hint, play_stats(nohint, with_hint))


def rewards(delay: int, regenerate_every: int, **config) -> DesignerRewards:
    """The plain regret (regret_confidence 0) unless a test asks otherwise: these tests compute the
    delay's rewards by hand from it; test_the_paid_regret_is_the_bound_and_both_are_logged the bound's."""
    config.setdefault("regret_confidence", 0.0)
    return DesignerRewards(DesignerRewardConfig(delay=delay, **config), regenerate_every)


def test_designs_are_held_for_d_iterations_and_rewarded_from_their_window():
    """D = R = 2 (the paper's D = regenerate_every): designs of iteration 1 are played in 1 and 2 and rewarded
    in 3, whose play is not theirs (a new regeneration window)."""
    state = rewards(2, 2)
    assert state.step([design(1), design(2, token=20)], [played(1, 0.25, 0.5), played(2, 1.0)], 1) == []
    assert [h.env_id for h in state.held] == [1, 2] and state.to_play(2) == [1, 2]
    assert state.step([], [played(1, 0.75), played(2, 0.5)], 2) == []
    assert state.to_play(3) == []  # outside their regeneration window: not played first any more
    due = state.step([], [played(1, 0.0), played(2, 0.0)], 3)
    assert state.held == []
    first, second = due
    assert [p.iteration for p in first.held.plays] == [1, 2]  # iteration 3's play is not in the window
    # env 1: pooled win (0.25 + 0.75) / 2 = 0.5 -> plateau 1; regret at regeneration 0.25 -> clip 1:
    # 0.6 + 0.4 = 1.0. Rewarded at once it would have had plateau(0.25) = 0.4: 0.24 + 0.4 = 0.64.
    assert first.reward == pytest.approx(1.0)
    # env 2: pooled win 0.75 -> plateau 1 - 0.15 / 0.25 = 0.4; no regret: 0.24 (at once: plateau(1) = 0).
    assert second.reward == pytest.approx(0.24)
    assert first.held.generation.completion_token_ids == (10, 11)  # kept with their token ids


def test_a_shorter_delay_counts_the_play_of_the_rewarding_iteration_too():
    """D = 1 < R = 4: as in the reference, whose rollout accumulates its own plays before it retrieves the
    delayed samples, the window is iterations 1 and 2."""
    state = rewards(1, 4)
    state.step([design(1)], [played(1, 0.25, 0.5)], 1)
    (due,) = state.step([], [played(1, 0.75)], 2)
    assert [p.iteration for p in due.held.plays] == [1, 2] and due.reward == pytest.approx(1.0)


def test_without_a_delay_every_design_is_rewarded_in_its_own_iteration():
    state = rewards(0, 4)
    due = state.step([design(1), design(2)], [played(1, 0.25, 0.5), played(2, 1.0)], 1)
    assert [d.reward for d in due] == pytest.approx([0.64, 0.0]) and state.held == []
    assert state.to_play(2) == []


def test_the_last_iteration_rewards_everything_still_held():
    state = rewards(4, 4)
    state.step([design(1)], [played(1, 0.25, 0.5)], 1)
    (due,) = state.step([], [played(1, 0.75)], 2, last=True)
    assert due.reward == pytest.approx(1.0) and state.held == []


def test_what_is_held_and_what_is_not():
    """Invalid designs wait with their penalty (their phase is centred together); with retries they get no
    gradient; a valid design its iteration did not play has no regret to learn from."""
    state = rewards(2, 2, progress_bonus=0.0)
    state.step([design(1), design(2, valid=False), design(3)], [played(1, 0.5)], 1)
    assert [(h.env_id, h.valid, h.reward) for h in state.held] == [(1, True, None), (2, False, 0.0)]
    assert state.to_play(2) == [1]
    retry = DesignerRewards(DesignerRewardConfig(delay=2), 2, "retry")
    retry.step([design(1), design(2, valid=False)], [played(1, 0.5)], 1)
    assert [h.env_id for h in retry.held] == [1]
    # two designs of one source share an environment: one play per iteration in each window
    twice = rewards(2, 2)
    twice.step([design(1), design(1, token=30)], [played(1, 0.5)], 1)
    assert [len(h.plays) for h in twice.held] == [1, 1]


def test_learning_potential_with_a_delay_updates_first_then_reads():
    """The reference's delayed update (update_lp): mu updated from the window's plays of the skill, then
    |win - mu_slow| with the new baseline."""
    state = rewards(1, 4, mode="learning_potential")
    state.potentials["math"] = LearningPotential(0.4, 0.2)
    state.step([design(1)], [played(1, 0.25)], 1)
    (due,) = state.step([], [played(1, 0.75)], 2)
    lp = state.potentials["math"]
    assert lp.mu_fast == pytest.approx(0.02 * 0.4 + 0.98 * 0.5)  # 0.498: the pooled win rate is 0.5
    assert lp.mu_slow == pytest.approx(0.15 * 0.2 + 0.85 * 0.5)  # 0.455
    assert due.reward == pytest.approx(abs(0.5 - 0.455))
    lp_metrics = {k: v for k, v in state.metrics().items() if k.startswith("designer/lp/")}
    assert lp_metrics == {"designer/lp/math/mu_fast": lp.mu_fast, "designer/lp/math/mu_slow": lp.mu_slow}


def test_learning_potential_without_a_delay_reads_first_then_updates():
    """Per skill: the baseline before this iteration's plays (assign_env_rewards), then the update."""
    state = rewards(0, 1, mode="learning_potential")
    state.potentials["math"] = LearningPotential(0.4, 0.2)
    due = state.step(
        [design(1), design(2), design(3, skill="logic")],
        [played(1, 0.25), played(2, 0.75), played(3, 0.5)],
        1,
    )
    assert [d.reward for d in due] == pytest.approx([0.05, 0.55, 0.5])  # |w - 0.2| twice; logic: no history
    assert state.potentials["math"].mu_slow == pytest.approx(0.15 * 0.2 + 0.85 * 0.5)  # skill's mean 0.5
    assert state.potentials["logic"] == LearningPotential(0.5, 0.5)


def test_held_designs_and_averages_survive_a_checkpoint(tmp_path):
    state = rewards(2, 2, mode="learning_potential")
    state.step([design(1), design(2, valid=False)], [played(1, 0.25, 0.5)], 1)
    state.potentials["math"] = LearningPotential(0.3, 0.1)
    state.save(tmp_path / STATE_FILE)
    again = rewards(2, 2, mode="learning_potential")
    again.restore(tmp_path / STATE_FILE)
    assert again.to_data() == state.to_data()
    assert again.held[0].generation.completion_logprobs == (-0.5, -0.25)
    assert again.held[0].plays == [WindowPlay(1, 4, 0.25, 0.25)]
    assert again.to_play(2) == [1]
    assert [d.reward for d in again.step([], [played(1, 0.75)], 2, last=True)] == [
        d.reward for d in state.step([], [played(1, 0.75)], 2, last=True)
    ]
    empty = rewards(2, 2)
    empty.restore(tmp_path / "missing" / STATE_FILE)  # a checkpoint of an earlier release: nothing held
    assert empty.held == [] and empty.potentials == {}
    (tmp_path / "other.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(ValueError, match="format 99; this release reads 1"):
        empty.restore(tmp_path / "other.json")


# Two environments a turn: room in one update for the designs of two phases.
FEW = ["loop.envs_per_iteration=2", "rewards.progress_bonus=0.0"]


def batch_of(overrides, designs, played_envs, iteration, state):
    config = load_config(None, overrides)
    return SelfPlay._batch(SimpleNamespace(config=config), designs, played_envs, iteration, state)


def test_the_batch_trains_the_held_designs_when_they_fall_due():
    overrides = [*FEW, "rewards.delay=2", "loop.regenerate_every=2", "rewards.regret_confidence=0"]
    config = load_config(None, overrides)
    state = DesignerRewards(config.rewards, 2)
    first = batch_of(
        overrides, [design(1), design(2, token=20)], [played(1, 0.25, 0.5), played(2, 1.0)], 1, state
    )
    assert first.designer == [] and (first.designer_held, first.designer_rewarded) == (2, 0)
    metrics = iteration_metrics([], [], first, UpdateResult(skipped=True), (0.15, 0.85))
    assert (metrics["designer/held"], metrics["designer/rewarded"], metrics["samples/designer"]) == (2, 0, 0)
    batch_of(overrides, [], [played(1, 0.75), played(2, 0.5)], 2, state)
    third = batch_of(overrides, [], [played(3, 0.5)], 3, state)
    assert (third.designer_held, third.designer_rewarded) == (0, 2)
    # rewards 1.0 and 0.24 (the first test), centred: +-0.38; one group, after the one agent group
    assert [s.advantage for s in third.designer] == pytest.approx([0.38, -0.38])
    assert [s.completion_ids for s in third.designer] == [(10, 11), (20, 21)]
    assert {s.group for s in third.designer} == {1} and third.designer_reward_mean == pytest.approx(0.62)
    plain = batch_of(["rewards.progress_bonus=0.0"], [design(1)], [played(1, 0.5)], 1, None)
    assert plain.designer_held is None  # no delay: no held / rewarded metrics


def test_design_phases_falling_due_together_are_centred_apart():
    """The last iteration of D = R = 1 with 2 iterations trains the phases of iterations 1 and 2: one group
    each (a group never holds more than one phase's designs)."""
    overrides = [*FEW, "rewards.delay=1", "loop.iterations=2"]
    state = DesignerRewards(load_config(None, overrides).rewards, 1)
    batch_of(overrides, [design(1), design(2, token=20)], [played(1, 0.25, 0.5), played(2, 1.0)], 1, state)
    last = batch_of(
        overrides, [design(3, token=30), design(4, token=40)], [played(3, 0.5), played(4, 0.0)], 2, state
    )
    groups = {}
    for s in last.designer:
        groups.setdefault(s.group, []).append(s.completion_ids[0])
    assert sorted(groups.values()) == [[10, 20], [30, 40]] and last.designer_groups == 2


def test_held_environments_are_played_before_the_pool():
    pool = SimpleNamespace(
        sample_pool=lambda n, rng, setting, replace=False: [9, 8, 7, 6][:n] if replace else [9, 8, 7, 6]
    )
    run = SimpleNamespace(config=load_config(None, ["loop.pool_replace=false"]), archive=pool)
    chosen = SelfPlay._choose_envs(run, [design(5), design(6, valid=False)], random.Random(0), [1, 5, 2])
    assert chosen == [5, 1, 2, 9, 8, 7]
    # drawn with replacement (the CPU default): the slots left, each draw independent
    run = SimpleNamespace(config=load_config(None, []), archive=pool)
    chosen = SelfPlay._choose_envs(run, [design(5), design(6, valid=False)], random.Random(0), [1, 5, 2])
    assert chosen == [5, 1, 2, 9, 8, 7]


def test_the_update_has_room_for_every_phase_the_last_iteration_trains():
    assert cohorts_due_at_once(400, 4, 4) == 1  # the paper's: only the phase of iteration 397 at the end
    assert cohorts_due_at_once(397, 4, 4) == 2  # 393 falls due at 397, which designs too
    assert (cohorts_due_at_once(4, 1, 2), cohorts_due_at_once(4, 1, 0), cohorts_due_at_once(2, 3, 8)) == (
        3,
        1,
        1,
    )
    with pytest.raises(
        ConfigError, match=r"with rewards.delay = 2 the last iteration trains the designs of 3"
    ):
        # the CPU default (4 iterations, regenerating every one) with every group in one step
        load_config(None, ["rewards.delay=2", "loop.groups_per_step=0"])
    wide = ["rewards.delay=2", "loop.groups_per_step=0", "train.gradient_accumulation_steps=36"]  # 72 rows
    assert load_config(None, wide).rewards.delay == 2
    with pytest.raises(ConfigError, match="delay must be a whole number"):
        load_config(None, ["rewards.delay=-1"])


@pytest.mark.slow
def test_a_delayed_run_resumes_without_losing_or_recounting_a_play(tmp_path):
    """Three iterations, D = R = 2, through the tiny model and the real sandbox: the designs of iteration 1
    are held over 1-2 and trained in 3, with those of 3 (the last). Then iteration 3 again from the
    checkpoint of 2, as after a crash: the same held designs, the same plays, the same rewards."""
    from fixture_envs import PARITY, SMALL, designer_output, scripted_roles
    from spade_rl.policy import tiny_random_model

    sources = [PARITY.replace("ParityEnv", f"Parity{i}Env") for i in range(4)]
    overrides = [*SMALL, "loop.iterations=3", "loop.regenerate_every=2", "rewards.delay=2"]
    config = load_config(None, overrides)
    model, tokenizer = tiny_random_model(seed=0)
    run_dir = tmp_path / "run"
    roles = scripted_roles(model, tokenizer, [designer_output(s) for s in sources])
    with SelfPlay(config, run_dir, **roles) as run:
        metrics = list(run.iterations())
    assert [(m["designer/held"], m["designer/rewarded"]) for m in metrics] == [(2, 0), (2, 0), (0, 4)]
    assert [m["samples/designer"] for m in metrics[:2]] == [0, 0]
    held = json.loads((run_dir / "checkpoints" / "iter-0002" / STATE_FILE).read_text())["held"]
    assert [[p[0] for p in h["plays"]] for h in held] == [[1, 2], [1, 2]]  # both windows, once each
    assert all(h["generation"]["completion_token_ids"] for h in held)
    assert json.loads((run_dir / "checkpoints" / "iter-0003" / STATE_FILE).read_text())["held"] == []

    shutil.rmtree(run_dir / "checkpoints" / "iter-0003")  # as if killed before iteration 3's checkpoint
    model, tokenizer = tiny_random_model(seed=1)  # the checkpoint's weights replace these
    roles = scripted_roles(model, tokenizer, [designer_output(s) for s in sources[2:]])
    with SelfPlay(config, run_dir, resume=True, **roles) as run:
        assert [h.env_id for h in run.designer_rewards.held] == [h["env_id"] for h in held]
        again = list(run.iterations())
    assert [m["iteration"] for m in again] == [3]
    for key in ("designer/held", "designer/rewarded", "designer/reward_mean", "samples/designer"):
        assert again[0][key] == metrics[2][key], key
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]


def test_the_paid_regret_is_the_bound_and_both_are_logged():
    """At the default confidence a design's regret is rewards.regret_bound of its plays; the iteration's
    metrics give the unfloored difference and the paid bound, then start again."""
    from spade_rl.rewards import regret_bound

    held = rewards(0, 1, regret_confidence=0.95)
    noisy, helped = played(1, 0.5, 0.25), played(2, 0.0, 1.0)  # a hint that hurts; one that helps
    [first, second] = held.step([design(1), design(2)], [noisy, helped], iteration=1)
    expected = regret_bound([e.return_ for e in helped.hint], [e.return_ for e in helped.nohint])
    assert first.held.regret == 0.0 and second.held.regret == pytest.approx(expected) and expected > 0
    metrics = held.metrics()
    assert metrics["designer/regret_unfloored_mean"] == pytest.approx((-0.25 + 1.0) / 2)
    assert metrics["designer/regret_paid_mean"] == pytest.approx(expected / 2)
    assert "designer/regret_paid_mean" not in held.metrics()  # logged once per iteration
