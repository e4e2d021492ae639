"""Sampling one token per row: temperature, top-k, top-p, and the log-probability of the token chosen.

    chosen, logp = choose_tokens(logits, SamplingSettings(temperature=0.7, top_p=0.9), generators)

``choose_tokens`` samples from exactly the distribution whose log-probability it returns; each row draws
from its own ``torch.Generator``, so that a row's sample does not depend on the other rows of its batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spade_rl.policy.base import SamplingSettings

if TYPE_CHECKING:
    import torch

SAMPLING_BLOCK = 256  # tokens per block of the two-level running sum (inverse_transform)


def choose_tokens(
    logits: torch.Tensor, settings: SamplingSettings, generators: list[torch.Generator] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` [B, V] and give its log-probability, both [B].

    Greedy (temperature 0): argmax, with the log-prob under ``log_softmax(logits)``. Otherwise
    ``log_softmax(top_p(top_k(logits / T)))`` is the distribution sampled from, row ``b`` with
    ``generators[b]``, and the log-prob is read from it.
    """
    import torch

    if settings.greedy:
        chosen = logits.argmax(dim=-1)
        return chosen, torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None]).squeeze(-1)
    if generators is None or len(generators) != logits.shape[0]:
        raise ValueError("sampling needs one generator per row")
    scaled = filter_top_p(filter_top_k(logits / settings.temperature, settings.top_k), settings.top_p)
    logp = torch.log_softmax(scaled, dim=-1)
    draws = [torch.rand(1, generator=g, device=g.device, dtype=torch.float64) for g in generators]
    uniform = torch.cat(draws)
    chosen = inverse_transform(logp.exp(), uniform)
    return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)


def inverse_transform(
    probs: torch.Tensor, uniform: torch.Tensor, block: int = SAMPLING_BLOCK
) -> torch.Tensor:
    """The token of each row of ``probs`` [B, V] (unnormalised, >= 0) at the cumulative mass ``uniform``
    [B] (in [0, 1), float64) of the row's total: the first token whose running sum exceeds it.

    Inverse transform sampling: one uniform number per row from its generator, located in the row's
    cumulative distribution (float64: 49k float32 probabilities would sum with visible rounding).
    ``torch.multinomial`` draws one random number per vocabulary entry instead (4% of a batch's generation
    time, torch profiler). In two levels: the float64 running sum of ``block``-token blocks picks the
    block, then a running sum inside it the token, instead of one float64 running sum over the whole
    vocabulary (that, and the float64 exponentials before it, took 8% of a decoding step at 64 rows,
    measured). A token of probability 0 (filtered by top-k / top-p) is a flat step of the running sum,
    which ``right=True`` never lands on; when float rounding puts the draw past a block's last token, the
    block's last token of non-zero probability is taken.
    """
    import torch

    rows, vocab = probs.shape
    blocks = -(-vocab // block)
    if blocks * block != vocab:
        probs = torch.nn.functional.pad(probs, (0, blocks * block - vocab))
    grouped = probs.view(rows, blocks, block)
    cdf = grouped.sum(dim=-1, dtype=torch.float64).cumsum_(dim=-1)  # [B, blocks]
    target = (uniform * cdf[:, -1]).unsqueeze(-1)
    which = torch.searchsorted(cdf, target, right=True).clamp_(max=blocks - 1)  # the block: mass > 0
    before = torch.where(which > 0, cdf.gather(-1, (which - 1).clamp(min=0)), torch.zeros_like(target))
    inside = grouped.gather(1, which.unsqueeze(-1).expand(rows, 1, block)).squeeze(1)  # [B, block]
    offset = torch.searchsorted(inside.double().cumsum(dim=-1), target - before, right=True).squeeze(-1)
    last = block - 1 - (inside.flip(-1) > 0).to(torch.uint8).argmax(dim=-1)  # its last token of mass > 0
    return which.squeeze(-1) * block + torch.minimum(offset, last)


def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (ties at the k-th value are kept); 0 keeps all."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens of each row until their probability reaches ``p`` (always at least one)."""
    import torch

    if p >= 1.0:
        return logits
    ordered, index = logits.sort(dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop_sorted = mass_before >= p
    drop = drop_sorted.scatter(-1, index, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))
