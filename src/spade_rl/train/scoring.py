"""The one model call of training: the log-probability of every trained token of a micro-batch.

    scored = trained_logps(model, micro, temperature=0.6, head=model.get_output_embeddings())
    scored.logps, scored.mask        # [B, K]: log pi(token) of each trained token, in the columns of
                                     # the K positions that predict one

Both the GRPO step and the warm-up's supervised step score their tokens here. One forward pass of the
model (its public ``forward``, so DDP and FSDP see their usual call) with ``logits_to_keep`` set to the
positions that predict a trained token of any row; the output head is replaced for the duration of the
call (an instance attribute of the head module, restored after) by :func:`_scored_head`, which projects
only the (row, position) pairs that predict a trained token, in chunks of :data:`CHUNK` positions, each
recomputed in the backward pass (``torch.utils.checkpoint``): a 600-token designer row never holds its
600 x 49,152 logits, in the forward or the backward pass. The model therefore returns, in place of its
logits, the log-probabilities [B, K] (0 where a row trains nothing at that position).

With ``head_fp32`` the head computes in float32 under bf16 autocast, as generation does
(:mod:`spade_rl.policy.precision`), so that the importance ratio compares like with like. Models whose
forward transforms the head's output (logit soft-capping) are refused: the values returned here would not
be their log-probabilities.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from spade_rl.train.samples import TokenBatch

CHUNK = 512  # positions projected through the output head at once


class ScoringError(ValueError):
    """A model this module cannot score (the message says why and what to use)."""


@dataclass(frozen=True)
class Scored:
    """The trained tokens of a micro-batch as the model scores them, in the columns of the positions that
    predict them ([B, K]: K positions that predict a trained token of some row)."""

    logps: torch.Tensor  # tempered log-prob of each trained token; differentiable; 0 elsewhere
    mask: torch.Tensor  # float, 1 where the row trains the token this column predicts
    sampling_logps: torch.Tensor  # the sampler's log-probs of the same tokens (0 elsewhere)
    entropy_sum: torch.Tensor  # the entropy of the tempered distribution, summed over the trained tokens


def trained_logps(
    model: Any,
    batch: TokenBatch,
    temperature: float = 1.0,
    *,
    head: Any,
    head_fp32: bool = False,
    autocast: Any = None,
) -> Scored:
    """Score the trained tokens of ``batch`` (see :class:`Scored` and the module doc). ``model`` is what to
    call (a wrapped model under DDP / FSDP), ``head`` the output head of the model inside
    (``get_output_embeddings()``); ``autocast`` the context of the forward pass (None: as it is)."""
    device = batch.input_ids.device
    width = batch.input_ids.size(1)
    # Position t - 1 predicts the token at t: the columns that predict a trained token of some row.
    targets_trained = batch.trained[:, 1:]
    keep = targets_trained.any(0).nonzero().flatten()
    if len(keep) == 0:  # nothing trained: one position, all masked (the pass still runs, see _scored_head)
        keep = torch.zeros(1, dtype=torch.long, device=device)
        mask = torch.zeros((len(batch), 1), device=device)
        sampling = torch.zeros((len(batch), 1), device=device)
    else:
        mask = targets_trained[:, keep].float()
        sampling = batch.sampling_logps[:, keep + 1].float()
    targets = batch.input_ids[:, (keep + 1).clamp(max=width - 1)]
    position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    entropy = torch.zeros((), device=device)
    scored = _scored_head(head, targets, mask.bool(), temperature, head_fp32, entropy)
    with _head_forward(head, scored), autocast or contextlib.nullcontext():
        out = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=position_ids,
            logits_to_keep=keep,
            use_cache=False,
        )
    return Scored(out.logits, mask, sampling, entropy)


def check_scorable(model: Any) -> Any:
    """The model's output head (what :func:`trained_logps` replaces while it scores); raises a
    :class:`ScoringError` for a model it cannot score."""
    config = getattr(model, "config", None)
    for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if getattr(config, name, None) not in (None, 0, 0.0, 1, 1.0):
            raise ScoringError(
                f"{type(model).__name__} transforms its output head's logits ({name} = "
                f"{getattr(config, name)}): the learner scores tokens from the head's output directly; "
                "train such a model with TRL (spade_rl.interop.trl)"
            )
    head = model.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise ScoringError(f"{type(model).__name__} has no linear output head to score tokens with")
    return head


def _scored_head(
    head: Any,
    targets: torch.Tensor,
    select: torch.Tensor,
    temperature: float,
    head_fp32: bool,
    entropy: torch.Tensor,
):
    """The replacement of ``head.forward``: hidden states [B, K, H] -> log-probs of ``targets`` [B, K] where
    ``select``, 0 elsewhere; adds the entropy of the selected positions into ``entropy``."""

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        # read at the call: FSDP2 puts the whole (unsharded) weight in place only for the forward pass
        weight, bias = head.weight, getattr(head, "bias", None)
        if hidden.shape[:2] != select.shape:
            raise ScoringError(
                f"the model handed its output head hidden states of shape {tuple(hidden.shape[:2])} for "
                f"{tuple(select.shape)} kept positions: it does not honour logits_to_keep as positions"
            )
        rows, cols = select.nonzero(as_tuple=True)
        picked, wanted = hidden[rows, cols], targets[rows, cols]
        parts = []
        for start in range(0, len(wanted), CHUNK):
            part = slice(start, start + CHUNK)
            logp, ent = checkpoint(
                _chunk_logps,
                picked[part],
                weight,
                bias,
                wanted[part],
                temperature,
                head_fp32,
                use_reentrant=False,
            )
            parts.append(logp)
            entropy.add_(ent)
        out = torch.zeros(select.shape, dtype=torch.float32, device=hidden.device)
        if parts:
            out = out.index_put((rows, cols), torch.cat(parts))
        # Every weight and hidden state stays in the graph (with gradient 0) even when nothing is selected:
        # under DDP / FSDP each process must reduce every parameter's gradient in every step.
        anchor = hidden.sum() + weight.sum() + (bias.sum() if bias is not None else 0.0)
        return out + 0.0 * anchor

    return forward


def _chunk_logps(hidden, weight, bias, targets, temperature, head_fp32):
    """log softmax(h W^T + b)[target] / temperature for a chunk of positions, and their entropy (summed,
    detached)."""
    if head_fp32:
        with torch.autocast(hidden.device.type, enabled=False):
            logits = F.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
    else:
        logits = F.linear(hidden, weight, bias)
    logits = logits.float() / temperature
    normaliser = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - normaliser
    with torch.no_grad():
        entropy = (normaliser - (torch.softmax(logits, -1) * logits).sum(-1)).sum()
    return logp, entropy


@contextlib.contextmanager
def _head_forward(head: Any, forward: Any) -> Iterator[None]:
    """``head.forward`` replaced for the duration (an instance attribute, as accelerate's hooks set one)."""
    own = head.__dict__.get("forward")
    head.forward = forward
    try:
        yield
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own
