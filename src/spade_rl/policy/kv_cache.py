"""The key/value cache of one generation batch: transformers' ``DynamicCache``, preallocated and checked.

``new_cache`` makes an empty cache, with :class:`GrowingLayer` s (``growing_layer_class``) that write each
step in place instead of concatenating; ``fill_past`` lays cached prefixes out in it (right-aligned, masked
padding before them); ``why_no_prefix_cache`` and ``check_batch_cache`` say when a model's cache is not made
of plain ``DynamicLayer`` s of ``[batch, heads, positions, head_dim]`` tensors, the only layout that the
prefix cache (:mod:`spade_rl.policy.prefix_cache`) can rebuild from stored tensors; ``keep_rows`` copies
a batch's rows into that cache. transformers is imported only when these are called.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from spade_rl.policy.prefix_cache import PrefixCache, Reuse


def why_no_prefix_cache(model: PreTrainedModel) -> str:
    """Why the model's key/value cache cannot be rebuilt from stored tensors, or "" when it can."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return "this transformers version has no DynamicLayer"
    cache = new_cache(model)
    layers = getattr(cache, "layers", None)
    if layers is None:
        return f"{type(cache).__name__} has no layers"
    if not layers:
        replicated = getattr(cache, "layer_class_to_replicate", None)
        return "" if replicated is DynamicLayer else f"cache layers of type {replicated!r}"
    kinds = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    return f"the model's cache has {', '.join(kinds)} layers (only DynamicLayer works)" if kinds else ""


def check_batch_cache(cache: Any, rows: int, seen: int) -> str:
    """What is wrong with a filled batch cache for the prefix cache ("" when every layer holds [rows, heads,
    seen, dim] tensors of one shape and dtype)."""
    layers = getattr(cache, "layers", None)
    first = getattr(layers[0], "keys", None) if layers else None
    if first is None or first.dim() != 4:
        return "the model's cache does not hold [batch, heads, positions, head_dim] keys per layer"
    shape = (rows, first.shape[1], seen, first.shape[3])
    for layer in layers:
        for states in (layer.keys, layer.values):
            if states is None or states.dim() != 4 or tuple(states.shape) != shape:
                found = None if states is None else tuple(states.shape)
                return f"a cache layer holds {found}, not {shape} (batch, heads, positions, head_dim)"
            if states.dtype != first.dtype:
                return "cache layers of different dtypes"
    return ""


def fill_past(cache: Any, reuse: list[Reuse], past: int, ends: list[int] | None = None) -> None:
    """Fill an empty cache with, per layer, ``past`` positions holding row b's reused keys/values, ending at
    position ``ends[b]`` (None: right-aligned at ``past``); zeros elsewhere (masked padding, or positions
    that a packed prompt feed writes next)."""
    sample = next(r.entry.kv for r in reuse if r.entry is not None)
    layers, _, heads, _, dim = sample.shape
    for i in range(layers):  # one layer at a time: the padded copy is transient
        kv = sample.new_zeros((2, len(reuse), heads, past, dim))
        for b, r in enumerate(reuse):
            if r.entry is not None and r.length:
                end = past if ends is None else ends[b]
                kv[:, b, :, end - r.length : end] = r.entry.kv[i, :, :, : r.length]
        cache.update(kv[0], kv[1], i)


def free_layer(layer: Any) -> None:
    """Let go of a batch cache layer's keys/values (the batch is done with them)."""
    if hasattr(layer, "_buffers"):
        layer._buffers = None
    layer.keys = layer.values = None


@functools.cache
def growing_layer_class() -> type:
    """:class:`GrowingLayer` (defined on first use: this module imports transformers lazily)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values are views of buffers with room for ``capacity`` positions.

        ``DynamicLayer.update`` concatenates: every decoding step copies the whole cache of every layer (a
        quarter of the CPU time of a batch of 32 at 64 new tokens, measured with the torch profiler). Here
        ``update`` writes the new positions in place and the buffers double when full. ``keys``/``values``
        are always the filled part ``[batch, heads, :length, dim]``, so what reads a ``DynamicLayer`` reads
        this one alike.
        """

        def __init__(self, capacity: int, dtype: torch.dtype | None = None) -> None:
            super().__init__()
            self.capacity = max(1, capacity)
            self.dtype = dtype  # keys and values are stored in it (None: as they come)
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
            self._length = 0
            # A spade_rl.policy.packed_prefill.Plan while a packed prompt stretch is fed (packing()).
            self.packed: Any = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            # Under bfloat16 autocast (ours, or accelerate's around a model trained with bf16) keys arrive in
            # float32 (rotary embeddings promote them) and values in bfloat16; attention computes in bfloat16
            # all the same, so both are kept in it.
            dtype = self.dtype or (value_states.dtype if key_states.dtype != value_states.dtype else None)
            if dtype is not None:
                key_states, value_states = key_states.to(dtype), value_states.to(dtype)
            if not self.is_initialized:
                self.device = key_states.device
                self.is_initialized = True
            if self.packed is not None:
                return self._write_packed(key_states, value_states, self.packed)
            end = self._length + key_states.shape[-2]
            if self._buffers is None or end > self._buffers[0].shape[-2]:
                self._reserve(key_states, value_states, max(end, self.capacity, 2 * self._length))
            keys, values = self._buffers
            keys[:, :, self._length : end].copy_(key_states)
            values[:, :, self._length : end].copy_(value_states)
            self._length = end
            self.keys, self.values = keys[:, :, :end], values[:, :, :end]
            return self.keys, self.values

        def _write_packed(self, key_states: torch.Tensor, value_states: torch.Tensor, plan: Any):
            """Write a packed stretch's keys/values ``[1, heads, tokens, dim]`` to the rows and slots of
            ``plan`` (buffers of ``plan.rows`` rows made first, zeroed, if there are none); the filled part
            is then every slot up to ``plan.slots``."""

            buffers = self._buffers
            if buffers is None or buffers[0].shape[0] != plan.rows or buffers[0].shape[-2] < plan.slots:
                self._reserve(key_states, value_states, max(plan.slots, self.capacity), rows=plan.rows)
            rows, slots = plan.write_index(key_states.device)
            keys, values = self._buffers
            keys[rows, :, slots] = key_states[0].transpose(0, 1)
            values[rows, :, slots] = value_states[0].transpose(0, 1)
            self._length = max(self._length, plan.slots)
            self.keys, self.values = keys[:, :, : self._length], values[:, :, : self._length]
            return self.keys, self.values

        def _reserve(
            self, key_states: torch.Tensor, value_states: torch.Tensor, room: int, rows: int | None = None
        ) -> None:
            """Buffers with ``room`` positions, the filled part copied over; ``rows`` (a packed write, whose
            states hold one row) makes them that many rows, zeroed: slots not written yet are masked, and
            must not hold what masking cannot cancel (NaN)."""

            def buffer(states: torch.Tensor, old: torch.Tensor | None) -> torch.Tensor:
                batch, heads, _, dim = states.shape
                if rows is None:
                    new = states.new_empty((batch, heads, room, dim))
                else:
                    new = states.new_zeros((rows, heads, room, dim))
                if old is not None and self._length:
                    new[:, :, : self._length].copy_(old[:, :, : self._length])
                return new

            old = self._buffers or (None, None)
            self._buffers = (buffer(key_states, old[0]), buffer(value_states, old[1]))

        def get_seq_length(self) -> int:
            return self._length

        def reset(self) -> None:
            self._buffers, self._length = None, 0
            super().reset()

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes the negative number of positions to remove")
            if tokens_to_remove and self._buffers is not None:
                self._length = max(0, self._length + tokens_to_remove)
                self.keys, self.values = (b[:, :, : self._length] for b in self._buffers)

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self._buffers is not None:
                self._buffers = tuple(b[indices] for b in self._buffers)  # type: ignore[assignment]
                self.keys, self.values = (b[:, :, : self._length] for b in self._buffers)

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self._buffers is not None:
                self._buffers = tuple(b.repeat_interleave(repeats, dim=0) for b in self._buffers)  # type: ignore[assignment]
                self.keys, self.values = (b[:, :, : self._length] for b in self._buffers)

    return GrowingLayer


def new_cache(model: PreTrainedModel, capacity: int | None = None, dtype: Any = None) -> Any:
    """An empty dynamic key/value cache, filled in place by each forward pass; with ``capacity``, its layers
    are ``GrowingLayer`` s (:func:`growing_layer_class`) with room for that many positions (only for a
    cache of plain ``DynamicLayer`` s: the caller checks with :func:`why_no_prefix_cache`), holding keys
    and values in ``dtype`` (None: as they come)."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # older transformers: no config argument
        cache = DynamicCache()
    if capacity is not None:
        if cache.layers:
            cache.layers = [growing_layer_class()(capacity, dtype) for _ in cache.layers]
        else:
            cache.layer_class_to_replicate = functools.partial(growing_layer_class(), capacity, dtype)
    return cache


def keep_rows(
    prefix: PrefixCache,
    cache: Any,
    prompts: Sequence[Sequence[int]],
    reuse: Sequence[Reuse],
    tokens: Sequence[Sequence[int]],
    slots: Sequence[tuple[int, int]],
    store: Sequence[int],
    replace: bool = True,
    last: bool = False,
) -> None:
    """Keep the keys/values (prompt + completion but the last token) of the batch cache's rows ``store`` in
    ``prefix``; row i's prompt, reuse, completion tokens and slots are ``prompts[i]`` .. ``slots[i]``.

    In the batch cache, row i with ``c`` reused tokens holds them up to position ``slots[i][0]``
    (exclusive), and the other tokens of its prompt, then its fed completion tokens, from ``slots[i][1]``
    on; the copies leave all padding out. An entry a row extends is dropped (``replace``) once no other row
    of the call still reads it. Room is made first (least recently used entries dropped), then the copies
    go layer by layer; ``last`` (the batch is done with its cache) lets go of each layer of the batch cache
    once copied: the batch's keys/values and the new entries are never both held whole. The cache must
    have passed :func:`check_batch_cache`."""
    layers = cache.layers
    first = layers[0].keys
    kept = []
    for i in store:
        used = reuse[i]
        prefix.release(used.entry)
        known = tuple(prompts[i]) + tuple(tokens[i][:-1])  # the last token was sampled, never fed
        if len(known) <= prefix.max_tokens:
            kept.append((i, used, known))
    prefix.reserve(sum(len(known) for _, _, known in kept))
    heads, dim = first.shape[1], first.shape[3]
    copies = [first.new_empty((len(layers), 2, heads, len(known), dim)) for _, _, known in kept]
    for j, layer in enumerate(layers):
        for (i, used, known), kv in zip(kept, copies, strict=True):
            c, rest = used.length, len(known) - used.length
            end, start = slots[i]
            for k, states in enumerate((layer.keys, layer.values)):
                kv[j, k, :, :c] = states[i, :, end - c : end]
                kv[j, k, :, c:] = states[i, :, start : start + rest]
        if last:
            free_layer(layer)
    for (_, used, known), kv in zip(kept, copies, strict=True):
        full = replace and used.entry is not None and used.length == len(used.entry.tokens)
        prefix.add(known, kv, replaces=used.entry if full else None)


def batch_chunks(
    order: Sequence[int], lengths: Sequence[int], new_tokens: int, max_rows: int, max_tokens: int = 0
) -> list[list[int]]:
    """Split the rows ``order`` (in that order) into consecutive batches of at most ``max_rows`` rows whose
    caches hold at most ``max_tokens`` positions in all (0: no limit): rows x (the longest of their
    ``lengths`` + ``new_tokens``), what a packed batch preallocates. A row that alone needs more goes
    alone."""
    chunks: list[list[int]] = []
    chunk: list[int] = []
    longest = 0
    for r in order:
        wider = max(longest, lengths[r])
        fits = max_tokens <= 0 or (len(chunk) + 1) * (wider + new_tokens) <= max_tokens
        if chunk and (len(chunk) == max_rows or not fits):
            chunks.append(chunk)
            chunk, wider = [], lengths[r]
        chunk.append(r)
        longest = wider
    if chunk:
        chunks.append(chunk)
    return chunks


def padded_layout(
    prompts: Sequence[Sequence[int]], reuse: Sequence[Reuse], pad_token_id: int
) -> tuple[Any, Any, Any, int, int]:
    """The first forward pass of a left-padded batch: input ids, attention mask, position ids (on the CPU),
    ``past`` and ``width``.

    Row b, ``past + width`` wide: [pad | its cached prefix | pad | the rest of its prompt]; the mask is 0
    on both paddings and the positions of the rest continue from the cached length."""
    import torch

    cached = [r.length for r in reuse]
    fresh = [len(prompt) - c for prompt, c in zip(prompts, cached, strict=True)]
    past, width = max(cached), max(fresh)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), past + width), dtype=torch.long)
    positions = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, (prompt, c, n) in enumerate(zip(prompts, cached, fresh, strict=True)):
        input_ids[b, width - n :] = torch.tensor(prompt[c:])
        attention[b, past - c : past] = 1
        attention[b, past + width - n :] = 1
        positions[b, width - n :] = torch.arange(c, c + n)
    return input_ids, attention, positions, past, width
