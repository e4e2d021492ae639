"""Decoding attention on the CPU over each row's own span of the key/value cache, not the batch's widest.

A generation batch lays its rows out left-padded to a common width: ``[pad | cached prefix | pad | rest of
the prompt | completion]`` (:mod:`spade_rl.policy.kv_cache`). At every decoding step each row's one query
attends over every position of that width, masked or not: with prompts of 118 to 460 tokens in one batch of
64, most of what SDPA reads is padding, and on the CPU the attention of a decoding step (one query per row)
costs in proportion to what it reads (SDPA's CPU kernel took half of a 64-row decoding step, torch profiler).

:func:`decode_attention` (the attention implementation ``spade_rl_decode``, registered with transformers on
first use) splits the batch into consecutive chunks of rows of similar span (a row's span: from its first
unmasked position to the end) and runs transformers' own SDPA attention on each chunk over the chunk's
widest span only: views of the cache, nothing copied. Rows are already ordered by length in a batch
(``TransformersPolicy.generate_tokens``), so consecutive chunks are close to a sort. Each row attends to
exactly the positions it attended to before (the cut positions are masked for every row of the chunk), so
results equal SDPA's over the whole width up to float rounding. Anything but one query per row with a
boolean padding mask (prefill, training, a model of another attention) goes to SDPA unchanged.

``TransformersPolicy`` sets its model's attention (:func:`set_attention`: ``policy.transformers.
attn_implementation``, or ``"sdpa"`` on the CPU), through transformers' public ``set_attn_implementation``,
and remembers what it set: the model's configuration keeps the name only in a private attribute. A model
whose attention the policy set to ``"sdpa"`` is switched to this implementation for the duration of a
generation call on the CPU (:func:`decoding_attention`), and back after it; training never sees it.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

NAME = "spade_rl_decode"
# The attention implementation set on each model by set_attention (what the CPU paths read).
_SET: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
MIN_CHUNK_ROWS = 8  # a chunk of fewer rows costs more in kernel calls than its span saves
NARROWER = 0.75  # a row at most this share of its chunk's widest span starts a new chunk


@functools.cache
def register() -> str:
    """Register :func:`decode_attention` (and SDPA's mask) with transformers under :data:`NAME`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def set_attention(model: Any, implementation: str) -> None:
    """Set the model's attention implementation (transformers' ``set_attn_implementation``) and remember
    it for :func:`attention_of`."""
    model.set_attn_implementation(implementation)
    _SET[model] = implementation


def attention_of(model: Any) -> str | None:
    """The attention implementation :func:`set_attention` set on ``model`` last (None: it set none): every
    switch of spade-rl's goes through it, so this is the model's attention as spade-rl left it."""
    return _SET.get(model)


def why_not_cpu_sdpa(model: Any) -> str:
    """Why the model is not one on the CPU whose attention is SDPA ("" when it is): what the CPU attention
    paths (this module's, :mod:`spade_rl.policy.packed_prefill`) replace."""
    config = getattr(model, "config", None)
    first = next(model.parameters(), None)
    if config is None or first is None:
        return "the model has no config or no parameters"
    if first.device.type != "cpu":
        return f"the model is on {first.device.type}, not the CPU"
    implementation = attention_of(model)
    if implementation is None:
        return "the model's attention was not set by spade-rl (decode_attention.set_attention)"
    if implementation != "sdpa":
        return f"the model's attention is {implementation!r}, not 'sdpa'"
    return ""


@contextlib.contextmanager
def decoding_attention(model: Any) -> Iterator[None]:
    """While inside, a model on the CPU whose attention is SDPA uses :func:`decode_attention`."""
    if why_not_cpu_sdpa(model):
        yield
        return
    set_attention(model, register())
    try:
        yield
    finally:
        set_attention(model, "sdpa")


def chunks(spans: list[int]) -> list[tuple[int, int, int]]:
    """Consecutive ``(start, stop, widest span)`` chunks of rows: at least :data:`MIN_CHUNK_ROWS` rows each
    (fewer only in a batch of fewer), a new one started by a row at most :data:`NARROWER` of the chunk's
    widest."""
    out: list[tuple[int, int, int]] = []
    start = 0
    while start < len(spans):
        stop = min(start + MIN_CHUNK_ROWS, len(spans))
        widest = max(spans[start:stop])
        while stop < len(spans) and spans[stop] > NARROWER * widest:
            widest = max(widest, spans[stop])
            stop += 1
        if len(spans) - stop < MIN_CHUNK_ROWS:  # too few left for a chunk of their own
            widest, stop = max(spans[start:]), len(spans)
        out.append((start, stop, widest))
        start = stop
    return out


class _Plan:
    """The chunks of the last mask seen: every layer of one forward pass gets the same mask object."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None
        self.chunks: list[tuple[int, int, int]] = []


_plan = _Plan()


def _chunks_of(mask: torch.Tensor) -> list[tuple[int, int, int]]:
    if _plan.mask is mask:
        return _plan.chunks
    import torch

    valid = mask[:, 0, -1, :]  # [rows, positions]: the one query's row of the mask
    width = valid.shape[-1]
    first = valid.to(torch.uint8).argmax(dim=-1)  # the first unmasked position
    spans = [width - int(f) for f in first.tolist()]
    _plan.mask, _plan.chunks = mask, chunks(spans)
    return _plan.chunks


def decode_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, per chunk of rows over the chunk's span when decoding (see the module
    docstring); the same signature and result layout ``[batch, query, heads, dim]``."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows, width = query.shape[0], key.shape[2]
    if (
        query.shape[2] != 1
        or attention_mask is None
        or attention_mask.dtype != torch.bool
        or attention_mask.dim() != 4
        or attention_mask.shape[0] != rows
        or attention_mask.shape[-1] != width
        or rows < 2 * MIN_CHUNK_ROWS
        or torch.is_grad_enabled()
    ):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    plan = _chunks_of(attention_mask)
    if len(plan) == 1 and plan[0][2] == width:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outputs = []
    for start, stop, span in plan:
        cut = width - span
        out, _ = sdpa_attention_forward(
            module,
            query[start:stop],
            key[start:stop, :, cut:],
            value[start:stop, :, cut:],
            attention_mask[start:stop, :, :, cut:],
            **kwargs,
        )
        outputs.append(out)
    return torch.cat(outputs), None
