"""The iteration's stages as data (loop/stages.py) and the metrics line computed once from them."""

import pytest

from spade_rl.archive import PlayStats
from spade_rl.design.parse import Parsed
from spade_rl.loop.stages import (
    Design,
    PlayedEnv,
    PlayTag,
    Proposal,
    TrainingBatch,
    UpdateResult,
    iteration_metrics,
)
from spade_rl.policy import Generation
from spade_rl.train import Sample

GENERATION = Generation(
    text="x",
    prompt_token_ids=(1,),
    completion_token_ids=(2,),
    completion_logprobs=(-1.0,),
    finish_reason="stop",
)


def design(reason: str, report=None, env_id: int = 1) -> Design:
    """A proposal parsed with ``reason`` (its report: ``report``, None when parsing failed)."""
    return Design(Proposal("math", None, (), [], GENERATION, Parsed(reason)), report, env_id, False)


def batch_of(overrides: list[str], designs: list[Design], played: list[PlayedEnv]) -> TrainingBatch:
    """``SelfPlay._batch`` of a run configured with ``overrides`` (nothing else of the run is needed)."""
    from types import SimpleNamespace

    from spade_rl.loop.config import load_config
    from spade_rl.loop.run import SelfPlay

    return SelfPlay._batch(SimpleNamespace(config=load_config(None, overrides)), designs, played)


def sample(role: str) -> Sample:
    return Sample(role, (1, 2), (3, 4), (1, 1), (-0.5, -0.5), 1.0, 0)


def test_a_batch_trains_the_designer_only_when_asked():
    batch = TrainingBatch(agent=[sample("agent")], designer=[sample("designer")], designer_trains=False)
    assert [s.role for s in batch.samples] == ["agent"]
    batch.designer_trains = True
    assert [s.role for s in batch.samples] == ["agent", "designer"]


def test_the_metrics_line_comes_from_the_stages():
    stats = PlayStats(2, 2, 0.5, 1.0, 0.5, 3.0, 0.5, 1.0)
    played = [PlayedEnv(7, [], [], stats)]
    batch = TrainingBatch(
        agent=[sample("agent")] * 2,
        designer=[sample("designer")],
        agent_groups=1,
        designer_groups=1,
        designer_zero_signal=1,
        designer_reward_mean=-0.5,
        designer_trains=False,
    )
    metrics = iteration_metrics([], played, batch, UpdateResult({"train/loss": 0.1}), (0.15, 0.85))
    assert metrics["designer/proposed"] == 0 and metrics["designer/valid_rate"] is None
    assert (metrics["agent/envs"], metrics["agent/win_rate"], metrics["frontier/fraction"]) == (1, 0.5, 1.0)
    assert metrics["samples/agent"] == 2 and metrics["samples/designer"] == 0
    assert metrics["samples/designer_untrained"] == 1
    assert (metrics["groups/total"], metrics["groups/zero_signal"]) == (2, 1)
    assert metrics["train/loss"] == 0.1 and "train/skipped" not in metrics
    empty = iteration_metrics([], [], TrainingBatch(), UpdateResult(skipped=True), (0.15, 0.85))
    invalid = iteration_metrics(
        [design("syntax_error")], [], TrainingBatch(), UpdateResult(skipped=True), (0, 1)
    )
    assert invalid["designer/reasons"] == {"syntax_error": 1} and invalid["designer/valid_rate"] == 0.0
    assert empty["agent/win_rate"] is None and empty["train/skipped"] == 1.0 and "agent/envs" not in empty


def test_a_play_tag_is_typed_with_its_group_slot():
    tag = PlayTag(3, True)
    assert (tag.env_id, tag.use_hint, tag.slot) == (3, True, 0) and tag == (3, True, 0) and tag[0] == 3
    assert PlayTag(3, True, 1) != tag  # the second group of one environment in an iteration


def test_the_designers_advantages_are_scaled_as_the_reference_scales_them():
    """SelfPlay._batch: 2 played environments of 4 no-hint plays, 2 designs (one valid, one invalid):
    the designer's centred advantages times min(8 agent samples / 2 designs * regenerate_every 2, 50) = 8."""
    from spade_rl.design.validate import ValidationReport
    from spade_rl.rollout import Episode, EpisodeSpec, Turn
    from spade_rl.stats import play_stats

    def episode(reward):
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

    played = []
    for env_id, rewards in ((1, [1.0, 0.0, 1.0, 0.0]), (2, [1.0, 1.0, 0.0, 0.0])):
        nohint = [episode(r) for r in rewards]
        hint = [episode(1.0) for _ in rewards]
        played.append(PlayedEnv(env_id, nohint, hint, play_stats(nohint, hint)))
    both = [design("ok", ValidationReport(True, "ok"), 1), design("syntax_error", env_id=0)]
    batch = batch_of(
        ["rewards.scale='reference'", "loop.regenerate_every=2", "rewards.progress_bonus=0.0"], both, played
    )
    assert len(batch.agent) == 8 and batch.designer_scale == 8.0
    plain = batch_of(["rewards.progress_bonus=0.0"], both, played)
    assert [s.advantage for s in batch.designer] == pytest.approx([8.0 * s.advantage for s in plain.designer])
    assert any(s.advantage != 0 for s in plain.designer)


def test_negative_designer_rewards_are_masked_when_asked():
    """rewards.mask_negative: a timed-out design (reward -0.5) is left out of the designer's group."""
    from spade_rl.design.validate import ValidationReport

    both = [design("ok", ValidationReport(False, "timeout"), 1), design("syntax_error", env_id=2)]
    plain = batch_of(["rewards.progress_bonus=0.0"], both, [])
    masked = batch_of(["rewards.progress_bonus=0.0", "rewards.mask_negative=true"], both, [])
    assert len(plain.designer) == 2 and plain.designer_reward_mean == -0.25  # -0.5 and 0
    assert masked.designer_masked == 1 and masked.designer_groups == 1 and masked.designer_reward_mean == 0.0
    assert masked.designer == []  # one design left: no signal in its group, dropped
    metrics = iteration_metrics(both, [], masked, UpdateResult(skipped=True), (0.15, 0.85))
    assert metrics["designer/masked_negative"] == 1


def test_with_retries_a_design_that_failed_every_try_gets_no_gradient():
    invalid = [design("syntax_error", env_id=i) for i in (1, 2)]
    penalty = batch_of([], invalid, [])
    retry = batch_of(["design.invalid='retry'"], invalid, [])
    assert penalty.designer_reward_mean is not None and penalty.designer_groups == 1
    assert retry.designer_reward_mean is None and retry.designer_groups == 0 and retry.designer == []
