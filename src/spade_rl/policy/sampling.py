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
    # Inverse transform sampling: one uniform number per row from its generator, located in the row's
    # cumulative distribution (float64: 49k float32 probabilities would sum with visible rounding). Filtered
    # tokens have probability 0, a flat step that `right=True` never lands on. torch.multinomial draws one
    # random number per vocabulary entry instead (4% of a batch's generation time, torch profiler).
    cdf = logp.double().exp().cumsum(dim=-1)
    uniform = torch.cat([torch.rand(1, generator=g, device=g.device, dtype=cdf.dtype) for g in generators])
    target = (uniform * cdf[:, -1]).unsqueeze(-1)
    chosen = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=logits.shape[-1] - 1)
    return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)


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
