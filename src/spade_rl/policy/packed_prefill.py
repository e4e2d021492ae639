"""Prompt tokens of a generation batch fed as one packed sequence, each row attending to its own keys/values.

A batch's rows bring prompts of different lengths, and with the prefix cache each row feeds only what its
prompt adds to its longest cached prefix (:mod:`spade_rl.policy.prefix_cache`). Left-padded to the widest,
a default play turn of 19 rows fed 19 x 111 token slots for about 65 real tokens a row, and each query
attended over the widest row's 1,067 positions: the padding cost the matrix products and the attention
alike. Here the rows' new tokens go in as one sequence ``[1, tokens]`` (position ids continuing from each
row's cached length), every linear layer computes real tokens only, and attention runs per row (SDPA over
that row's own positions, causal against its past): no padding anywhere.

The batch's key/value cache keeps its usual layout for decoding: row ``b`` holds its ``L_b`` positions
(cached prefix, then the new tokens) right-aligned in ``[W - L_b, W)``, with ``W`` the longest; decoding
appends at ``W``. A :class:`Plan` says, for a forward pass over a stretch of the packed sequence (a long
one goes in stretches, :data:`spade_rl.policy.transformers_backend.PREFILL_TOKENS`), which tokens belong
to which row and where their keys/values go; :func:`packing` switches the model's attention to
:func:`packed_attention` and each cache layer (:class:`spade_rl.policy.kv_cache.growing_layer_class`) to
writing the stretch's keys/values to their rows, for the duration of one forward pass; :func:`feed_packed`
feeds a batch's prompts so.

The results equal the padded batch's up to float rounding (each row's query meets exactly the keys it met
there; only the masked ones are gone): ``tests/policy/test_policy_packed_prefill.py`` compares token ids
and log-probs. Used on the CPU for models whose attention is SDPA and whose cache is made of plain dynamic
layers (``TransformersConfig.packed_prefill``); others are fed left-padded.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spade_rl.memory import release_unused_memory

if TYPE_CHECKING:
    import torch

    from spade_rl.policy.prefix_cache import Reuse

NAME = "spade_rl_packed"


@dataclass(frozen=True)
class Piece:
    """The tokens of one row in one stretch: queries ``[start, start + count)`` of the stretch, written to
    cache slots ``[slot, slot + count)`` of row ``row``, whose own positions begin at slot ``first``."""

    row: int
    start: int
    count: int
    slot: int
    first: int

    @property
    def span(self) -> int:
        """The cache positions these queries attend over: the row's first slot to its last new one."""
        return self.slot + self.count - self.first


@dataclass
class Plan:
    """One forward pass of a packed stretch: its pieces (in stretch order, covering it), the batch's row
    count and the slots the cache must have room for."""

    pieces: list[Piece]
    rows: int
    slots: int
    _masks: dict[tuple[int, int], Any] = field(default_factory=dict)  # made on first use
    _write: tuple[Any, Any] | None = None  # made on first use

    @property
    def tokens(self) -> int:
        return sum(p.count for p in self.pieces)

    def mask(self, piece: Piece, device: Any) -> Any:
        """The causal mask of a piece's queries over its span (bottom-right aligned), None when square
        (SDPA's own causal flag then does)."""
        if piece.count == piece.span:
            return None
        key = (piece.count, piece.span)
        if key not in self._masks:
            import torch

            past = piece.span - piece.count
            columns = torch.arange(piece.span, device=device)
            rows = torch.arange(piece.count, device=device) + past
            self._masks[key] = columns.unsqueeze(0) <= rows.unsqueeze(1)
        return self._masks[key]

    def write_index(self, device: Any) -> tuple[Any, Any]:
        """(row, slot) of each token of the stretch, for the cache layers' scatter (made once a plan)."""
        if self._write is None:
            import torch

            rows = torch.cat([torch.full((p.count,), p.row, dtype=torch.long) for p in self.pieces])
            slots = torch.cat([torch.arange(p.slot, p.slot + p.count) for p in self.pieces])
            self._write = (rows.to(device), slots.to(device))
        return self._write


def stretches(lengths: list[int], fed: list[int], width: int, tokens: int) -> list[Plan]:
    """The plans that feed, row by row, the last ``fed[b]`` of row ``b``'s ``lengths[b]`` positions, whose
    cache slots end at ``width`` (right-aligned), in stretches of at most ``tokens`` tokens (a row may be
    cut between two; the later part attends to the earlier through the cache)."""
    plans: list[Plan] = []
    pieces: list[Piece] = []
    used = 0
    for row, (length, count) in enumerate(zip(lengths, fed, strict=True)):
        first = width - length
        done = 0
        while done < count:
            take = min(count - done, tokens - used)
            pieces.append(Piece(row, used, take, width - count + done, first))
            used += take
            done += take
            if used == tokens:
                plans.append(Plan(pieces, len(lengths), width))
                pieces, used = [], 0
    if pieces:
        plans.append(Plan(pieces, len(lengths), width))
    return plans


class _Active(threading.local):
    """The plan of the forward pass running in this thread: policies of different models may generate in
    threads of one process at once (servers of a test), each with its own plan."""

    plan: Plan | None = None


_active = _Active()


@functools.cache
def register() -> str:
    """Register :func:`packed_attention` with transformers under :data:`NAME`, without a mask function: the
    model then builds no mask (each piece's is made here)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, packed_attention)
    return NAME


@contextlib.contextmanager
def packing(model: Any, cache: Any, plan: Plan) -> Iterator[None]:
    """While inside, ``model`` attends with :func:`packed_attention` and the layers of ``cache`` write what
    they are given to the rows and slots of ``plan``."""
    from spade_rl.policy.decode_attention import attention_of, set_attention

    saved = attention_of(model) or "sdpa"  # packing runs only where why_not_packed found SDPA
    layers = list(cache.layers)
    set_attention(model, register())
    _active.plan = plan
    for layer in layers:
        layer.packed = plan
    try:
        yield
    finally:
        set_attention(model, saved)
        _active.plan = None
        for layer in layers:
            layer.packed = None


def packed_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of a packed stretch: ``query`` [1, heads, tokens, dim], ``key``/``value`` the batch cache
    [rows, kv_heads, slots, dim]; each piece's queries over its row's span. Returns [1, tokens, heads, dim]
    as transformers' attention functions do."""
    from torch.nn.functional import scaled_dot_product_attention

    plan = _active.plan
    if plan is None or query.shape[0] != 1:
        raise RuntimeError("packed attention called outside spade_rl.policy.packed_prefill.packing")
    heads, groups = query.shape[1], getattr(module, "num_key_value_groups", 1)
    out = query.new_empty((1, query.shape[2], heads, query.shape[3]))
    for piece in plan.pieces:
        q = query[:, :, piece.start : piece.start + piece.count]
        k = key[piece.row : piece.row + 1, :, piece.first : piece.slot + piece.count]
        v = value[piece.row : piece.row + 1, :, piece.first : piece.slot + piece.count]
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        mask = plan.mask(piece, query.device)
        o = scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=scaling)
        out[0, piece.start : piece.start + piece.count] = o[0].transpose(0, 1)
    return out, None


def why_not_packed(model: Any) -> str:
    """Why the model's prompts cannot be fed packed ("" when they can): SDPA attention on the CPU."""
    from spade_rl.policy.decode_attention import why_not_cpu_sdpa

    return why_not_cpu_sdpa(model)


def feed_packed(
    model: Any,
    cache: Any,
    prompts: Sequence[Sequence[int]],
    reuse: Sequence[Reuse],
    width: int,
    stretch_tokens: int,
    cache_keyword: str,
) -> tuple[Any, Any, Any]:
    """Feed what each prompt adds to its reused prefix into ``cache`` (``width`` = the longest prompt) as
    one packed sequence, in stretches of about ``stretch_tokens`` tokens. Returns the float32 logits of
    each row's last prompt token [rows, vocab], the attention mask over the cache [rows, width] and each
    row's last position id [rows, 1]."""
    import torch

    device = next(model.parameters()).device
    lengths = [len(prompt) for prompt in prompts]
    fed = [length - r.length for length, r in zip(lengths, reuse, strict=True)]
    ids = torch.tensor([t for prompt, r in zip(prompts, reuse, strict=True) for t in prompt[r.length :]])
    ids = ids.to(device).unsqueeze(0)
    positions = torch.cat([torch.arange(r.length, n) for n, r in zip(lengths, reuse, strict=True)])
    positions = positions.to(device).unsqueeze(0)
    rows = len(prompts)
    last: list[Any] = [None] * rows
    offset = 0
    for i, plan in enumerate(stretches(lengths, fed, width, stretch_tokens)):
        if i:
            release_unused_memory()
        ends = [p for p in plan.pieces if p.slot + p.count == width]  # rows whose last token is here
        stop = offset + plan.tokens
        with packing(model, cache, plan):
            out = model(
                input_ids=ids[:, offset:stop],
                position_ids=positions[:, offset:stop],
                attention_mask=None,
                use_cache=True,
                logits_to_keep=torch.tensor(
                    [p.start + p.count - 1 for p in ends], dtype=torch.long, device=device
                ),
                **{cache_keyword: cache},
            )
        for piece, row_logits in zip(ends, out.logits[0], strict=True):
            last[piece.row] = row_logits
        offset = stop
    logits = torch.stack(last).float()
    attention = torch.zeros((rows, width), dtype=torch.long)
    for b, length in enumerate(lengths):
        attention[b, width - length :] = 1
    last_positions = torch.tensor(lengths).unsqueeze(1) - 1
    return logits, attention.to(device), last_positions.to(device)
