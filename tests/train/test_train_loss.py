"""The GRPO loss (spade_rl.train.loss): hand-computed numbers, then TRL 1.16's own loss as the oracle (the
parent class's ``compute_loss`` on the same micro-batch, and whole updates), and the seam's version check."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import pytest
import torch
from train_helpers import make_samples, max_change, weights
from trl import GRPOTrainer

from spade_rl.train import trl_engine
from spade_rl.train.loss import GRPOLoss, LossSettings, grpo_loss
from spade_rl.train.trl_engine import SampleServingGRPOTrainer

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
        ("grpo", {"micro_batches": 2}, (-2.78 / 3 + 3.8 / 2) / 2 / 2),
        ("dr_grpo", {}, 1.02 / (2 * 4)),  # rows x max_completion_length
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


# --- TRL as the oracle ----------------------------------------------------------------------------------

PARITY = [(loss_type, beta) for loss_type in ("dapo", "grpo", "dr_grpo", "bnpo") for beta in (0.0, 0.04)]


def micro_batch(trainer, seed):
    """A micro-batch in TRL's format: 4 rows, left-padded prompts, environment tokens (tool_mask), a row
    with no trained token; old and reference log-probs near the model's own, so that the ratio crosses
    both ends of the clip range and the KL is not 0."""
    generator = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(5, 2000, (4, 6), generator=generator)
    prompt_mask = torch.ones(4, 6, dtype=torch.long)
    prompt_mask[1, :2] = prompt_mask[3, :4] = 0
    completion_ids = torch.randint(5, 2000, (4, 7), generator=generator)
    completion_mask = torch.ones(4, 7, dtype=torch.long)
    completion_mask[0, 5:] = completion_mask[2, 3:] = 0
    tool_mask = torch.ones(4, 7, dtype=torch.long)
    tool_mask[1, 2:4] = 0
    tool_mask[3] = 0  # a filler row: nothing trained
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.tensor([1.3, -0.7, -1.1, 0.0]),
        "num_items_in_batch": torch.tensor(31),  # the trained tokens of the two micro-batches of the batch
    }
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([prompt_mask, completion_mask], 1),
            completion_ids.size(1),
        )
    # r = exp(-offset): 0.67 and 0.74 (below the clip range), 1.49 and 1.35 (above), 0.95, 1.05, 0.61
    offsets = torch.tensor([0.4, -0.4, 0.05, -0.3, 0.3, -0.05, 0.5])
    inputs["old_per_token_logps"] = logps + offsets + 0.02 * torch.randn(logps.shape, generator=generator)
    inputs["ref_per_token_logps"] = logps + 0.2 * torch.randn(logps.shape, generator=generator)
    return inputs


def loss_and_gradients(compute_loss, trainer, inputs):
    model = trainer.model
    model.zero_grad()
    trainer._metrics["train"].clear()
    loss = compute_loss(trainer, model, inputs)
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad()
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    return loss.detach(), grads, metrics


@pytest.mark.parametrize(("loss_type", "beta"), PARITY)
def test_our_loss_equals_trl_s_on_one_micro_batch(make_updater, loss_type, beta):
    """The same micro-batch through TRL's GRPOTrainer.compute_loss and through ours (the subclass's
    compute_loss, i.e. spade_rl.train.loss): loss, every parameter's gradient and every metric."""
    updater = make_updater(loss_type=loss_type, beta=beta, max_completion_length=9)
    trainer = updater.trainer
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    inputs = micro_batch(trainer, seed=0)
    assert trainer.loss_is_ours()
    ours, theirs = SampleServingGRPOTrainer.compute_loss, GRPOTrainer.compute_loss
    trl_loss, trl_grads, trl_metrics = loss_and_gradients(theirs, trainer, inputs)
    our_loss, our_grads, our_metrics = loss_and_gradients(ours, trainer, inputs)
    assert abs(float(our_loss - trl_loss)) <= 1e-6
    assert max(float((a - b).abs().max()) for a, b in zip(our_grads, trl_grads, strict=True)) <= 1e-6
    assert max(float(g.abs().max()) for g in trl_grads) > 1e-4  # a gradient worth comparing
    assert our_metrics.keys() == trl_metrics.keys()
    assert 0 < trl_metrics["clip_ratio/low_mean"] and 0 < trl_metrics["clip_ratio/high_mean"]  # clip active
    for name, value in trl_metrics.items():
        assert our_metrics[name] == pytest.approx(value, abs=1e-6, nan_ok=True), name
    if beta:
        assert trl_metrics["kl"] > 1e-3


@pytest.mark.parametrize(("loss_type", "beta"), PARITY)
def test_updates_with_our_loss_equal_updates_with_trl_s(make_updater, monkeypatch, loss_type, beta):
    """Two optimiser steps (the second one away from the reference, so the KL acts) with our loss and with
    TRL's: the same losses, gradient norms, metrics and weights. The samples' log-probs are not the model's,
    so the clip binds on many tokens."""
    samples = [make_samples(seed=1), make_samples(seed=2)]
    ours = make_updater(loss_type=loss_type, beta=beta)
    before = weights(ours.model)
    our_metrics = [ours.update(s) for s in samples]
    monkeypatch.setattr(SampleServingGRPOTrainer, "compute_loss", GRPOTrainer.compute_loss)
    trl_path = make_updater(loss_type=loss_type, beta=beta)
    trl_metrics = [trl_path.update(s) for s in samples]
    assert max_change(ours.model, before) > 1e-4
    for a, b in zip(ours.model.parameters(), trl_path.model.parameters(), strict=True):
        assert float((a - b).detach().abs().max()) <= 1e-6
    for mine, theirs in zip(our_metrics, trl_metrics, strict=True):
        assert mine["train/clip_ratio/region_mean"] > 0
        for name, value in theirs.items():
            if not name.startswith("time/") and name != "train/step_time":  # wall-clock times
                assert mine[name] == pytest.approx(value, rel=1e-6, abs=1e-6, nan_ok=True), name
    if beta:
        assert our_metrics[1]["train/kl"] > 0


def test_the_update_computes_its_loss_here(make_updater, monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        calls.append(kwargs["micro_batches"])
        return grpo_loss(*args, **kwargs)

    monkeypatch.setattr(trl_engine, "grpo_loss", counting)
    make_updater(gradient_accumulation_steps=2).update(make_samples())
    assert calls == [2, 2]  # one call per micro-batch, each its share of a batch of two


def test_trl_s_other_loss_types_still_run_as_trl_s(make_updater, monkeypatch):
    monkeypatch.setattr(trl_engine, "grpo_loss", None)  # would fail if called
    updater = make_updater(loss_type="sapo")
    assert not updater.trainer.loss_is_ours()
    assert updater.update(make_samples())["train/grad_norm"] > 0


def test_loss_output_is_a_plain_record():
    out = grpo_loss(*hand_batch(), LossSettings())
    assert isinstance(out, GRPOLoss) and out.loss.ndim == 0 and out.ratio.shape == (2, 3)
    assert not out.ratio.requires_grad


# --- the seam's version check ---------------------------------------------------------------------------


def test_the_seam_pins_what_pyproject_pins():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = {}
    for requirement in pyproject["project"]["dependencies"]:
        match = re.fullmatch(r"\s*(trl|transformers)\s*==\s*([\w.]+)\s*", requirement)
        if match:
            pins[match.group(1)] = match.group(2)
    assert pins == trl_engine.PINNED_VERSIONS


def test_other_versions_are_refused_with_the_pins_named():
    trl_engine.check_versions(dict(trl_engine.PINNED_VERSIONS))  # the pinned ones pass
    with pytest.raises(ImportError, match=r"trl==1\.16\.0, transformers==5\.24\.0.*found trl 1\.17\.0"):
        trl_engine.check_versions({"trl": "1.17.0", "transformers": "5.24.0"})
    with pytest.raises(ImportError, match="found transformers None"):
        trl_engine.check_versions({"trl": "1.16.0"})
