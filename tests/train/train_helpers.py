"""Helpers of the GRPO update's tests (spade_rl.train): random samples of both roles, weight comparisons."""

from __future__ import annotations

import dataclasses
import random

from spade_rl.rewards import centred_advantages, zscore_advantages
from spade_rl.train import Sample

G = 4  # group size in these tests


def make_samples(
    seed=0,
    roles=("designer", "agent"),
    scale=None,
    prompt_len=8,
    completion_len=10,
    group_size=G,
    env_tail=0,
):
    """One group per role: random prompts and completions, advantages from spade_rl.rewards (agent z-scores,
    designer centred), times ``scale[role]`` (default 1). Agent completions alternate model and environment
    tokens, then end with ``env_tail`` environment tokens."""
    rng = random.Random(seed)
    scale = scale or {}
    samples = []
    for group, role in enumerate(roles):
        rewards = [rng.random() for _ in range(group_size)]
        advantages = (zscore_advantages if role == "agent" else centred_advantages)(rewards).advantages
        for advantage in advantages:
            mask = (
                [1] * completion_len
                if role == "designer"
                else [(i // 3) % 2 ^ 1 for i in range(completion_len)]
            )
            mask += [0] * env_tail
            samples.append(
                Sample(
                    role=role,
                    prompt_ids=[rng.randrange(5, 2000) for _ in range(prompt_len)],
                    completion_ids=[rng.randrange(5, 2000) for _ in mask],
                    completion_mask=mask,
                    logprobs=[-rng.uniform(5, 12) if m else 0.0 for m in mask],
                    advantage=advantage * scale.get(role, 1.0),
                    group=group,
                )
            )
    return samples


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


def max_change(model, before):
    return max(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before, strict=True))


def relative_difference(a, b, before):
    """||W_a - W_b|| / ||W_b - W_0||: how far two updates from the same W_0 differ, relative to an update.
    (AdamW's first step is about lr * g / |g|, so single elements whose gradient is ~0 can differ by up
    to lr between two runs that agree to float rounding; the norm ratio is the robust measure.)"""
    pairs = zip(a.parameters(), b.parameters(), before, strict=True)
    diff = step = 0.0
    for x, y, w in pairs:
        diff += float((x.detach() - y.detach()).pow(2).sum())
        step += float((y.detach() - w).pow(2).sum())
    return (diff / step) ** 0.5


def mixed_length_samples():
    """A long designer group and short agent groups: TRL alone would pad every row to the longest."""
    long = make_samples(seed=1, roles=("designer",), prompt_len=40, completion_len=30)
    short = make_samples(seed=2, roles=("agent", "agent"), prompt_len=6, completion_len=5)
    return long + [dataclasses.replace(s, group=s.group + 1) for s in short]
