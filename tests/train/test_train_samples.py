"""Samples of the GRPO update (spade_rl.train.samples): from episodes and generations, validation, and the
batch layout (one group per block of group_size rows, filler rows)."""

from __future__ import annotations

import dataclasses

import pytest
from train_helpers import G, make_samples

from spade_rl.policy import Generation
from spade_rl.rollout import Episode, EpisodeSpec
from spade_rl.train import Sample, assemble_batch, sample_from_episode, sample_from_generation


def test_sample_from_episode_splits_at_the_prompt_length():
    episode = Episode(EpisodeSpec(source="class XEnv: ..."))
    episode.append([1, 2, 3], model=False)
    episode.append([4, 5], model=True, logprobs=[-0.5, -0.25])
    episode.append([6], model=False)
    episode.append([7], model=True, logprobs=[-1.0])
    episode.prompt_length = 3
    sample = sample_from_episode(episode, advantage=0.5, group=7)
    assert sample.role == "agent" and sample.group == 7 and sample.advantage == 0.5
    assert sample.prompt_ids == (1, 2, 3)
    assert sample.completion_ids == (4, 5, 6, 7)
    assert sample.completion_mask == (1, 1, 0, 1)
    assert sample.logprobs == (-0.5, -0.25, 0.0, -1.0)
    assert sample.model_tokens == 3


def test_sample_from_generation_trains_every_completion_token():
    generation = Generation("hi", (1, 2), (3, 4, 5), (-0.1, -0.2, -0.3), "stop")
    sample = sample_from_generation(generation, advantage=-1.0, group=0)
    assert sample.role == "designer"
    assert (sample.prompt_ids, sample.completion_ids) == ((1, 2), (3, 4, 5))
    assert sample.completion_mask == (1, 1, 1) and sample.logprobs == (-0.1, -0.2, -0.3)
    with pytest.raises(ValueError, match="no log-probabilities"):
        sample_from_generation(Generation("hi", (1,), (3,), None, "stop"), 0.0, 0)


def test_truncation_keeps_the_first_tokens():
    sample = Sample("agent", [1], [2, 3, 4, 5], [1, 0, 1, 1], [-1.0, 0.0, -2.0, -3.0], 0.0, 0)
    cut = sample.truncated(2)
    assert (cut.completion_ids, cut.completion_mask, cut.logprobs) == ((2, 3), (1, 0), (-1.0, 0.0))
    assert sample.truncated(4) is sample
    batch = assemble_batch([sample, sample], 2, 2, filler_token_id=0, max_completion_length=3)
    assert batch.completion_ids == [[2, 3, 4], [2, 3, 4]] and batch.truncated == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"role": "solver"}, "role"),
        ({"prompt_ids": []}, "prompt_ids must not be empty"),
        ({"completion_mask": [1, 2]}, "only 0"),
        ({"logprobs": [-1.0]}, "one entry per completion token"),
        ({"logprobs": [-1.0, float("nan")]}, "finite"),
        ({"advantage": float("inf")}, "advantage"),
        ({"completion_ids": [-1, 2]}, "non-negative"),
    ],
)
def test_sample_validation(change, message):
    fields = dict(
        role="agent", prompt_ids=[1], completion_ids=[2, 3], completion_mask=[1, 0], logprobs=[-1.0, 0.0]
    )
    fields.update(change)
    with pytest.raises(ValueError, match=message):
        Sample(advantage=fields.pop("advantage", 0.0), group=0, **fields)


def test_batch_puts_one_group_per_block_and_fills_the_rest():
    samples = make_samples(group_size=3)  # 3 designer + 3 agent samples, G = 4
    batch = assemble_batch(samples, group_size=G, rows=12, filler_token_id=0)
    assert len(batch) == 12
    assert batch.roles == ["designer"] * 4 + ["agent"] * 8
    assert batch.filler == [False] * 3 + [True] + [False] * 3 + [True] * 5
    assert [batch.advantages[i] for i in (3, 7, 8, 11)] == [0.0] * 4
    assert all(batch.completion_mask[i] == [0] for i in (3, 7, 8, 11))  # fillers train nothing
    for block in range(3):  # every block's mean is 0, so TRL's centring changes nothing
        assert abs(sum(batch.advantages[block * G : block * G + G])) < 1e-9
    counts = batch.counts()
    assert counts["designer/samples"] == 3 and counts["agent/samples"] == 3 and counts["filler_rows"] == 6


def test_empty_completion_becomes_one_untrained_token():
    sample = Sample("agent", [1, 2], [], [], [], 0.0, 0)
    batch = assemble_batch([sample, sample], 2, 2, filler_token_id=9)
    assert batch.completion_ids == [[9], [9]] and batch.completion_mask == [[0], [0]]
    assert batch.no_logprobs == 0


def test_samples_without_logprobs_are_counted():
    with_lp = Sample("agent", [1], [2, 3], [1, 0], [-0.5, 0.0], 0.0, 0)
    without = Sample("agent", [1], [2, 3], [1, 0], [0.0, 0.0], 0.0, 0)
    assert assemble_batch([with_lp, without], 2, 2, filler_token_id=0).counts()["no_logprobs"] == 1


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (make_samples(roles=("agent", "agent", "designer")), "more than the 8 rows"),
        (make_samples(group_size=5, roles=("agent",)), "more than group_size=4"),
        (make_samples(roles=("agent",))[:2] + make_samples(roles=("designer",))[2:], "mixes roles"),
        (make_samples(roles=("agent",), scale={"agent": 1.0})[:3], "not 0"),
    ],
)
def test_batch_errors_say_what_is_wrong(samples, message):
    with pytest.raises(ValueError, match=message):
        assemble_batch(samples, group_size=G, rows=8, filler_token_id=0)


def test_a_group_split_in_two_places_is_an_error():
    a, b = make_samples(roles=("agent",), seed=1), make_samples(roles=("designer",), seed=2)
    b = [dataclasses.replace(s, group=1) for s in b]
    with pytest.raises(ValueError, match="consecutive"):
        assemble_batch(a[:2] + b + a[2:], group_size=G, rows=16, filler_token_id=0)
