"""The key/value cache of one generation batch: transformers' ``DynamicCache``, preallocated and checked.

``new_cache`` makes an empty cache, with :class:`GrowingLayer` s (``growing_layer_class``) that write each
step in place instead of concatenating; ``fill_past`` lays cached prefixes out in it (right-aligned, masked
padding before them); ``why_no_prefix_cache`` and ``check_batch_cache`` say when a model's cache is not made
of plain ``DynamicLayer`` s of ``[batch, heads, positions, head_dim]`` tensors, the only layout that the
prefix cache (:mod:`spade_rl.policy.prefix_cache`) can rebuild from stored tensors. transformers is
imported only when these are called.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from spade_rl.policy.prefix_cache import Reuse


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
