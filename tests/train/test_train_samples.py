"""Samples of the GRPO update (spade_rl.train.samples): from episodes and generations, validation, and the
padded batch of the learner (spade_rl.train.samples)."""

from __future__ import annotations

import dataclasses

import pytest
from train_helpers import make_samples

from spade_rl.policy import Generation
from spade_rl.rollout import Episode, EpisodeSpec
from spade_rl.train import Sample, sample_from_episode, sample_from_generation
from spade_rl.train.samples import pad_samples, split_groups


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
    batch = pad_samples([sample, sample], pad_id=0, max_completion_length=3)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4], [1, 2, 3, 4]] and batch.truncated == 2


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


def test_the_batch_is_prompt_then_completion_right_padded_with_the_trained_tokens_marked():
    """pad_samples: one row per sample (no filler), column t describes token t: trained where the model
    wrote it (never prompt, environment or padding), the sampler's log-prob there, 0 elsewhere."""
    a = Sample("agent", [1, 2], [3, 4, 5], [1, 0, 1], [-0.5, 0.0, -1.5], 0.7, 0)
    b = Sample("designer", [6], [7], [1], [-2.0], -0.2, 1)
    empty = Sample("agent", [8, 9], [], [], [], 0.0, 2)
    batch = pad_samples([a, b, empty], pad_id=99)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5], [6, 7, 99, 99, 99], [8, 9, 99, 99, 99]]
    assert batch.attention_mask.tolist() == [[1] * 5, [1, 1, 0, 0, 0], [1, 1, 0, 0, 0]]
    assert batch.trained.tolist() == [[0, 0, 1, 0, 1], [0, 1, 0, 0, 0], [0] * 5]
    assert batch.sampling_logps.tolist() == [[0, 0, -0.5, 0, -1.5], [0, -2.0, 0, 0, 0], [0] * 5]
    assert batch.advantages.tolist() == pytest.approx([0.7, -0.2, 0.0]) and batch.roles == (
        "agent",
        "designer",
        "agent",
    )
    counts = batch.counts()
    assert (
        counts["agent/samples"] == 2 and counts["agent/model_tokens"] == 2 and counts["designer/samples"] == 1
    )


def test_micro_batches_are_length_sorted_and_cut_to_their_widest_row():
    rows = [Sample("agent", [1] * n, [2], [1], [-1.0], 0.0, i) for i, n in enumerate((2, 6, 3, 6, 1))]
    parts = pad_samples(rows, pad_id=0).micro_batches(2)
    assert [p.lengths.tolist() for p in parts] == [[7, 7], [4, 3], [2]]
    assert [p.input_ids.shape[1] for p in parts] == [7, 4, 2]
    with pytest.raises(ValueError, match="at least 1"):
        pad_samples(rows, pad_id=0).micro_batches(0)


def test_a_group_split_in_two_places_is_an_error():
    a, b = make_samples(roles=("agent",), seed=1), make_samples(roles=("designer",), seed=2)
    b = [dataclasses.replace(s, group=1) for s in b]
    with pytest.raises(ValueError, match="consecutive"):
        split_groups(a[:2] + b + a[2:])
