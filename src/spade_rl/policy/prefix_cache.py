"""The prefix cache of ``TransformersPolicy``: keys and values of past sequences, keyed by their token ids.

A multi-turn rollout sends each conversation again every turn, grown by the last
completion and the next observation. After a call, the keys and values of every row's sequence (the prompt
and the completion but its last token, which was sampled and never fed) are kept, keyed by their token ids
(:class:`PrefixCache`, ``config.prefix_cache_tokens`` tokens at most, least recently used dropped first).
The next call looks up the longest cached prefix of each prompt (any common prefix counts, up to all but
the prompt's last token) and feeds only the uncached rest, the position ids continuing from each row's
cached length: packed into one sequence on the CPU (:mod:`spade_rl.policy.packed_prefill`; each row's
cached keys/values then lie just before its new ones, right-aligned), else left-padded after the rows'
cached keys/values laid out as ``[padding | cached prefix]`` up to a common past width (the attention
mask has zeros on every padding position, also between a row's past and its rest). Results equal those
without the cache up to float rounding (the cached keys/values
were computed in another batch). The cache holds keys/values of the current weights only: each call compares
a cheap fingerprint of the parameters (their storage, version counters and a strided sample of values; fused
optimisers do not bump version counters) and drops the cache when it changed. A training loop should still
call :meth:`TransformersPolicy.clear_prefix_cache` after each update; so should code that changes what the
model computes without touching its parameters (PEFT's ``disable_adapter()``, another attention
implementation). Models whose cache is not made of plain ``DynamicLayer``s (sliding windows, linear
attention) run without a prefix cache (logged once).

This module holds the cache (:class:`PrefixCache`), the search for prefixes that several prompts of one call
share (:func:`shared_prefixes`) and the fingerprint of the weights the cached keys/values belong to; how
they are laid out in a batch's key/value cache is in :mod:`spade_rl.policy.kv_cache`.
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

SHARED_PREFIX_MIN_TOKENS = 32  # shorter shared prefixes are not worth a forward pass of their own


class _Entry:
    """The keys/values of one token sequence: ``kv`` [layers, 2 (keys, values), heads, len(tokens), dim]."""

    __slots__ = ("kv", "pins", "tokens")

    def __init__(self, tokens: tuple[int, ...], kv: torch.Tensor) -> None:
        self.tokens = tokens
        self.kv: torch.Tensor | None = kv  # None once discarded
        self.pins = 0  # rows of the current call that will read this entry: it is not evicted meanwhile


class Reuse(NamedTuple):
    """What a row takes from the prefix cache: the first ``length`` positions of ``entry`` (0: nothing)."""

    entry: _Entry | None
    length: int


NO_REUSE = Reuse(None, 0)


class PrefixCache:
    """Keys/values of past sequences, keyed by their token ids, at most ``max_tokens`` tokens in all.

    ``lookup(prompt)`` finds the entry sharing the longest prefix with ``prompt`` (at most all but its last
    token, whose logits the model must still compute) and pins it until :meth:`release` or
    :meth:`unpin_all`; ``add`` stores an entry, dropping the one it extends and then the least recently used
    unpinned entries until it fits (it is not stored if it cannot fit). Entries are stored on the model's
    device, without padding. ``stats`` counts rows looked up, rows that reused a prefix and tokens reused.
    A lookup compares the prompt with every entry (C-speed tuple slices, a binary search on a partial match):
    cheap for the hundreds of entries a budget of tokens allows.
    """

    def __init__(self, max_tokens: int) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"prefix cache max_tokens must be a positive integer, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.tokens = 0
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()  # least recently used first
        self.stats = {"rows": 0, "hits": 0, "reused_tokens": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0

    def lookup(self, prompt: Sequence[int], *, whole: bool = False) -> Reuse:
        """The longest cached prefix of ``prompt``, pinned; all of it when ``whole`` (for a prompt that is
        only encoded, not continued), else at most all but its last token."""
        best, best_length = self._longest(tuple(prompt), len(prompt) if whole else len(prompt) - 1)
        self.stats["rows"] += 1
        if best is None:
            return NO_REUSE
        self._entries.move_to_end(best.tokens)
        best.pins += 1
        self.stats["hits"] += 1
        self.stats["reused_tokens"] += best_length
        return Reuse(best, best_length)

    def covered(self, prompt: Sequence[int]) -> int:
        """How many first tokens of ``prompt`` an entry holds (nothing is pinned or counted)."""
        return self._longest(tuple(prompt), len(prompt))[1]

    def _longest(self, key: tuple[int, ...], limit: int) -> tuple[_Entry | None, int]:
        best: _Entry | None = None
        best_length = 0
        for entry in reversed(self._entries.values()):  # most recent first: a continuation is usually there
            length = _common_prefix_length(key, entry.tokens, limit, best_length)
            if length > best_length:
                best, best_length = entry, length
        return best, best_length

    def release(self, entry: _Entry | None) -> None:
        if entry is not None and entry.pins > 0:
            entry.pins -= 1

    def unpin_all(self) -> None:
        for entry in self._entries.values():
            entry.pins = 0

    def add(self, tokens: tuple[int, ...], kv: torch.Tensor, replaces: _Entry | None = None) -> bool:
        """Store ``kv`` for ``tokens``; ``replaces`` (an entry ``tokens`` extend) is dropped unless pinned."""
        if replaces is not None and replaces.pins == 0 and self._entries.get(replaces.tokens) is replaces:
            self._drop(replaces.tokens)
        if tokens in self._entries:
            self._entries.move_to_end(tokens)
            return True
        pinned = sum(len(e.tokens) for e in self._entries.values() if e.pins > 0)
        if pinned + len(tokens) > self.max_tokens:
            return False  # it could not fit without dropping an entry a row of this call still reads
        for key in [k for k, e in self._entries.items() if e.pins == 0]:
            if self.tokens + len(tokens) <= self.max_tokens:
                break
            self._drop(key)
        self._entries[tokens] = _Entry(tokens, kv)
        self.tokens += len(tokens)
        return True

    def discard(self, entry: _Entry) -> None:
        """Forget ``entry`` now, its keys/values too (its one reader holds a copy of what it needs): the
        call's lookups still name the entry until the call ends, and with its tensor a play turn held
        every conversation's keys/values twice, three times once the turn's own were stored."""
        if self._entries.get(entry.tokens) is entry:
            self._drop(entry.tokens)

    def reserve(self, tokens: int) -> None:
        """Drop least recently used unpinned entries until ``tokens`` more would fit: what :meth:`add`
        drops to make room, done before the new entries' keys/values are copied out of a batch."""
        for key in [k for k, e in self._entries.items() if e.pins == 0]:
            if self.tokens + tokens <= self.max_tokens:
                break
            self._drop(key)

    def _drop(self, key: tuple[int, ...]) -> None:
        # No row of the running call reads a dropped entry (pinned ones are never dropped but by their one
        # reader, after its copy): its keys/values go now, though a lookup of the call still names it.
        entry = self._entries.pop(key)
        self.tokens -= len(entry.tokens)
        entry.kv = None


def shared_prefixes(prompts: Sequence[Sequence[int]], min_tokens: int) -> list[tuple[int, ...]]:
    """The prefixes of at least ``min_tokens`` tokens that two or more of ``prompts`` share, shortest
    first: the longest common prefix of each pair of neighbours in sorted order (every pair's longest
    common prefix is one of them or a prefix of one), at most all but the last token of the shorter prompt
    (its logits must still be computed)."""
    counts = Counter(tuple(p) for p in prompts)
    # The same prompt more than once: all but its last token.
    found = {p[:-1] for p, n in counts.items() if n > 1 and len(p) - 1 >= min_tokens}
    for a, b in itertools.pairwise(sorted(counts)):
        limit = min(len(a), len(b)) - 1
        length = _common_prefix_length(a, b, limit, 0)
        if length >= min_tokens:
            found.add(a[:length])
    return sorted(found, key=lambda p: (len(p), p))


def _common_prefix_length(a: tuple[int, ...], b: tuple[int, ...], limit: int, floor: int) -> int:
    """The length of the longest common prefix of ``a`` and ``b``, at most ``limit``; 0 when it is not longer
    than ``floor`` (the caller has one that long already)."""
    high = min(len(a), len(b), limit)
    if high <= floor or a[: floor + 1] != b[: floor + 1]:
        return 0
    if a[:high] == b[:high]:
        return high
    low = floor + 1  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


def weights_fingerprint(model: PreTrainedModel) -> tuple[Any, Any]:
    """A cheap identity of the weights: each parameter's storage and version counter, and a strided sample of
    its values (fused optimisers update in place without bumping version counters). About 4 ms for 135M
    parameters on a CPU."""
    import torch

    params = [p for p in model.parameters() if p.device.type != "meta"]
    identity = tuple((p.data_ptr(), p._version, p.dtype) for p in params)
    with torch.no_grad():
        values = [p.detach().reshape(-1)[:: max(1, p.numel() // 16)].float() for p in params]
        sample = torch.cat(values) if values else torch.zeros(0)
    return identity, sample


def same_fingerprint(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    import torch

    return a[0] == b[0] and a[1].shape == b[1].shape and bool(torch.equal(a[1], b[1]))
