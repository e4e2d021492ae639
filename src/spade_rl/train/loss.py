"""The GRPO loss, written out: a pure function of per-token log-probabilities, advantages and a mask.

    out = grpo_loss(logps, old_logps, advantages, mask, LossSettings(loss_type="dapo"), ref_logps=None)
    out.loss.backward()            # this micro-batch's share of the batch loss
    out.metrics()                  # {"clip_ratio/low_mean": ..., "clip_ratio/region_mean": ..., "kl": ...}

This is the loss that runs: the learner (:mod:`spade_rl.train.learner`) computes the per-token
log-probs with one model call (:mod:`spade_rl.train.scoring`) and hands them here;
``tests/interop/test_trl_oracle.py`` checks the learner against TRL's own ``GRPOTrainer`` loss (loss and
gradients on the same batch).

**Shapes.** ``B`` rows (sequences) of a micro-batch, ``T`` completion positions (right-padded).
``logps`` (B, T): log pi_theta(o_t | q, o_<t) at the training temperature, differentiable;
``old_logps`` (B, T): the same under the policy that the clip range is measured against (the sampler's,
or a detached copy of ``logps``); ``advantages`` (B,): one per row; ``mask`` (B, T): 1 for the tokens
the model produced and that are trained, 0 for padding and environment tokens; ``ref_logps`` (B, T):
the reference policy's, for the KL term (``beta > 0``).

**Per token.** With ``r = exp(logps - old_logps)`` and the asymmetric clip range
``[1 - eps_low, 1 + eps_high]`` (DAPO's clip-higher)::

    pg  = max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high))     # = -min(A r, A clip(r)), PPO's
    kl  = r * (exp(ref - logps) - (ref - logps) - 1)                # k3 estimator of KL(pi_theta||pi_ref)
    l_t = w_t * pg + beta * kl

``kl`` is weighted by the ratio ``r`` (DeepSeek-V3.2's bias correction, TRL's default
``use_bias_correction_kl=True``): its gradient is then the unbiased reverse-KL gradient even when the
tokens come from another policy; its value at ``r = 1`` is plain k3. ``w_t`` is 1 unless truncated
importance sampling is on (``tis_cap = C``): ``w_t = min(exp(old_logps - sampling_logps), C)``, detached,
corrects for a sampler that differs from the "old" policy (Yao et al. 2025, TRL's ``token_truncate``).

**Over the batch.** The batch of ``N`` rows is cut into ``micro_batches`` micro-batches (of any sizes);
the optimiser step follows the sum of the micro-batch losses, so each is its share of the batch loss.
``|o_i|`` is the number of masked-in tokens of row ``i``, the sums run over this micro-batch's rows::

    dapo:     sum_i sum_t m_it l_it / batch_tokens           (batch_tokens = sum of |o_i| over the batch)
    grpo:     sum_i (sum_t m_it l_it / |o_i|) / batch_rows    (mean per row, then over the batch's N rows)
    dr_grpo:  sum_i sum_t m_it l_it / (batch_rows * max_completion_length)
    bnpo:     sum_i sum_t m_it l_it / sum_i |o_i| / micro_batches           (tokens of this micro-batch)

dapo weighs every token of the batch alike; grpo weighs every row alike (a long completion's tokens count
less each, and rows without a trained token still count in ``batch_rows``); dr_grpo divides by a
constant instead of by any length. dapo, grpo and dr_grpo give one step for the whole batch whichever
rows share a micro-batch; bnpo does not (its denominator is per micro-batch). ``batch_tokens`` and
``batch_rows`` default to this micro-batch's (the micro-batch is the batch). ``|o_i|`` and
``sum_i |o_i|`` are clamped at 1 so that an empty row or micro-batch gives 0, not NaN.

**Metrics.** A token is *clipped* where the clip binds, i.e. where its gradient through ``pg`` is 0:
``r < 1 - eps_low`` with ``A < 0`` (low) or ``r > 1 + eps_high`` with ``A > 0`` (high).
:meth:`GRPOLoss.metrics` gives the fractions of masked-in tokens clipped (``clip_ratio/low_mean``,
``high_mean``, ``region_mean`` = either), the lowest per-row low-clip fraction and the highest per-row
high-clip fraction (``clip_ratio/low_min``, ``high_max``, over rows with a trained token) and the mean
``kl`` per token: TRL's metric names. Across processes the learner adds up :meth:`GRPOLoss.token_sums`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_TYPES = ("dapo", "grpo", "dr_grpo", "bnpo")  # the ones written here; TRL has four more


@dataclass(frozen=True)
class LossSettings:
    loss_type: str = "dapo"
    epsilon_low: float = 0.2  # the clip range of the ratio: [1 - epsilon_low, 1 + epsilon_high]
    epsilon_high: float = 0.28
    beta: float = 0.0  # KL coefficient; 0: no reference log-probs needed
    max_completion_length: int | None = None  # dr_grpo's constant denominator (with the row count)
    tis_cap: float | None = None  # truncated importance sampling: cap C of pi_old / pi_sampler; None: off

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type {self.loss_type!r} is not one of {list(LOSS_TYPES)}")
        if self.loss_type == "dr_grpo" and not self.max_completion_length:
            raise ValueError("loss_type 'dr_grpo' needs max_completion_length (its denominator)")
        if self.tis_cap is not None and not self.tis_cap > 0:
            raise ValueError(f"tis_cap must be None (off) or a positive number, got {self.tis_cap!r}")


@dataclass(frozen=True)
class GRPOLoss:
    """The loss of one micro-batch and what it is made of (per-token tensors detached, shape (B, T))."""

    loss: torch.Tensor  # scalar, differentiable: this micro-batch's share of the batch loss
    ratio: torch.Tensor  # r = pi_theta / pi_old
    kl: torch.Tensor | None  # r-weighted k3 per token; None when beta = 0
    low_clipped: torch.Tensor  # r < 1 - eps_low and A < 0
    high_clipped: torch.Tensor  # r > 1 + eps_high and A > 0
    mask: torch.Tensor

    @property
    def region_clipped(self) -> torch.Tensor:
        return self.low_clipped | self.high_clipped

    def token_sums(self) -> dict[str, torch.Tensor]:
        """Per metric, its sum over the masked-in tokens, and ``tokens``, their count: the numbers that
        processes add up before dividing (a mean of means would weigh a short micro-batch too much)."""
        sums = {
            "clip_ratio/low_mean": (self.low_clipped.float() * self.mask).sum(),
            "clip_ratio/high_mean": (self.high_clipped.float() * self.mask).sum(),
            "clip_ratio/region_mean": (self.region_clipped.float() * self.mask).sum(),
        }
        if self.kl is not None:
            sums["kl"] = (self.kl * self.mask).sum()
        sums["tokens"] = self.mask.sum().float()
        return sums

    def row_means(self) -> dict[str, torch.Tensor]:
        """Per row, the fraction of its masked-in tokens clipped low / high (NaN for a row with none)."""
        count = self.mask.sum(-1)
        return {
            "clip_ratio/low_min": (self.low_clipped.float() * self.mask).sum(-1) / count,
            "clip_ratio/high_max": (self.high_clipped.float() * self.mask).sum(-1) / count,
        }

    def metrics(self) -> dict[str, float]:
        """This micro-batch's metrics (see the module doc), as floats."""
        sums = self.token_sums()
        tokens = sums.pop("tokens").clamp(min=1.0)
        out = {name: float(total / tokens) for name, total in sums.items()}
        rows = self.row_means()
        low, high = rows["clip_ratio/low_min"], rows["clip_ratio/high_max"]
        low, high = low[~low.isnan()], high[~high.isnan()]
        out["clip_ratio/low_min"] = float(low.min()) if len(low) else float("nan")
        out["clip_ratio/high_max"] = float(high.max()) if len(high) else float("nan")
        return out


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: LossSettings,
    *,
    ref_logps: torch.Tensor | None = None,
    sampling_logps: torch.Tensor | None = None,
    batch_tokens: torch.Tensor | float | None = None,
    batch_rows: torch.Tensor | float | None = None,
    micro_batches: int = 1,
) -> GRPOLoss:
    """One micro-batch's GRPO loss (the formulas in the module doc).

    ``batch_tokens``: dapo's denominator, the trained tokens of the whole batch; ``batch_rows``: the rows
    of the whole batch (grpo, dr_grpo); None: this micro-batch's, i.e. the micro-batch is the batch.
    ``micro_batches``: how many micro-batches bnpo's per-micro-batch mean is spread over.
    ``sampling_logps`` (B, T): the sampler's log-probs, needed with ``tis_cap``."""
    if ref_logps is None and settings.beta != 0.0:
        raise ValueError("beta > 0 needs the reference log-probs (ref_logps)")
    if sampling_logps is None and settings.tis_cap is not None:
        raise ValueError("tis_cap needs the sampler's log-probs (sampling_logps)")
    mask = mask.float()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # (B, 1): one advantage for every token of its row
    eps_low, eps_high = settings.epsilon_low, settings.epsilon_high

    ratio = torch.exp(logps - old_logps)
    kl = None
    if settings.beta != 0.0:
        kl = (torch.exp(ref_logps - logps) - (ref_logps - logps) - 1) * ratio
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * clipped_ratio
    per_token_loss = torch.max(pg_loss1, pg_loss2)
    if settings.tis_cap is not None:
        weight = torch.clamp(torch.exp(old_logps - sampling_logps), max=settings.tis_cap).detach()
        per_token_loss = per_token_loss * weight
    if kl is not None:
        per_token_loss = per_token_loss + settings.beta * kl

    token_sum = (per_token_loss * mask).sum()
    rows = per_token_loss.size(0) if batch_rows is None else batch_rows
    if settings.loss_type == "dapo":
        tokens = mask.sum().clamp(min=1.0) if batch_tokens is None else batch_tokens
        loss = token_sum / tokens
    elif settings.loss_type == "grpo":
        row_means = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        loss = row_means.sum() / rows
    elif settings.loss_type == "dr_grpo":
        loss = token_sum / (rows * settings.max_completion_length)
    else:  # bnpo
        loss = token_sum / mask.sum().clamp(min=1.0) / micro_batches

    return GRPOLoss(
        loss=loss,
        ratio=ratio.detach(),
        kl=None if kl is None else kl.detach(),
        low_clipped=(ratio < 1 - eps_low) & (advantages < 0),
        high_clipped=(ratio > 1 + eps_high) & (advantages > 0),
        mask=mask,
    )
