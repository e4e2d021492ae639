"""The fast paths of TransformersPolicy give the results of the plain ones.

- Preallocated cache layers (``GrowingLayer``) against transformers' own concatenating ``DynamicLayer``.
- Finished rows leaving the batch (compaction) against generating each row alone.
- Prefixes shared inside one call, encoded once, against no prefix cache at all.
- Inverse-transform sampling: the frequencies of the distribution it samples from, never a filtered token,
  one seed one token whatever else is in the batch.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest
import torch
from test_policy_prefix_cache import (  # this folder's shared helpers
    assert_same,
    random_tokens,
    varied_prompts,
)

from spade_rl.policy import SamplingSettings, TransformersConfig, transformers_backend
from spade_rl.policy.kv_cache import new_cache
from spade_rl.policy.prefix_cache import SHARED_PREFIX_MIN_TOKENS, shared_prefixes
from spade_rl.policy.sampling import choose_tokens
from spade_rl.policy.transformers_backend import TransformersPolicy

STOPS = tuple(range(3, 49152, 5))  # every 5th id ends a completion: rows finish at different steps


def plain_policy(tiny: tuple[Any, Any], **config: Any) -> TransformersPolicy:
    """No prefix cache, no preallocation, no compaction: transformers' DynamicCache step by step."""
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=0, **config))
    policy._preallocate = False
    return policy


def test_growing_layers_hold_what_dynamic_layers_hold(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    # The cache goes in under the name the policy passes it by: the forward of transformers' lower bound
    # (5.10.4) takes past_key_values and no cache, newer releases take cache.
    keyword = TransformersPolicy(model, tokenizer)._cache_keyword
    ids = torch.tensor([random_tokens(random.Random(1), 9), random_tokens(random.Random(2), 9)])
    grown, plain = new_cache(model, capacity=4), new_cache(model)  # capacity 4: it must grow twice
    with torch.no_grad():
        for cache in (grown, plain):
            model(input_ids=ids[:, :5], use_cache=True, **{keyword: cache})
            for t in range(5, 9):
                model(input_ids=ids[:, t : t + 1], use_cache=True, **{keyword: cache})
    assert type(grown.layers[0]).__name__ == "GrowingLayer"
    assert grown.get_seq_length() == plain.get_seq_length() == 9
    for a, b in zip(grown.layers, plain.layers, strict=True):
        assert a.keys.shape == b.keys.shape == (2, a.keys.shape[1], 9, a.keys.shape[3])
        assert torch.allclose(a.keys, b.keys, atol=1e-6) and torch.allclose(a.values, b.values, atol=1e-6)
    grown.layers[0].batch_select_indices(torch.tensor([1]))
    assert torch.allclose(grown.layers[0].keys[0], plain.layers[0].keys[1], atol=1e-6)
    grown.layers[1].crop(-3)
    assert grown.layers[1].get_seq_length() == 6 and grown.layers[1].keys.shape[2] == 6


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_compacted_batches_equal_rows_generated_alone(tiny: tuple[Any, Any], temperature: float) -> None:
    model, tokenizer = tiny
    fast = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=0))
    assert fast._preallocate
    plain = plain_policy(tiny)
    rng = random.Random(4)
    prompts = [random_tokens(rng, n) for n in (3, 17, 8, 30, 5, 12, 21, 9)]
    settings = SamplingSettings(max_new_tokens=9, temperature=temperature, seed=3, stop_token_ids=STOPS)
    together = fast.generate_tokens(prompts, settings)
    # Rows finished at different steps, so the batch was compacted while others still generated.
    lengths = {len(g.completion_token_ids) for g in together}
    assert len(lengths) > 2 and {g.finish_reason for g in together} == {"stop", "length"}
    alone = [plain.generate_tokens([p], settings)[0] for p in prompts]
    # Sample i of a call has seed derive_seed(seed, i): alone, each row is sample 0, so compare seeds alike.
    if temperature == 0:
        assert_same(together, alone)
    assert_same(together, plain.generate_tokens(prompts, settings))


def test_shared_prefixes_are_the_common_starts_of_neighbours() -> None:
    m = 4
    system = tuple(range(100, 110))
    a, b, c = (*system, 1, 2, 3), (*system, 1, 2, 9), (*system, 7)
    other = (50, 51, 52, 53, 54, 55)
    found = shared_prefixes([a, b, c, other, other], m)
    assert found == [other[:-1], system, (*system, 1, 2)]
    assert shared_prefixes([a, other], m) == []
    assert shared_prefixes([(1, 2, 3), (1, 2, 3)], m) == []  # shorter than min_tokens
    # A prompt that is a prefix of another: all but its last token (its logits must still come).
    assert shared_prefixes([system, (*system, 5, 6)], m) == [system[:-1]]


def test_prefixes_shared_in_one_call_are_encoded_once_with_the_same_results(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    cached = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=4096, batch_size=3))
    plain = plain_policy(tiny, batch_size=3)
    rng = random.Random(9)
    system = random_tokens(rng, SHARED_PREFIX_MIN_TOKENS + 8)
    group = system + random_tokens(rng, SHARED_PREFIX_MIN_TOKENS)
    prompts = [
        system + random_tokens(rng, 5),
        group + random_tokens(rng, 3),
        group + random_tokens(rng, 7),
        system + random_tokens(rng, 11),
        random_tokens(rng, 40),  # shares nothing
        group + random_tokens(rng, 2),
    ]
    settings = SamplingSettings(max_new_tokens=6, temperature=0.7, seed=11, n=2, stop_token_ids=STOPS)
    before = dict(cached.prefix_cache.stats)
    assert_same(cached.generate_tokens(prompts, settings), plain.generate_tokens(prompts, settings))
    rows = len(prompts) * settings.n
    assert cached.prefix_cache.stats["rows"] - before["rows"] >= rows
    reused = cached.prefix_cache.stats["reused_tokens"] - before["reused_tokens"]
    # Every row but the unrelated one's two samples reused at least the system prompt; the n = 2 samples of
    # each prompt share all of it but its last token.
    assert reused >= sum(len(p) - 1 for p in prompts[:4] + prompts[5:]) * 2
    # The shared prefixes stay cached for the next call (the system prompt, the group's prompt).
    assert cached.prefix_cache.covered(group) == len(group)


def test_inverse_transform_sampling_draws_from_the_filtered_distribution() -> None:
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0, 0.5]]).repeat(4000, 1)
    settings = SamplingSettings(max_new_tokens=1, temperature=1.0, top_k=4)
    generators = [torch.Generator().manual_seed(i) for i in range(len(logits))]
    chosen, logp = choose_tokens(logits, settings, generators)
    assert 3 not in chosen.tolist()  # filtered out by top-k: never drawn
    expected = torch.softmax(torch.tensor([2.0, 0.0, 1.0, float("-inf"), 0.5]), dim=-1)
    counts = torch.bincount(chosen, minlength=5).double() / len(chosen)
    assert torch.allclose(counts, expected.double(), atol=0.03)
    assert torch.allclose(logp, expected.log()[chosen].float(), atol=1e-5)
    # The token of a row depends on its own generator only.
    again, _ = choose_tokens(
        logits[:7].flip(0), settings, [torch.Generator().manual_seed(i) for i in range(7)][::-1]
    )
    assert again.flip(0).tolist() == chosen[:7].tolist()


def test_bfloat16_autocast_reports_the_logprobs_of_what_it_sampled(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    fast = TransformersPolicy(
        model, tokenizer, TransformersConfig(autocast="bfloat16", prefix_cache_tokens=4096)
    )
    assert fast.autocast_dtype is torch.bfloat16
    rng = random.Random(2)
    prompts = [random_tokens(rng, n) for n in (6, 14, 9)]
    settings = SamplingSettings(max_new_tokens=8, temperature=0.8, seed=1)
    generations = fast.generate_tokens(prompts, settings)
    head = model.get_output_embeddings()
    assert "forward" not in head.__dict__  # the float32 head was put back
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay float32
    # The cache holds bfloat16 keys and values: half the memory of float32.
    assert {e.kv.dtype for e in fast.prefix_cache._entries.values()} == {torch.bfloat16}
    for g in generations:
        ids = torch.tensor([list(g.prompt_token_ids) + list(g.completion_token_ids)])
        n = len(g.completion_token_ids)
        with torch.no_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                hidden = model.model(input_ids=ids).last_hidden_state
            logits = head(hidden.float())[0, -n - 1 : -1] / settings.temperature
            float32 = model(input_ids=ids).logits[0, -n - 1 : -1] / settings.temperature
        chosen = torch.tensor(g.completion_token_ids)[:, None]
        reported = torch.tensor(g.completion_logprobs)
        bf16 = torch.log_softmax(logits, -1).gather(-1, chosen).squeeze(-1)
        # The same precision, another layout (batched, keys/values cached in bfloat16): rounding apart.
        assert torch.allclose(reported, bf16, atol=0.1) and (reported - bf16).abs().mean() < 3e-2
        fp32 = torch.log_softmax(float32, -1).gather(-1, chosen).squeeze(-1)
        assert (reported - fp32).abs().mean() < 5e-2


def test_autocast_settings(tiny: tuple[Any, Any]) -> None:
    from spade_rl.policy.models import cpu_has_fast_bf16

    model, tokenizer = tiny
    assert TransformersPolicy(model, tokenizer).autocast_dtype is None  # the library default: float32
    auto = TransformersPolicy(model, tokenizer, TransformersConfig(autocast="auto"))
    assert auto.autocast_dtype is (torch.bfloat16 if cpu_has_fast_bf16() else None)
    with pytest.raises(ValueError, match="transformers autocast 'fp8' is not allowed"):
        TransformersConfig(autocast="fp8")
    # "auto" with frozen weights (LoRA's base model) computes in float32: autocast would cast them per pass.
    auto.autocast_dtype = torch.bfloat16
    model.lm_head.weight.requires_grad_(False)
    try:
        with auto._computing() as dtype:
            assert dtype is None and not torch.is_autocast_enabled("cpu")
    finally:
        model.lm_head.weight.requires_grad_(True)
    with auto._computing() as dtype:
        assert dtype is torch.bfloat16 and torch.is_autocast_enabled("cpu")


def test_train_bf16_auto_follows_the_cpu() -> None:
    from spade_rl.policy.models import cpu_has_fast_bf16
    from spade_rl.train import TrainConfig
    from spade_rl.train.learner import resolve_bf16

    assert resolve_bf16("auto", on_gpu=False) is cpu_has_fast_bf16()
    assert resolve_bf16(None, on_gpu=False) is False and resolve_bf16(True, on_gpu=False) is True
    with pytest.raises(ValueError, match="train bf16 must be None"):
        TrainConfig(bf16="yes")  # type: ignore[arg-type]


def test_a_forward_wrapped_in_autocast_keeps_the_prefix_cache(tiny: tuple[Any, Any]) -> None:
    """accelerate wraps the forward of a model trained with bf16 in autocast: keys come out in float32 and
    values in bfloat16. The cache keeps both in bfloat16 and stays on."""
    import copy

    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    forward = model.forward

    def autocast_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    model.forward = autocast_forward
    policy = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=4096))
    rng = random.Random(6)
    prompts = [random_tokens(rng, 40), random_tokens(rng, 12)]
    settings = SamplingSettings(max_new_tokens=5, temperature=0.7, seed=2, n=2)
    first = policy.generate_tokens(prompts, settings)
    grown = [list(g.prompt_token_ids) + list(g.completion_token_ids) + [7000] for g in first[::2]]
    policy.generate_tokens(grown, settings)
    assert policy.prefix_cache is not None and policy.prefix_cache.stats["hits"] > 0
    assert {e.kv.dtype for e in policy.prefix_cache._entries.values()} == {torch.bfloat16}


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_prompts_fed_in_column_chunks_equal_one_pass(
    tiny: tuple[Any, Any], temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = tiny
    prompts = varied_prompts(random.Random(8), alone=6, longest=70, sharing=4, rest=20)
    settings = SamplingSettings(max_new_tokens=8, temperature=temperature, seed=2, stop_token_ids=STOPS)
    config = TransformersConfig(prefix_cache_tokens=8192)
    one_pass = TransformersPolicy(model, tokenizer, config).generate_tokens(prompts, settings)
    shapes: list[tuple[int, int]] = []
    forward = model.forward

    @functools.wraps(forward)  # the same signature: the policy passes the cache under the same keyword
    def recorded(*args: Any, **kwargs: Any) -> Any:
        shapes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(transformers_backend, "PREFILL_TOKENS", 50)  # 10 rows: 5 columns a pass
    monkeypatch.setattr(model, "forward", recorded)
    chunked = TransformersPolicy(model, tokenizer, config).generate_tokens(prompts, settings)
    assert all(rows * width <= 50 for rows, width in shapes)
    assert sum(width > 1 for _, width in shapes) >= 4  # the prompts went in several chunks
    assert_same(chunked, one_pass)
