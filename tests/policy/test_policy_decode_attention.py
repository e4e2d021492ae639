"""Decoding attention over each row's own span (spade_rl.policy.decode_attention) and the two-level
inverse-transform sampler give what the plain paths give.

- ``chunks``: consecutive, covering every row once, at least MIN_CHUNK_ROWS rows, the widest span of each.
- ``decode_attention`` equals transformers' SDPA attention over the whole width (one query per row, padding
  at both ends and in the middle of rows), and is SDPA itself for anything else.
- Generation with it equals generation without it (tokens, log-probs), and the model's attention setting is
  put back after each call.
- ``inverse_transform`` picks the token a float64 running sum over the whole vocabulary picks, and never a
  token of probability 0.
"""

from __future__ import annotations

import contextlib
import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from test_policy_prefix_cache import parts_at_a_draw_boundary, varied_prompts  # this folder's shared helpers

from spade_rl.policy import SamplingSettings, TransformersConfig, transformers_backend
from spade_rl.policy import decode_attention as decode
from spade_rl.policy.sampling import filter_top_k, inverse_transform
from spade_rl.policy.transformers_backend import TransformersPolicy


def test_chunks_cover_every_row_once_in_order() -> None:
    rng = random.Random(0)
    for rows in (1, 7, 8, 16, 17, 40, 64):
        spans = sorted((rng.randint(1, 500) for _ in range(rows)), reverse=rng.random() < 0.5)
        plan = decode.chunks(spans)
        assert plan[0][0] == 0 and plan[-1][1] == rows
        for (start, stop, widest), following in zip(plan, [*plan[1:], None], strict=True):
            assert widest == max(spans[start:stop])
            assert stop - start >= min(rows, decode.MIN_CHUNK_ROWS)
            if following is not None:
                assert following[0] == stop
    # Descending spans with a wide gap split where the gap is; equal spans never do.
    assert decode.chunks([500] * 10 + [100] * 10) == [(0, 10, 500), (10, 20, 100)]
    assert decode.chunks([300] * 30) == [(0, 30, 300)]


def attention_inputs(rows: int, width: int, seed: int) -> tuple[Any, ...]:
    """A GQA module stand-in (9 query heads, 3 key/value heads), one query per row, and a boolean mask with
    each row's own span: padding before it and, for some rows, a masked gap inside it (as a cached prefix
    followed by the rest of a prompt lays it out)."""
    gen = torch.Generator().manual_seed(seed)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    query = torch.randn(rows, 9, 1, 16, generator=gen)
    key = torch.randn(rows, 3, width, 16, generator=gen)
    value = torch.randn(rows, 3, width, 16, generator=gen)
    mask = torch.zeros(rows, 1, 1, width, dtype=torch.bool)
    for b in range(rows):
        span = int(torch.randint(1, width + 1, (1,), generator=gen))
        mask[b, :, :, width - span :] = True
        if span > 6 and b % 3 == 0:
            mask[b, :, :, width - span + 2 : width - span + 5] = False  # a gap: padding between past and rest
    order = mask[:, 0, 0].sum(-1).argsort(descending=True)  # rows by span, as a batch orders them
    return module, query[order], key[order], value[order], mask[order]


@pytest.mark.parametrize("rows,width", [(16, 40), (48, 130), (64, 7)])
def test_decode_attention_equals_sdpa_over_the_whole_width(rows: int, width: int) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module, query, key, value, mask = attention_inputs(rows, width, seed=rows)
    with torch.no_grad():
        ours, _ = decode.decode_attention(module, query, key, value, mask, scaling=0.25)
        plain, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert ours.shape == plain.shape == (rows, 1, 9, 16)
    assert torch.allclose(ours, plain, atol=1e-5)
    if width > 7:
        assert len(decode._chunks_of(mask)) > 1  # it did split the batch


def test_decode_attention_is_sdpa_for_anything_but_decoding() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module, query, key, value, mask = attention_inputs(32, 50, seed=3)
    cases = [
        (query.expand(-1, -1, 4, -1).contiguous(), mask.expand(-1, -1, 4, -1)),  # several queries: prefill
        (query, None),  # no mask
        (query, torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))),  # an additive float mask
    ]
    with torch.no_grad():
        for q, m in cases:
            ours, _ = decode.decode_attention(module, q, key, value, m, scaling=0.25)
            assert torch.equal(ours, sdpa_attention_forward(module, q, key, value, m, scaling=0.25)[0])
    ours, _ = decode.decode_attention(module, query, key, value, mask, scaling=0.25)  # gradients on
    assert torch.equal(ours, sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)[0])


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_generation_with_span_attention_equals_generation_without(
    tiny: tuple[Any, Any], temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = tiny
    prompts = varied_prompts(random.Random(5), alone=30, longest=120, sharing=10, rest=30)  # 40 rows
    settings = SamplingSettings(max_new_tokens=10, temperature=temperature, seed=4)
    calls = {"chunked": 0}
    inner = decode._chunks_of

    def counted(mask: torch.Tensor) -> Any:
        plan = inner(mask)
        calls["chunked"] += len(plan) > 1
        return plan

    monkeypatch.setattr(decode, "_chunks_of", counted)
    fast = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=8192))
    with_spans = fast.generate_tokens(prompts, settings)
    assert calls["chunked"] > 0
    assert model.config._attn_implementation == "sdpa"  # put back after the call
    monkeypatch.setattr(transformers_backend, "decoding_attention", lambda model: contextlib.nullcontext())
    plain = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=8192))
    without = plain.generate_tokens(prompts, settings)
    for a, b in zip(with_spans, without, strict=True):
        ours, theirs = a.completion_token_ids, b.completion_token_ids
        common = next((i for i, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y), None)
        if common is not None and temperature > 0:  # a draw on the boundary between two tokens
            context = [*a.prompt_token_ids, *ours[:common]]
            assert parts_at_a_draw_boundary(model, context, ours[common], theirs[common], temperature)
        else:
            assert ours == theirs and a.finish_reason == b.finish_reason
        pairs = zip(a.completion_logprobs[:common], b.completion_logprobs[:common], strict=True)
        assert max(abs(x - y) for x, y in pairs) < 1e-4


def test_inverse_transform_picks_the_token_of_the_whole_running_sum() -> None:
    gen = torch.Generator().manual_seed(0)
    for vocab, block in ((49152, 256), (1000, 256), (257, 16), (5, 256)):
        logits = torch.randn(64, vocab, generator=gen) * 4
        probs = torch.softmax(logits, dim=-1)
        uniform = torch.rand(64, generator=gen, dtype=torch.float64)
        cdf = probs.double().cumsum(dim=-1)
        whole = torch.searchsorted(cdf, (uniform * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
        ours = inverse_transform(probs, uniform, block=block)
        assert (ours == whole).float().mean() >= 0.98  # a draw within float rounding of a step may differ
        assert ((ours - whole).abs() <= 1).all()


def test_inverse_transform_never_picks_a_token_of_probability_zero() -> None:
    gen = torch.Generator().manual_seed(1)
    probs = torch.softmax(filter_top_k(torch.randn(16, 700, generator=gen), 3), dim=-1)
    probs[:, -1] = 0.0  # the vocabulary's last token and the padding after it: never
    for u in (0.0, 0.5, 1.0 - 2.0**-53):
        chosen = inverse_transform(probs, torch.full((16,), u, dtype=torch.float64), block=64)
        assert (probs.gather(1, chosen[:, None]) > 0).all()
    # All the mass on the vocabulary's last token: it is the only draw.
    last = torch.zeros(4, 300)
    last[:, -1] = 1.0
    draws = inverse_transform(last, torch.tensor([0.0, 0.3, 0.9, 1.0 - 2.0**-53], dtype=torch.float64), 64)
    assert draws.tolist() == [299] * 4
