"""Packed prompt feeding (spade_rl.policy.packed_prefill): the same tokens and log-probs as the left-padded
batch, with and without the prefix cache, over stretches that cut rows; the plans cover every token once."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from test_policy_prefix_cache import SETTINGS, assert_same, random_tokens, varied_prompts

from spade_rl.policy import TransformersConfig
from spade_rl.policy import transformers_backend as backend
from spade_rl.policy.packed_prefill import NAME, stretches, why_not_packed
from spade_rl.policy.prefix_cache import NO_REUSE
from spade_rl.policy.transformers_backend import TransformersPolicy


def play(
    policy: TransformersPolicy,
    settings: Any,
    seed: int = 0,
    turns: int = 3,
    follow: list[list[Any]] | None = None,
) -> list[list[Any]]:
    """Conversations that grow as rollouts grow them (prompt, completion, a few more tokens), per turn; with
    ``follow`` (another play's turns) each turn's prompts grow by that play's completions, so that both
    are asked the same prompts even where a sampled row parted from the other at a draw's boundary."""
    rng = random.Random(seed)
    prompts = varied_prompts(rng, alone=4, longest=30, sharing=5, rest=12)
    out = []
    for turn in range(turns):
        generations = policy.generate_tokens(prompts, settings)
        out.append(generations)
        grown = follow[turn] if follow is not None else generations
        n = settings.n
        prompts = [
            prompts[i] + list(grown[i * n].completion_token_ids) + random_tokens(rng, rng.randint(1, 9))
            for i in range(len(prompts))
        ]
    return out


def policy_of(tiny: tuple[Any, Any], packed: bool, **config: Any) -> TransformersPolicy:
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, TransformersConfig(packed_prefill=packed, **config))
    assert policy._packs() is packed
    return policy


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("cache_tokens", [4096, 0])
def test_packed_prompts_give_what_padded_prompts_give(tiny, name, cache_tokens) -> None:
    settings = SETTINGS[name]
    padded = play(policy_of(tiny, False, prefix_cache_tokens=cache_tokens), settings)
    packed = play(policy_of(tiny, True, prefix_cache_tokens=cache_tokens), settings, follow=padded)
    for a, b in zip(packed, padded, strict=True):
        assert_same(a, b, tiny[0], settings.temperature)


def test_stretches_that_cut_rows_give_the_same(tiny, monkeypatch) -> None:
    """A packed feed longer than PREFILL_TOKENS goes in stretches; a row cut between two attends, in the
    second, to what the first wrote to the cache."""
    settings = SETTINGS["greedy"]
    whole = play(policy_of(tiny, True), settings, seed=1)
    calls = []
    forward = backend.TransformersPolicy._prefill

    def counted(self, prompts, reuse, *args):
        calls.append(sum(len(p) - r.length for p, r in zip(prompts, reuse, strict=True)))
        return forward(self, prompts, reuse, *args)

    monkeypatch.setattr(backend.TransformersPolicy, "_prefill", counted)
    monkeypatch.setattr(backend, "PREFILL_TOKENS", 7)
    cut = play(policy_of(tiny, True), settings, seed=1)
    assert max(calls) > 3 * 7  # several stretches, rows cut
    for a, b in zip(cut, whole, strict=True):
        assert_same(a, b)


def test_bfloat16_autocast_packed_is_close_to_padded(tiny) -> None:
    """Under bfloat16 the two feeds round differently (other matrix shapes): the next-token log-probs after
    the same prompts agree within bfloat16's rounding."""
    rng = random.Random(2)
    prompts = varied_prompts(rng, alone=4, longest=30, sharing=5, rest=12)
    out = []
    for packed in (True, False):
        policy = policy_of(tiny, packed, autocast="bfloat16", prefix_cache_tokens=0)
        with policy._computing() as dtype:
            _, logits, *_ = policy._prefill(prompts, [NO_REUSE] * len(prompts), 0, dtype, packed)
        out.append(torch.log_softmax(logits, -1))
    assert out[0].shape == (len(prompts), 49152)
    assert (out[0] - out[1]).abs().max() < 0.05


def test_plans_cover_each_token_once_in_order() -> None:
    lengths, fed, width = [10, 4, 7, 1], [6, 4, 2, 1], 10
    for tokens in (1, 3, 5, 13, 100):
        plans = stretches(lengths, fed, width, tokens)
        assert all(0 < plan.tokens <= tokens for plan in plans)
        seen = []
        for plan in plans:
            assert [p.start for p in plan.pieces] == [
                sum(q.count for q in plan.pieces[:i]) for i in range(len(plan.pieces))
            ]
            for piece in plan.pieces:
                assert piece.first == width - lengths[piece.row]
                seen += [(piece.row, slot) for slot in range(piece.slot, piece.slot + piece.count)]
        assert seen == [(b, s) for b in range(4) for s in range(width - fed[b], width)]


def test_masks_are_causal_from_the_bottom_right() -> None:
    [plan] = stretches([5], [2], 5, 100)
    piece = plan.pieces[0]
    assert piece.span == 5 and piece.count == 2
    assert plan.mask(piece, "cpu").tolist() == [[True] * 4 + [False], [True] * 5]
    [square] = stretches([3], [3], 3, 100)
    assert square.mask(square.pieces[0], "cpu") is None  # SDPA's is_causal does


def test_packed_feed_needs_sdpa_on_the_cpu(tiny) -> None:
    model, tokenizer = tiny
    TransformersPolicy(model, tokenizer, TransformersConfig())  # on the CPU the policy sets SDPA
    assert why_not_packed(model) == ""
    try:
        policy = TransformersPolicy(model, tokenizer, TransformersConfig(attn_implementation="eager"))
        assert "eager" in why_not_packed(model)
        assert not policy._packs()
        [g] = policy.generate_tokens([[5, 6, 7]], SETTINGS["greedy"])  # left-padded then, as before
        assert g.completion_token_ids
    finally:
        TransformersPolicy(model, tokenizer, TransformersConfig())
    assert model.config._attn_implementation == "sdpa" != NAME


def test_packed_prefill_setting_is_validated() -> None:
    assert TransformersConfig().packed_prefill is True
    with pytest.raises(ValueError, match="packed_prefill must be true or false"):
        TransformersConfig(packed_prefill="yes")  # type: ignore[arg-type]


def test_packed_attention_outside_a_plan_raises() -> None:
    from spade_rl.policy.packed_prefill import packed_attention

    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(RuntimeError, match="outside"):
        packed_attention(None, q, q, q, None)
