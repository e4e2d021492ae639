"""TRL's padded batch of one update cut into micro-batches of rows of similar length, padding trimmed.

    parts = [trim_padding(b) for b in split_by_length(batch, steps)]   # what the trainer buffers

TRL 1.16 pads every row of the whole batch to its longest prompt and its longest completion, shuffles and
splits it: a 1,400-token designer row makes every 400-token agent row cost 1,400 tokens of forward and
backward. Here rows are ordered by real length before the split, and each micro-batch is cut to its own
widest row (used by :class:`spade_rl.train.trl_engine.SampleServingGRPOTrainer`). The batch is TRL's dict
of tensors (``prompt_ids``, ``prompt_mask``, ``completion_ids``, ``completion_mask``, per-token log-probs,
``advantages``...), lists and scalars.
"""

from __future__ import annotations

from typing import Any

import torch

_PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def split_by_length(batch: dict[str, Any], chunks: int) -> list[dict[str, Any]]:
    """``batch`` (TRL's padded rows) split into ``chunks`` equal micro-batches of rows of similar length,
    longest first; per-row values (tensors or lists) follow their row, scalars are shared."""
    lengths = batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)
    rows = lengths.shape[0]
    if rows % chunks:
        raise ValueError(f"{rows} rows do not split into {chunks} equal micro-batches")
    order = sorted(range(rows), key=lambda r: (-int(lengths[r]), r))
    size = rows // chunks
    out = []
    for c in range(chunks):
        index = order[c * size : (c + 1) * size]
        part: dict[str, Any] = {}
        for key, value in batch.items():
            if isinstance(value, torch.Tensor) and value.ndim > 0:
                part[key] = value[torch.tensor(index, device=value.device)]
            elif isinstance(value, list):
                part[key] = [value[i] for i in index]
            else:
                part[key] = value
        out.append(part)
    return out


def trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """A micro-batch without the padding columns no row of it needs: prompts are left-padded (columns before
    the earliest real prompt token go), completions right-padded (columns after the longest go). Every 2-D
    tensor as wide as the completions (ids, masks, per-token log-probs, TRL's tool mask) is cut alike."""
    prompt_mask, completion_mask = batch["prompt_mask"], batch["completion_mask"]
    real = prompt_mask.any(0).nonzero()
    first = int(real[0]) if len(real) else prompt_mask.shape[1] - 1
    width = completion_mask.shape[1]
    keep = max(1, int(completion_mask.sum(1).max()))
    out = dict(batch)
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.ndim != 2:
            continue
        if key in _PROMPT_KEYS:
            out[key] = value[:, first:]
        elif value.shape[1] == width:
            out[key] = value[:, :keep]
    return out
