"""The GRPO update (spade_rl.train.updater): real TRL steps on the tiny model (CPU), the batch served
instead of generated, checkpoints, the output head, KL, LoRA, micro-batches, activation checkpointing."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import sys
from pathlib import Path

import pytest
import torch
from train_helpers import (
    G,
    make_samples,
    max_change,
    mixed_length_samples,
    relative_difference,
    weights,
)
from trl import GRPOTrainer

from spade_rl.policy import SamplingSettings, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rewards import zscore_advantages
from spade_rl.train import GRPOUpdater, Sample, TrainConfig, sample_from_generation
from spade_rl.train.trl_engine import SampleServingGRPOTrainer


def test_one_update_changes_the_weights_the_policy_generates_with(tokenizer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    updater = GRPOUpdater.for_policy(
        policy, TrainConfig(learning_rate=1e-3, group_size=G, per_device_train_batch_size=8)
    )
    assert updater.model is policy.model and updater.rows_per_update == 8
    before = weights(model)
    metrics = updater.update(make_samples())
    assert max_change(model, before) > 1e-4  # the policy's own model object was trained
    assert updater.step == 1 and metrics["train/step"] == 1.0
    assert metrics["train/designer/samples"] == 4 and metrics["train/agent/samples"] == 4
    assert metrics["train/filler_rows"] == 0 and metrics["train/grad_norm"] > 0
    assert metrics["train/advantage_mismatch"] < 1e-6
    for key in ("train/loss", "train/entropy", "train/clip_ratio/region_mean", "time/train_s"):
        assert key in metrics and metrics[key] == metrics[key]  # present and not NaN
    assert not model.training  # handed back in eval mode; the policy generates with it as before
    [generation] = policy.generate([[{"role": "user", "content": "Hi"}]], SamplingSettings(max_new_tokens=4))
    assert len(generation.completion_token_ids) >= 1
    scratch = updater.trainer.args.output_dir  # no output_dir: a temporary folder, not the working directory
    assert list(tmp_path.iterdir()) == []
    updater.close()
    assert not Path(scratch).exists()


def test_zero_advantages_leave_the_weights_unchanged(make_updater):
    updater = make_updater()
    before = weights(updater.model)
    metrics = updater.update(make_samples(scale={"designer": 0.0, "agent": 0.0}))
    # Exactly: the loss is A * ratio with A = 0, so every gradient is 0, and AdamW's first step from zero
    # moments (no weight decay) moves nothing. After earlier steps the moments would still move the weights.
    assert max_change(updater.model, before) == 0.0
    assert metrics["train/grad_norm"] == 0.0


def test_masked_tokens_get_no_gradient(make_updater):
    """Two batches that differ only in trailing environment tokens (ids and log-probs) give the same update;
    a batch whose completions are all environment tokens gives none."""
    base = make_samples(env_tail=4)
    rng = random.Random(7)
    other = [
        Sample(
            s.role,
            s.prompt_ids,
            s.completion_ids[:-4] + tuple(rng.randrange(5, 2000) for _ in range(4)),
            s.completion_mask,
            s.logprobs[:-4] + (-3.0,) * 4,
            s.advantage,
            s.group,
        )
        for s in base
    ]
    first, second = make_updater(), make_updater()
    before = weights(first.model)
    one, two = first.update(base), second.update(other)
    assert max_change(first.model, before) > 1e-4
    # Equal up to float32 rounding (the kernels sum in another order when other values sit beside them).
    assert two["train/loss"] == pytest.approx(one["train/loss"], rel=1e-6)
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-6)
    assert relative_difference(first.model, second.model, before) < 1e-4
    silent = [Sample(s.role, s.prompt_ids, s.completion_ids, [0] * len(s.completion_ids),
                     s.logprobs, s.advantage, s.group) for s in base]  # fmt: skip
    third = make_updater()
    before = weights(third.model)
    third.update(silent)
    assert max_change(third.model, before) == 0.0


def test_trl_uses_exactly_our_advantages(make_updater):
    updater = make_updater(per_device_train_batch_size=4, gradient_accumulation_steps=3)  # 12 rows
    samples = make_samples(roles=("agent", "designer"), group_size=3, scale={"agent": 7.0, "designer": 0.3})
    updater.update(samples)
    used = updater.trainer.last_advantages.tolist()
    ours = [s.advantage for s in samples]
    expected = ours[:3] + [0.0] + ours[3:] + [0.0] + [0.0] * 4  # blocks of G, then a filler block
    assert used == pytest.approx(expected, abs=1e-6)  # float32 rounding only


@pytest.mark.parametrize("role", ["designer", "agent"])
def test_each_role_alone_moves_the_weights(make_updater, role):
    other = "agent" if role == "designer" else "designer"
    updater = make_updater()
    before = weights(updater.model)
    metrics = updater.update(make_samples(scale={other: 0.0}))
    assert max_change(updater.model, before) > 1e-4 and metrics["train/grad_norm"] > 0
    assert metrics[f"train/rewards/{role}_advantage/std"] > 0
    assert metrics[f"train/rewards/{other}_advantage/std"] == 0


def test_a_short_batch_is_filled_without_changing_the_update(make_updater):
    """8 samples as a full batch of 8 rows, and as half of a batch of 16 (one filler block... two):
    with the dapo loss (tokens normalised over the batch) the fillers change nothing."""
    samples = make_samples()
    full = make_updater(per_device_train_batch_size=4, gradient_accumulation_steps=2)
    padded = make_updater(per_device_train_batch_size=4, gradient_accumulation_steps=4)
    before = weights(full.model)
    one, two = full.update(samples), padded.update(samples)
    assert two["train/filler_rows"] == 8 and one["train/filler_rows"] == 0
    assert two["train/loss"] == pytest.approx(one["train/loss"], rel=1e-6)
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-6)
    assert relative_difference(full.model, padded.model, before) < 1e-4
    with pytest.raises(ValueError, match="more than the 8 rows"):
        full.update(make_samples(roles=("agent", "designer", "agent")))


def test_save_and_load_continue_identically(make_updater, tmp_path):
    first = make_updater()
    first.update(make_samples(seed=1))
    first.save(tmp_path / "ckpt")
    expected = first.update(make_samples(seed=2))
    resumed = make_updater()  # a fresh model from the same seed: the checkpoint supplies the trained weights
    resumed.load(tmp_path / "ckpt")
    assert resumed.step == 1
    got = resumed.update(make_samples(seed=2))
    assert resumed.step == 2
    for a, b in zip(first.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert got["train/loss"] == expected["train/loss"]
    assert got["train/grad_norm"] == expected["train/grad_norm"]
    with pytest.raises(ValueError, match="gradient_accumulation_steps=2, this updater has"):
        make_updater(gradient_accumulation_steps=1).load(tmp_path / "ckpt")


def policy_samples(tokenizer, prompt: str):
    """(model, policy, samples): a fresh tiny model's policy and 2 groups of G samples it drew at temperature
    0.6 (a designer group and an agent group, advantages z-scored), with the sampler's log-probs."""
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    chats = [[{"role": "user", "content": f"{prompt} {i}."}] for i in range(2)]
    generations = policy.generate(chats, SamplingSettings(max_new_tokens=12, temperature=0.6, seed=3, n=G))
    samples = []
    for group, role in enumerate(("designer", "agent")):
        block = generations[group * G : group * G + G]
        advantages = zscore_advantages([float(i % 2) + 0.1 * i for i in range(G)]).advantages
        samples += [sample_from_generation(g, a, group, role) for g, a in zip(block, advantages, strict=True)]
    return model, policy, samples


def test_sampling_logprobs_from_the_policy_give_unit_ratios(tokenizer, tmp_path):
    """Samples drawn by the policy at temperature 0.6: TRL's log-probs at that temperature match the
    sampler's, so the ratio against them is 1 and the update equals TRL's own on-policy update."""
    results = {}
    for mode in ("sampling", "recompute"):
        model, policy, samples = policy_samples(tokenizer, "Design environment")
        config = TrainConfig(
            learning_rate=1e-3,
            group_size=G,
            per_device_train_batch_size=8,
            temperature=0.6,
            old_logprobs=mode,
            output_dir=str(tmp_path),
        )
        before = weights(model)
        metrics = GRPOUpdater.for_policy(policy, config).update(samples)
        assert metrics["train/clip_ratio/region_mean"] == 0.0
        results[mode] = metrics["train/grad_norm"], model
    (norm_s, model_s), (norm_r, model_r) = results["sampling"], results["recompute"]
    assert norm_s == pytest.approx(norm_r, rel=1e-5)
    assert relative_difference(model_s, model_r, before) < 1e-3


def test_truncated_importance_sampling_weighs_each_token_by_the_capped_ratio_to_the_sampler(
    tokenizer, tmp_path
):
    """tis_cap with recomputed old log-probs: every token's loss times min(pi_old / pi_sampler, cap). With
    the sampler's own log-probs the weight is 1 (the plain update); a sampler whose log-probs are all 0.5
    higher gives exp(-0.5) everywhere, one 2 lower exp(2) capped at 2: the gradient scales by exactly that."""
    norms = {}
    for name, shift, cap in (
        ("plain", 0.0, None),
        ("same", 0.0, 2.0),
        ("higher", 0.5, 2.0),
        ("lower", -2.0, 2.0),
    ):
        _, policy, samples = policy_samples(tokenizer, "Play game")
        samples = [dataclasses.replace(x, logprobs=tuple(lp + shift for lp in x.logprobs)) for x in samples]
        config = TrainConfig(
            learning_rate=1e-3,
            group_size=G,
            per_device_train_batch_size=8,
            old_logprobs="recompute",
            tis_cap=cap,
            output_dir=str(tmp_path / name),
        )
        norms[name] = GRPOUpdater.for_policy(policy, config).update(samples)["train/grad_norm"]
    assert norms["same"] == pytest.approx(norms["plain"], rel=1e-4)
    assert norms["higher"] == pytest.approx(norms["plain"] * math.exp(-0.5), rel=1e-4)
    assert norms["lower"] == pytest.approx(norms["plain"] * 2.0, rel=1e-4)


@pytest.mark.parametrize(
    ("settings", "warned"),
    [
        ({}, True),
        ({"old_logprobs": "recompute", "tis_cap": 2.0}, True),
        ({"old_logprobs": "recompute"}, False),
    ],
)
def test_samples_without_sampler_logprobs_are_named_where_the_update_uses_them(
    make_updater, caplog, settings, warned
):
    samples = [dataclasses.replace(s, logprobs=(0.0,) * len(s.logprobs)) for s in make_samples()]
    with caplog.at_level("WARNING", logger="spade_rl.train.updater"):
        make_updater(**settings).update(samples)
    assert (
        any("importance ratios against the sampler are wrong" in r.getMessage() for r in caplog.records)
        == warned
    )


def test_truncated_importance_sampling_needs_recomputed_old_logprobs():
    with pytest.raises(ValueError, match=r"tis_cap .* needs old_logprobs = 'recompute'"):
        TrainConfig(tis_cap=2.0)
    with pytest.raises(ValueError, match=r"tis_cap"):
        TrainConfig(tis_cap=0.5, old_logprobs="recompute")
    assert TrainConfig(tis_cap=2.0, old_logprobs="recompute").tis_cap == 2.0


def test_adam_betas_reach_the_optimiser(make_updater):
    updater = make_updater(adam_beta1=0.9, adam_beta2=0.98, weight_decay=0.1)
    updater.update(make_samples())
    [group, *_] = updater.trainer.optimizer.param_groups
    assert group["betas"] == (0.9, 0.98)
    assert any(g["weight_decay"] == 0.1 for g in updater.trainer.optimizer.param_groups)


@pytest.mark.parametrize(
    ("bf16", "setting", "expected"), [(True, None, True), (False, None, False), (True, False, False)]
)
def test_the_output_head_stays_float32_under_bf16_unless_told(make_updater, bf16, setting, expected):
    """Generation keeps its head in float32 under autocast; by default the update scores with it too."""
    updater = make_updater(bf16=bf16, cast_lm_head_to_fp32=setting)
    assert updater.trainer.args.bf16 is bf16
    assert updater.trainer.args.cast_lm_head_to_fp32 is expected
    metrics = updater.update(make_samples())
    assert metrics["train/grad_norm"] > 0


def test_kl_term_against_a_reference_copy(make_updater):
    updater = make_updater(beta=0.05)
    reference = updater.trainer.ref_model
    assert reference is not None and reference is not updater.model
    frozen = weights(reference)
    first = updater.update(make_samples(seed=1))
    second = updater.update(make_samples(seed=2))
    assert first["train/kl"] == pytest.approx(0.0, abs=1e-6)  # the model still equals its reference
    assert second["train/kl"] > 0
    assert max_change(reference, frozen) == 0.0


@pytest.mark.slow
def test_lora_trains_the_adapter_inside_the_policy_model(make_updater, tokenizer, tmp_path):
    pytest.importorskip("peft")
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    updater = make_updater(model, use_lora=True, lora_rank=4, lora_target_modules=("q_proj", "v_proj"))
    probe = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        logits_before = model(probe).logits
    updater.update(make_samples())
    with torch.no_grad():
        logits_after = model(probe).logits  # the policy's own object now carries the adapter
    assert not torch.allclose(logits_before, logits_after)
    for name, p in updater.model.named_parameters():
        if "lora_" not in name:
            assert not p.requires_grad
    updater.save(tmp_path / "lora")
    expected = updater.update(make_samples(seed=5))
    fresh, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    resumed = make_updater(fresh, use_lora=True, lora_rank=4, lora_target_modules=("q_proj", "v_proj"))
    resumed.load(tmp_path / "lora")
    got = resumed.update(make_samples(seed=5))
    assert got["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(fresh(probe).logits, model(probe).logits)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_length_sorted_trimmed_micro_batches_give_trl_s_update(make_updater, monkeypatch, loss_type):
    """Our micro-batches (rows sorted by length, padding cut) against TRL's (all rows padded to the longest,
    shuffled): the same loss, gradient norm and weights for the losses normalised over the whole batch."""
    ours = make_updater(loss_type=loss_type, gradient_accumulation_steps=3)
    before = weights(ours.model)
    one = ours.update(mixed_length_samples())
    monkeypatch.setattr(SampleServingGRPOTrainer, "_prepare_inputs", GRPOTrainer._prepare_inputs)
    trl_path = make_updater(loss_type=loss_type, gradient_accumulation_steps=3)
    two = trl_path.update(mixed_length_samples())
    assert one["train/grad_norm"] == pytest.approx(two["train/grad_norm"], rel=1e-5)
    # float rounding only (padding changes the attention kernel's sums); a row lost or counted twice: ~1
    assert relative_difference(ours.model, trl_path.model, before) < 1e-3


def test_scoring_only_the_completion_gives_the_update_of_scoring_every_position(make_updater, monkeypatch):
    """The output head on the completion's positions only (what TRL does on Triton devices) against TRL's
    CPU path, every position of the sequence: the same loss, gradient norm, metrics and weights."""
    import trl.trainer.utils as trl_utils

    from spade_rl.train import trl_engine

    scored = []
    original = trl_utils._ChunkedLogProbFunction.apply

    def counting(hidden, *args):
        scored.append(hidden.shape[0])
        return original(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting)
    compact = make_updater(gradient_accumulation_steps=3)
    before = weights(compact.model)
    one = compact.update(mixed_length_samples())
    compact_positions = sum(scored)
    scored.clear()
    monkeypatch.setattr(trl_engine, "score_completions_only", contextlib.nullcontext)
    every = make_updater(gradient_accumulation_steps=3)
    two = every.update(mixed_length_samples())
    assert compact_positions < sum(scored)  # fewer positions through the head
    assert one["train/loss"] == pytest.approx(two["train/loss"], rel=1e-5, abs=1e-7)
    assert one["train/grad_norm"] == pytest.approx(two["train/grad_norm"], rel=1e-5)
    assert one["train/entropy"] == pytest.approx(two["train/entropy"], rel=1e-5)
    assert relative_difference(compact.model, every.model, before) < 1e-3


def test_checkpointing_only_long_rows_gives_the_same_update(make_updater, monkeypatch):
    """train.checkpoint_rows_longer_than: micro-batches wider than it run with activation checkpointing,
    the others without; the update is the one without any checkpointing."""
    switched = []
    original = SampleServingGRPOTrainer._prepare_inputs

    def recording(self, batch):
        micro = original(self, batch)
        switched.append(self.checkpointed_layers[0].gradient_checkpointing)
        return micro

    monkeypatch.setattr(SampleServingGRPOTrainer, "_prepare_inputs", recording)
    selective = make_updater(gradient_accumulation_steps=3, checkpoint_rows_longer_than=40)
    before = weights(selective.model)
    one = selective.update(mixed_length_samples())
    assert True in switched and False in switched  # the long designer rows only
    monkeypatch.setattr(SampleServingGRPOTrainer, "_prepare_inputs", original)
    plain = make_updater(gradient_accumulation_steps=3)
    two = plain.update(mixed_length_samples())
    assert one["train/loss"] == pytest.approx(two["train/loss"], rel=1e-5, abs=1e-7)
    assert one["train/grad_norm"] == pytest.approx(two["train/grad_norm"], rel=1e-5)
    assert relative_difference(selective.model, plain.model, before) < 1e-3
    with pytest.raises(ValueError, match="checkpoint_rows_longer_than"):
        TrainConfig(checkpoint_rows_longer_than=-1)


def test_release_unused_memory_hands_pages_back_or_does_nothing():
    from spade_rl.memory import _malloc_trim, release_unused_memory

    release_unused_memory()  # never raises, with or without glibc
    if sys.platform.startswith("linux") and Path("/lib/x86_64-linux-gnu/libc.so.6").exists():
        assert _malloc_trim() is not None


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_update(make_updater):
    plain, checkpointed = make_updater(), make_updater(gradient_checkpointing=True)
    before = weights(plain.model)
    one, two = plain.update(make_samples()), checkpointed.update(make_samples())
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-5)
    assert relative_difference(plain.model, checkpointed.model, before) < 1e-4


def test_wide_micro_steps_hand_freed_memory_back_without_changing_the_update(make_updater, monkeypatch):
    """After each micro-step of rows at least TRIM_AFTER_TOKENS wide (and only those) the update calls
    release_unused_memory; the step is the same as without it."""
    from spade_rl.train import trl_engine

    samples = mixed_length_samples()  # one designer group of 70-token rows, two agent groups of 11
    plain = make_updater(per_device_train_batch_size=1, gradient_accumulation_steps=12)
    before = weights(plain.model)
    expected = plain.update(samples)
    widths, trims = [], []
    prepare = trl_engine.SampleServingGRPOTrainer._prepare_inputs

    def recorded(self, batch):
        micro = prepare(self, batch)
        widths.append(self.micro_width)
        return micro

    monkeypatch.setattr(trl_engine.SampleServingGRPOTrainer, "_prepare_inputs", recorded)
    monkeypatch.setattr(trl_engine, "TRIM_AFTER_TOKENS", 50)
    monkeypatch.setattr(trl_engine, "release_unused_memory", lambda: trims.append(widths[-1]))
    trimmed = make_updater(per_device_train_batch_size=1, gradient_accumulation_steps=12)
    metrics = trimmed.update(samples)
    assert sorted(widths, reverse=True)[:4] == [70] * 4 and min(widths) < 50
    assert trims == [70] * 4  # after the designer rows' micro-steps only
    assert metrics["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-6)
    assert relative_difference(trimmed.model, plain.model, before) < 1e-4


def test_filler_micro_steps_are_counted_but_not_computed(make_updater, monkeypatch):
    """Micro-batches of filler rows only (no trained token) skip their forward and backward pass: the
    step, the loss and TRL's micro-step count are those of computing them."""
    from spade_rl.train import trl_engine

    samples = make_samples(seed=3)  # two groups of 4: 8 real rows of 12, 4 filler rows
    settings = dict(per_device_train_batch_size=1, gradient_accumulation_steps=12)
    computed = []
    compute = trl_engine.SampleServingGRPOTrainer.compute_loss

    def counted(self, model, inputs, *args, **kwargs):
        computed.append(int((inputs["completion_mask"] * inputs["tool_mask"]).sum()))  # trained tokens
        return compute(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(trl_engine.SampleServingGRPOTrainer, "compute_loss", counted)
    with monkeypatch.context() as every:
        every.setattr(trl_engine, "_trains_nothing", lambda trainer: False)
        plain = make_updater(**settings)
        before = weights(plain.model)
        expected = plain.update(samples)
    assert len(computed) == 12 and computed.count(0) == 4
    computed.clear()
    skipping = make_updater(**settings)
    metrics = skipping.update(samples)
    assert len(computed) == 8 and 0 not in computed
    assert trl_engine.micro_step_count(skipping.trainer) == trl_engine.micro_step_count(plain.trainer) == 12
    assert metrics["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-6)
    assert metrics["train/grad_norm"] == pytest.approx(expected["train/grad_norm"], rel=1e-5)
    assert relative_difference(skipping.model, plain.model, before) < 1e-4
    second = skipping.update(make_samples(seed=4))  # the next update generates and skips alike
    assert len(computed) == 16 and trl_engine.micro_step_count(skipping.trainer) == 24
    assert second["train/step"] == 2.0


def test_environment_tokens_skip_the_output_head_without_changing_the_step(make_updater, monkeypatch):
    """Only trained tokens are scored by the output head: environment tokens (mask 0) are context, their
    log-probs masked out of the loss, so the step and the metrics are those of scoring every position."""
    from spade_rl.train import trl_engine

    samples = make_samples(seed=5, env_tail=4)  # agent rows alternate model and environment tokens
    scored = []
    fused = trl_engine.SampleServingGRPOTrainer._trained_logps_and_entropies

    def counted(self, model, input_ids, attention_mask, mask):
        logps, entropies = fused(self, model, input_ids, attention_mask, mask)
        scored.append(int((logps != 0).sum()))
        return logps, entropies

    monkeypatch.setattr(trl_engine.SampleServingGRPOTrainer, "_trained_logps_and_entropies", counted)
    with monkeypatch.context() as every:
        every.setattr(trl_engine.SampleServingGRPOTrainer, "score_trained_only", False)
        plain = make_updater()
        before = weights(plain.model)
        expected = plain.update(samples)
    all_positions = sum(scored)
    scored.clear()
    trained = make_updater()
    metrics = trained.update(samples)
    trained_tokens = sum(sum(s.completion_mask) for s in samples)
    assert sum(scored) == trained_tokens < all_positions
    for key in ("train/loss", "train/grad_norm", "train/entropy", "train/clip_ratio/region_mean"):
        assert metrics[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
    assert relative_difference(trained.model, plain.model, before) < 1e-4
