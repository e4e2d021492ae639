"""Linear layers on packed bfloat16 weights during generation (spade_rl.policy.packed_weights): the same
values as autocast's products, packed again when the weights change, dropped with the prefix cache, and the
modules left as they were."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from test_policy_prefix_cache import varied_prompts

from spade_rl.policy import SamplingSettings, TransformersConfig, precision, tiny_random_model
from spade_rl.policy.packed_weights import PackedLinears, why_not_packed_weights
from spade_rl.policy.prefix_cache import NO_REUSE
from spade_rl.policy.transformers_backend import TransformersPolicy

# bfloat16 packing needs oneDNN's bfloat16 products on this CPU; float32 packing only oneDNN
needs_bf16_packing = pytest.mark.skipif(
    bool(why_not_packed_weights(torch.nn.Linear(2, 2), torch.bfloat16)),
    reason=why_not_packed_weights(torch.nn.Linear(2, 2), torch.bfloat16) or "packed bfloat16 products",
)
pytestmark = pytest.mark.skipif(
    bool(why_not_packed_weights(torch.nn.Linear(2, 2), None)),
    reason="no packed oneDNN products here",
)


def next_token_logprobs(policy: TransformersPolicy, prompts: list[list[int]]) -> torch.Tensor:
    with policy._computing() as dtype:
        _, logits, *_ = policy._prefill(prompts, [NO_REUSE] * len(prompts), 0, dtype, policy._packs())
    return torch.log_softmax(logits, -1)


def bf16_policy(seed: int = 0) -> TransformersPolicy:
    model, tokenizer = tiny_random_model(seed=seed)
    return TransformersPolicy(
        model, tokenizer, TransformersConfig(autocast="bfloat16", prefix_cache_tokens=0)
    )


@needs_bf16_packing
def test_packed_products_equal_autocast_products(monkeypatch) -> None:
    prompts = varied_prompts(random.Random(0), alone=3, longest=20, sharing=3, rest=8)
    policy = bf16_policy()
    used = []
    installed = PackedLinears.installed

    def counted(self: Any, model: Any, dtype: Any, head: Any = None) -> Any:
        used.append(dtype)
        return installed(self, model, dtype, head)

    monkeypatch.setattr(PackedLinears, "installed", counted)
    packed = next_token_logprobs(policy, prompts)
    assert used
    monkeypatch.setattr(precision, "why_not_packed_weights", lambda model, dtype: "off in this test")
    used.clear()
    plain = next_token_logprobs(policy, prompts)
    assert not used
    # oneDNN's products of the same bfloat16 operands: equal up to the order of float32 accumulation
    assert torch.allclose(packed, plain, atol=2e-3)
    settings = SamplingSettings(max_new_tokens=6, temperature=0)
    monkeypatch.undo()
    a = policy.generate_tokens(prompts, settings)
    monkeypatch.setattr(precision, "why_not_packed_weights", lambda model, dtype: "off in this test")
    b = policy.generate_tokens(prompts, settings)
    assert [g.completion_token_ids for g in a] == [g.completion_token_ids for g in b]


@needs_bf16_packing
def test_new_weights_are_packed_again_and_modules_restored() -> None:
    prompts = varied_prompts(random.Random(1), alone=2, longest=12, sharing=2, rest=5)
    policy, fresh = bf16_policy(), bf16_policy()
    before = next_token_logprobs(policy, prompts)
    packed = policy._packed_linears
    count = len(packed._packed)
    assert count == sum(type(m) is torch.nn.Linear for m in policy.model.modules())  # the head too
    assert not any("forward" in m.__dict__ for m in policy.model.modules() if type(m) is torch.nn.Linear)
    with torch.no_grad():  # an optimiser step, in place
        for model in (policy.model, fresh.model):
            for p in model.parameters():
                p.mul_(1.5)
    after = next_token_logprobs(policy, prompts)
    assert not torch.allclose(before, after, atol=1e-2)
    assert torch.allclose(after, next_token_logprobs(fresh, prompts), atol=1e-6)
    policy.clear_prefix_cache()
    assert packed._packed == [] and packed._key is None


def test_float32_generation_packs_in_float32(monkeypatch) -> None:
    """Without autocast every linear layer, the head too, runs on float32 packed weights: the same tokens and
    log-probs as MKL's products, to float32 rounding."""
    model, tokenizer = tiny_random_model(seed=0)
    policy = TransformersPolicy(model, tokenizer, TransformersConfig(autocast="off", prefix_cache_tokens=0))
    prompts = varied_prompts(random.Random(3), alone=3, longest=20, sharing=3, rest=8)
    settings = SamplingSettings(max_new_tokens=6, temperature=0.25, seed=4)
    packed = policy.generate_tokens(prompts, settings)
    assert len(policy._packed_linears._packed) == sum(type(m) is torch.nn.Linear for m in model.modules())
    monkeypatch.setattr(precision, "why_not_packed_weights", lambda model, dtype: "off in this test")
    plain = policy.generate_tokens(prompts, settings)
    assert [g.completion_token_ids for g in packed] == [g.completion_token_ids for g in plain]
    for a, b in zip(packed, plain, strict=True):
        assert torch.allclose(
            torch.tensor(a.completion_logprobs), torch.tensor(b.completion_logprobs), atol=1e-4
        )
    assert "not bfloat16 or float32" in why_not_packed_weights(model, torch.float16)
