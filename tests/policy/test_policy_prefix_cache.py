"""The prefix cache of TransformersPolicy: multi-turn results equal those without it, entries hold exactly the
keys/values of their tokens, the budget and pins hold, and new weights empty it.

The equality tests play conversations that grow the way rollouts grow them (prompt, then its completion, then
a few more tokens) over the tiny random model, several rows of different lengths per batch, rows that reuse a
prefix next to rows that do not, and compare every turn against the same model without the cache.
"""

from __future__ import annotations

import copy
import logging
import random
from typing import Any

import pytest
import torch

from spade_rl.policy import SamplingSettings, TransformersConfig
from spade_rl.policy.prefix_cache import SHARED_PREFIX_MIN_TOKENS, PrefixCache
from spade_rl.policy.transformers_backend import TransformersPolicy

# Every 5th token id ends a completion: a mix of "stop" and "length" finishes, so that rows which finished
# early (and were fed padding afterwards) are cached next to rows that ran to the end.
STOPS = tuple(range(3, 49152, 5))
# No top-k or top-p here: where two logits nearly tie at the cut (it happens: 5e-7 apart), float rounding
# decides which side of it a token falls, with or without the cache, and the log-probs then differ.
# Sampling at a low temperature, for the same reason: the tiny model's next-token distribution is nearly
# flat (36k tokens above 2e-6), and a draw changes token when it falls within the paths' rounding (about
# 1e-6, how much depends on the CPU's kernels) of a boundary of the cumulative distribution: at
# temperature 1 about one draw in ten does (a machine with AMX failed every time), at 0.25 a few hundred
# tokens carry the mass and it is about one in a thousand.
SETTINGS = {
    "greedy": SamplingSettings(max_new_tokens=7, temperature=0, stop_token_ids=STOPS),
    "sampled": SamplingSettings(max_new_tokens=7, temperature=0.25, stop_token_ids=STOPS),
    "sampled_n2": SamplingSettings(max_new_tokens=6, temperature=0.25, n=2, stop_token_ids=STOPS),
}


def random_tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(1000, 40000) for _ in range(count)]


def policies(tiny: tuple[Any, Any], **cached: Any) -> tuple[TransformersPolicy, TransformersPolicy]:
    model, tokenizer = tiny
    with_cache = TransformersPolicy(
        model, tokenizer, TransformersConfig(prefix_cache_tokens=cached.pop("tokens", 4096), **cached)
    )
    without = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=0))
    assert with_cache.prefix_cache is not None and without.prefix_cache is None
    return with_cache, without


def varied_prompts(rng: random.Random, alone: int, longest: int, sharing: int, rest: int) -> list[list[int]]:
    """``alone`` prompts of 3 to ``longest`` random tokens, then ``sharing`` prompts of one 40-token prefix
    and 1 to ``rest`` tokens of their own (cached, that prefix is laid out with a gap before their rest)."""
    system = random_tokens(rng, 40)
    prompts = [random_tokens(rng, rng.randint(3, longest)) for _ in range(alone)]
    return prompts + [system + random_tokens(rng, rng.randint(1, rest)) for _ in range(sharing)]


def parts_at_a_draw_boundary(model: Any, context: list[int], a: int, b: int, temperature: float) -> bool:
    """Whether two paths that sampled tokens ``a`` and ``b`` after ``context`` with the same uniform draw
    can differ by float rounding alone. The sampler inverts the cumulative distribution in token-id order
    (``sampling.inverse_transform``): a draw that lands within rounding of the boundary between two tokens
    takes one path to one and the other to the other, and then only if no mass lies between them. The
    paths' log-probs agree within 1e-3, which moves the cumulative sum by at most about 1e-3: so the mass
    strictly between ``a`` and ``b`` (the model's, at ``temperature``) must be below that."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context])).logits[0, -1].float()
    probs = torch.softmax(logits / temperature, dim=-1)
    low, high = sorted((a, b))
    return float(probs[low + 1 : high].sum()) < 1e-3


def assert_same(cached: list[Any], plain: list[Any], model: Any = None, temperature: float = 0.0) -> None:
    """The same generations. With ``model`` and a ``temperature`` (sampled generations), a row may part
    from the other path where a draw fell on the boundary between two tokens
    (:func:`parts_at_a_draw_boundary`): the same up to there, different conversations after."""
    assert len(cached) == len(plain)
    for a, b in zip(cached, plain, strict=True):
        assert a.prompt_token_ids == b.prompt_token_ids
        ours, theirs = a.completion_token_ids, b.completion_token_ids
        common = next((i for i, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y), None)
        if model is not None and temperature > 0 and common is not None:
            context = [*a.prompt_token_ids, *ours[:common]]
            assert parts_at_a_draw_boundary(model, context, ours[common], theirs[common], temperature), (
                f"parted at completion token {common}: {ours[common]} against {theirs[common]}"
            )
            before = (torch.tensor(c.completion_logprobs[:common]) for c in (a, b))
            assert torch.allclose(*before, atol=1e-3)
            continue
        assert ours == theirs
        assert a.finish_reason == b.finish_reason
        assert a.text == b.text
        # The same tokens, and log-probs equal to float32 rounding: the two paths batch the rows differently
        # (shared prefixes, reused rows), so the matrix products add in other orders (7e-7 relative for one
        # row alone against the same row in a batch, here), which the tiny model's wide initialisation
        # amplifies up to 3e-4 in a log-prob on a machine with AMX (1e-4 held on the earlier ones).
        assert torch.allclose(
            torch.tensor(a.completion_logprobs), torch.tensor(b.completion_logprobs), atol=1e-3
        )


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("batch_size", [16, 2])
def test_multi_turn_equals_generation_without_the_cache(
    tiny: tuple[Any, Any], name: str, batch_size: int
) -> None:
    settings = SETTINGS[name]
    cached, plain = policies(tiny, batch_size=batch_size)
    rng = random.Random(7)
    prompts = [random_tokens(rng, n) for n in (5, 23, 11, 40)]
    finishes = set()
    for turn in range(4):
        if turn == 2:  # a new conversation joins: it misses the cache next to rows that hit it
            prompts.append(random_tokens(rng, 17))
        step = SamplingSettings(**{**settings.__dict__, "seed": 100 + turn})
        before = dict(cached.prefix_cache.stats)
        together = cached.generate_tokens(prompts, step)
        assert_same(together, plain.generate_tokens(prompts, step))
        hits = cached.prefix_cache.stats["hits"] - before["hits"]
        rows = cached.prefix_cache.stats["rows"] - before["rows"]
        if turn == 0:
            # Nothing cached yet; only the n samples of a prompt share it (all but its last token), encoded
            # once in the call when long enough to be worth it.
            shared = sum(len(p) - 1 >= SHARED_PREFIX_MIN_TOKENS for p in prompts) if settings.n > 1 else 0
            assert hits == shared * settings.n
        elif turn == 2:
            assert 0 < hits < rows  # hits and a miss in the same call
        else:
            assert hits == rows
        finishes.update(g.finish_reason for g in together)
        # The next turn: each conversation (sample 0 of it) + its completion + a few template-like tokens.
        samples = together[:: settings.n]
        prompts = [
            list(g.prompt_token_ids) + list(g.completion_token_ids) + random_tokens(rng, rng.randint(1, 6))
            for g in samples
        ]
    assert finishes == {"stop", "length"}
    assert cached.prefix_cache.stats["reused_tokens"] > 0


def test_a_prompt_seen_before_reuses_all_but_its_last_token(tiny: tuple[Any, Any]) -> None:
    cached, plain = policies(tiny)
    rng = random.Random(3)
    prompts = [random_tokens(rng, 30), random_tokens(rng, 9)]
    settings = SamplingSettings(max_new_tokens=5, temperature=0.7, seed=5)
    first = cached.generate_tokens(prompts, settings)
    # The same prompts again, and prompts that share only their first tokens with a cached sequence.
    again = [*prompts, prompts[0][:12] + random_tokens(rng, 8), prompts[1][:4]]
    before = cached.prefix_cache.stats["reused_tokens"]
    second = cached.generate_tokens(again, settings)
    assert_same(second, plain.generate_tokens(again, settings))
    assert [g.completion_token_ids for g in second[:2]] == [g.completion_token_ids for g in first]
    assert cached.prefix_cache.stats["reused_tokens"] - before == 29 + 8 + 12 + 3


def test_entries_hold_exactly_the_keys_and_values_of_their_tokens(tiny: tuple[Any, Any]) -> None:
    model, _ = tiny
    cached, _ = policies(tiny)
    rng = random.Random(11)
    prompts = [random_tokens(rng, 6), random_tokens(rng, 25)]
    settings = SamplingSettings(max_new_tokens=6, temperature=0, stop_token_ids=STOPS)
    generations = cached.generate_tokens(prompts, settings)
    grown = [list(g.prompt_token_ids) + list(g.completion_token_ids) + [7000, 7001] for g in generations]
    generations += cached.generate_tokens(grown, settings)  # entries built from a batch with a past
    entries = {e.tokens: e for e in cached.prefix_cache._entries.values()}
    assert len(entries) == 2  # each second-turn entry replaced the first-turn entry it extends
    for g in generations[2:]:
        tokens = tuple(g.prompt_token_ids) + tuple(g.completion_token_ids[:-1])
        kv = entries[tokens].kv
        assert kv.shape[3] == len(tokens)  # no padding stored
        with torch.no_grad():
            reference = model(input_ids=torch.tensor([tokens]), use_cache=True).past_key_values
        for i, layer in enumerate(reference.layers):
            assert torch.allclose(kv[i, 0], layer.keys[0], atol=1e-5)
            assert torch.allclose(kv[i, 1], layer.values[0], atol=1e-5)


def test_a_weight_update_empties_the_cache(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    cached, plain = policies((model, tokenizer))
    rng = random.Random(5)
    prompts = [random_tokens(rng, 12), random_tokens(rng, 20)]
    settings = SamplingSettings(max_new_tokens=6, temperature=0)
    first = cached.generate_tokens(prompts, settings)
    grown = [list(g.prompt_token_ids) + list(g.completion_token_ids) + [9000] for g in first]
    # A fused optimiser changes the parameters in place without bumping their version counters.
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model.train()
    out = model(input_ids=torch.tensor([grown[0]]), labels=torch.tensor([grown[0]]))
    out.loss.backward()
    optimizer.step()
    hits = cached.prefix_cache.stats["hits"]
    assert_same(cached.generate_tokens(grown, settings), plain.generate_tokens(grown, settings))
    assert cached.prefix_cache.stats["hits"] == hits  # nothing stale was reused
    assert len(cached.prefix_cache) == 2
    cached.clear_prefix_cache()
    assert len(cached.prefix_cache) == 0 and cached.prefix_cache.tokens == 0


def test_budget_evicts_least_recently_used_unpinned_entries() -> None:
    cache = PrefixCache(max_tokens=10)

    def kv(n: int) -> torch.Tensor:
        return torch.zeros(1, 2, 1, n, 1)

    assert cache.add((1, 2, 3), kv(3)) and cache.add((4, 5, 6), kv(3)) and cache.add((7, 8), kv(2))
    assert cache.tokens == 8
    assert not cache.add(tuple(range(11)), kv(11))  # longer than the whole budget: not stored
    used = cache.lookup((1, 2, 3, 9))  # (1, 2, 3) is now the most recently used, and pinned
    assert used.entry is not None and used.length == 3
    assert cache.add((20, 21, 22), kv(3))  # evicts (4, 5, 6), the least recently used
    assert set(cache._entries) == {(1, 2, 3), (7, 8), (20, 21, 22)}
    assert cache.add((30, 31, 32, 33, 34, 35, 36), kv(7))  # evicts the unpinned, keeps (1, 2, 3)
    assert set(cache._entries) == {(1, 2, 3), (30, 31, 32, 33, 34, 35, 36)}
    assert not cache.add(tuple(range(40, 48)), kv(8))  # it fits only if the pinned entry goes: not stored
    assert set(cache._entries) == {(1, 2, 3), (30, 31, 32, 33, 34, 35, 36)}  # and nothing was dropped
    cache.release(used.entry)
    assert cache.add((1, 2, 3, 9, 10), kv(5), replaces=used.entry)  # the extended entry goes
    assert set(cache._entries) == {(1, 2, 3, 9, 10)} and cache.tokens == 5


def test_reserve_drops_what_add_would_and_dropped_entries_free_their_tensors() -> None:
    cache = PrefixCache(max_tokens=10)
    entries = {}
    for tokens in ((1, 2, 3), (4, 5, 6), (7, 8)):
        cache.add(tokens, torch.zeros(1, 2, 1, len(tokens), 1))
        entries[tokens] = cache._entries[tokens]
    used = cache.lookup((1, 2, 3, 9))  # pinned: never dropped to make room
    cache.reserve(4)  # 8 + 4 > 10: the least recently used unpinned one goes, (4, 5, 6)
    assert set(cache._entries) == {(1, 2, 3), (7, 8)} and entries[(4, 5, 6)].kv is None
    cache.reserve(2)  # fits already
    assert set(cache._entries) == {(1, 2, 3), (7, 8)}
    cache.reserve(9)  # cannot fit without the pinned entry: drops what it can, keeps that one
    assert set(cache._entries) == {(1, 2, 3)} and entries[(7, 8)].kv is None
    assert used.entry is not None and used.entry.kv is not None


def test_lookup_finds_the_longest_common_prefix_below_the_whole_prompt() -> None:
    cache = PrefixCache(max_tokens=100)
    for tokens in [(1, 2, 3, 4, 5, 6), (1, 2, 3, 7), (1, 2, 9, 9, 9, 9, 9, 9)]:
        cache.add(tokens, torch.zeros(1, 2, 1, len(tokens), 1))
    assert cache.lookup((1, 2, 3, 4, 5, 6, 8)).length == 6
    assert cache.lookup((1, 2, 3, 4, 5, 6)).length == 5  # the last token must still be fed
    assert cache.lookup((1, 2, 3, 7, 7)).length == 4
    assert cache.lookup((1, 2, 9, 9, 1)).length == 4
    assert cache.lookup((1,)).entry is None
    assert cache.lookup((5, 1, 2)).entry is None
    cache.unpin_all()
    assert all(e.pins == 0 for e in cache._entries.values())


def test_prefix_cache_tokens_is_validated() -> None:
    for bad in (-1, 1.5, True, "64"):
        with pytest.raises(ValueError, match="prefix_cache_tokens must be an integer >= 0"):
            TransformersConfig(prefix_cache_tokens=bad)  # type: ignore[arg-type]
    assert TransformersConfig().prefix_cache_tokens > 0


def test_models_with_other_cache_layers_run_without_a_prefix_cache(
    tiny: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    _, tokenizer = tiny
    config = MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    with caplog.at_level(logging.INFO, logger="spade_rl.policy.transformers_backend"):
        policy = TransformersPolicy(model, tokenizer)
    assert policy.prefix_cache is None
    assert "DynamicSlidingWindowLayer" in caplog.text
    settings = SamplingSettings(max_new_tokens=4, temperature=0)
    [g] = policy.generate_tokens([[5, 6, 7]], settings)
    [again] = policy.generate_tokens([[5, 6, 7, *g.completion_token_ids, 8]], settings)
    assert len(again.completion_token_ids) == 4


def test_an_entry_its_one_row_extends_is_freed_once_in_the_batch(tiny: tuple[Any, Any]) -> None:
    """A conversation's entry, read by its one row of the next turn, leaves the cache with its keys/values as
    soon as they are in the batch's cache: the call holds no second copy of them."""
    policy, _ = policies(tiny)
    rng = random.Random(9)
    prompts = [random_tokens(rng, 20 + 5 * i) for i in range(4)]
    first = policy.generate_tokens(prompts, SETTINGS["greedy"])
    assert policy.prefix_cache is not None
    old = list(policy.prefix_cache._entries.values())
    assert old and all(e.kv is not None for e in old)
    grown = [list(g.prompt_token_ids) + list(g.completion_token_ids) + [7000, 7001] for g in first]
    policy.generate_tokens(grown, SETTINGS["greedy"])
    assert all(e.kv is None for e in old)  # freed, not merely forgotten
    assert all(e.kv is not None for e in policy.prefix_cache._entries.values())
