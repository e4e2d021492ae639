"""The GRPO loss (spade_rl.train.loss): hand-computed numbers. TRL's own loss is the oracle of the whole
learner in tests/interop/test_trl_oracle.py."""

from __future__ import annotations

import math

import pytest
import torch

from spade_rl.train.loss import GRPOLoss, LossSettings, grpo_loss

# Two rows of three tokens: old log-probs 0, so the ratio r is exp(logps); the clip range is [0.8, 1.28].
RATIO = [[1.0, 1.5, 0.5], [1.1, 0.7, 2.0]]
ADVANTAGES = [1.0, -2.0]
MASK = [[1, 1, 1], [1, 1, 0]]
# Per token, max(-A r, -A clip(r)): row 0 -1, -1.28 (clipped high), -0.5; row 1 2.2, 1.6 (clipped low),
# and 4.0 masked out. Masked sum 1.02 over 5 tokens; row sums -2.78 (3 tokens) and 3.8 (2 tokens).


def hand_batch(requires_grad=False):
    logps = torch.tensor(RATIO).log().requires_grad_(requires_grad)
    return logps, torch.zeros(2, 3), torch.tensor(ADVANTAGES), torch.tensor(MASK)


@pytest.mark.parametrize(
    ("loss_type", "options", "expected"),
    [
        ("dapo", {}, 1.02 / 5),  # tokens of this micro-batch = the batch
        ("dapo", {"batch_tokens": 10.0, "micro_batches": 2}, 1.02 / 10),  # tokens of the whole batch
        ("grpo", {}, (-2.78 / 3 + 3.8 / 2) / 2),  # mean per row, then over rows
        ("grpo", {"batch_rows": 4}, (-2.78 / 3 + 3.8 / 2) / 4),  # over the rows of the whole batch
        ("dr_grpo", {}, 1.02 / (2 * 4)),  # rows x max_completion_length
        ("dr_grpo", {"batch_rows": 5}, 1.02 / (5 * 4)),
        ("bnpo", {"micro_batches": 2}, 1.02 / 5 / 2),  # tokens of this micro-batch, whatever the batch
    ],
)
def test_each_normalisation_by_hand(loss_type, options, expected):
    settings = LossSettings(loss_type=loss_type, max_completion_length=4)
    out = grpo_loss(*hand_batch(), settings, **options)
    assert float(out.loss) == pytest.approx(expected, rel=1e-6)


def test_the_gradient_flows_only_where_the_clip_does_not_bind():
    logps, old, advantages, mask = hand_batch(requires_grad=True)
    out = grpo_loss(logps, old, advantages, mask, LossSettings(loss_type="dapo"))
    out.loss.backward()
    # d/d logps of -A r / 5 where unclipped: -0.2 and -0.1 (row 0), 2 * 1.1 / 5 (row 1); clipped or masked: 0
    expected = torch.tensor([[-0.2, 0.0, -0.1], [0.44, 0.0, 0.0]])
    torch.testing.assert_close(logps.grad, expected, rtol=1e-6, atol=1e-7)


def test_clip_metrics_by_hand():
    out = grpo_loss(*hand_batch(), LossSettings())
    metrics = out.metrics()
    assert metrics["clip_ratio/low_mean"] == pytest.approx(1 / 5)  # r = 0.7 with A < 0
    assert metrics["clip_ratio/high_mean"] == pytest.approx(1 / 5)  # r = 1.5 with A > 0
    assert metrics["clip_ratio/region_mean"] == pytest.approx(2 / 5)
    assert metrics["clip_ratio/low_min"] == 0.0 and metrics["clip_ratio/high_max"] == pytest.approx(1 / 3)
    assert "kl" not in metrics  # beta = 0: no KL term, no reference needed


def test_kl_term_by_hand():
    logps, old, advantages, mask = hand_batch()
    ref = logps + math.log(2.0)  # k3 at pi_ref / pi_theta = 2: 2 - log 2 - 1 per token, times r
    out = grpo_loss(logps, old, advantages, mask, LossSettings(beta=0.1), ref_logps=ref)
    k3 = 2 - math.log(2.0) - 1
    ratio_sum = 1.0 + 1.5 + 0.5 + 1.1 + 0.7
    assert float(out.loss) == pytest.approx((1.02 + 0.1 * k3 * ratio_sum) / 5, rel=1e-6)
    assert out.metrics()["kl"] == pytest.approx(k3 * ratio_sum / 5, rel=1e-6)
    with pytest.raises(ValueError, match="ref_logps"):
        grpo_loss(logps, old, advantages, mask, LossSettings(beta=0.1))


def test_truncated_importance_sampling_by_hand():
    logps, old, advantages, mask = hand_batch()
    sampler = old - torch.tensor([[2.0, 0.5, 1.0], [1.0, 1.0, 1.0]]).log()  # pi_old / pi_sampler
    out = grpo_loss(logps, old, advantages, mask, LossSettings(tis_cap=1.5), sampling_logps=sampler)
    # weights min(pi_old / pi_sampler, 1.5): 1.5, 0.5, 1 on row 0
    assert float(out.loss) == pytest.approx((-1 * 1.5 - 1.28 * 0.5 - 0.5 + 2.2 + 1.6) / 5, rel=1e-6)
    with pytest.raises(ValueError, match="sampling_logps"):
        grpo_loss(logps, old, advantages, mask, LossSettings(tis_cap=1.5))


def test_empty_rows_and_batches_give_zero_not_nan():
    logps, old, advantages, _ = hand_batch()
    for loss_type in ("dapo", "grpo", "dr_grpo", "bnpo"):
        settings = LossSettings(loss_type, max_completion_length=3)
        out = grpo_loss(logps, old, advantages, torch.zeros(2, 3), settings)
        assert float(out.loss) == 0.0
        assert math.isnan(out.metrics()["clip_ratio/low_min"])  # no row has a trained token


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"loss_type": "cispo"}, r"\['dapo', 'grpo', 'dr_grpo', 'bnpo'\]"),
        ({"loss_type": "dr_grpo"}, "max_completion_length"),
        ({"tis_cap": 0.0}, "tis_cap"),
    ],
)
def test_settings_errors_say_what_is_allowed(change, message):
    with pytest.raises(ValueError, match=message):
        LossSettings(**change)


def test_loss_output_is_a_plain_record():
    out = grpo_loss(*hand_batch(), LossSettings())
    assert isinstance(out, GRPOLoss) and out.loss.ndim == 0 and out.ratio.shape == (2, 3)
    assert not out.ratio.requires_grad
