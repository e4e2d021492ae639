"""``TransformersConfig.batch_tokens``: a cap on what one batch's key/value cache holds.

The split itself (``kv_cache.batch_chunks``), and generation under a cap that splits a call into several
batches giving what one batch gives, with the cap observed by every batch the policy builds.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_policy_prefix_cache import assert_same, random_tokens  # this folder's shared helpers

from spade_rl.policy import SamplingSettings, TransformersConfig, transformers_backend
from spade_rl.policy.kv_cache import batch_chunks
from spade_rl.policy.transformers_backend import TransformersPolicy

STOPS = tuple(range(3, 49152, 7))


def test_batch_chunks_keep_order_rows_and_tokens() -> None:
    lengths = [100, 90, 90, 40, 30, 30, 30, 10]
    order = list(range(len(lengths)))
    assert batch_chunks(order, lengths, 10, max_rows=64) == [order]  # no cap: one batch
    assert batch_chunks(order, lengths, 10, max_rows=3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    chunks = batch_chunks(order, lengths, 10, max_rows=64, max_tokens=250)
    assert [r for chunk in chunks for r in chunk] == order  # every row once, in order
    for chunk in chunks:
        assert len(chunk) * (max(lengths[r] for r in chunk) + 10) <= 250
    assert chunks == [[0, 1], [2, 3], [4, 5, 6, 7]]  # 2 x 110; 2 x 100; 4 x 40
    # A row that alone needs more than the cap goes alone; the order given is kept, not re-sorted.
    assert batch_chunks([7, 0, 3], lengths, 10, max_rows=64, max_tokens=50) == [[7], [0], [3]]
    assert batch_chunks([0, 7], lengths, 10, max_rows=64, max_tokens=50) == [[0], [7]]
    assert batch_chunks([7, 6, 0], lengths, 0, max_rows=64, max_tokens=60) == [[7, 6], [0]]
    assert batch_chunks([], lengths, 10, max_rows=4, max_tokens=50) == []


def test_batch_tokens_is_validated() -> None:
    for bad in (-1, 1.5, True, "4096"):
        with pytest.raises(ValueError, match="batch_tokens must be an integer >= 0"):
            TransformersConfig(batch_tokens=bad)  # type: ignore[arg-type]
    assert TransformersConfig().batch_tokens == 0  # the library default: no cap


@pytest.mark.parametrize("prefix_cache_tokens", [0, 4096])
def test_a_capped_call_generates_what_one_batch_does(
    tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, prefix_cache_tokens: int
) -> None:
    model, tokenizer = tiny
    rng = random.Random(5)
    system = random_tokens(rng, 24)
    prompts = [system + random_tokens(rng, n) for n in (3, 40, 9, 17, 60, 5, 28)]
    settings = SamplingSettings(max_new_tokens=6, temperature=0.8, seed=3, n=2, stop_token_ids=STOPS)
    whole = TransformersPolicy(model, tokenizer, TransformersConfig(prefix_cache_tokens=prefix_cache_tokens))
    cap = 2 * (max(len(p) for p in prompts) + settings.max_new_tokens)  # the longest two rows at most
    capped = TransformersPolicy(
        model, tokenizer, TransformersConfig(prefix_cache_tokens=prefix_cache_tokens, batch_tokens=cap)
    )
    sizes: list[tuple[int, int]] = []
    batch_cache = TransformersPolicy._batch_cache

    def counted(self: TransformersPolicy, reuse: Any, past: int, capacity: int, *args: Any, **kw: Any) -> Any:
        sizes.append((len(reuse), capacity))
        return batch_cache(self, reuse, past, capacity, *args, **kw)

    expected = whole.generate_tokens(prompts, settings)
    monkeypatch.setattr(transformers_backend.TransformersPolicy, "_batch_cache", counted)
    for _ in range(2):  # the second call reuses the first's keys/values when the prefix cache is on
        got = capped.generate_tokens(prompts, settings)
        assert_same(got, expected)
    assert len(sizes) > 2  # the calls were split
    assert all(rows * capacity <= cap for rows, capacity in sizes)
