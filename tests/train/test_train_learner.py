"""The learner (spade_rl.train.learner): real steps on the tiny model (CPU): what a step changes and what it
does not, the batch without filler rows, one update whatever the passes, checkpoints, the old log-probs,
the output head, KL, LoRA, activation checkpointing, the supervised step."""

from __future__ import annotations

import dataclasses
import json
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

from spade_rl.policy import SamplingSettings, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rewards import zscore_advantages
from spade_rl.train import Sample, TrainConfig, sample_from_generation, scoring
from spade_rl.train import learner as learner_module
from spade_rl.train.learner import Learner


def test_one_update_changes_the_weights_the_policy_generates_with(tokenizer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    learner = Learner.for_policy(
        policy, TrainConfig(learning_rate=1e-3, group_size=G, per_device_train_batch_size=8)
    )
    assert learner.model is policy.model and learner.rows_per_update == 8
    before = weights(model)
    metrics = learner.step(make_samples())
    assert max_change(model, before) > 1e-4  # the policy's own model object was trained
    assert learner.steps == 1 and metrics["train/step"] == 1.0
    assert metrics["train/designer/samples"] == 4 and metrics["train/agent/samples"] == 4
    assert metrics["train/passes"] == 1 and metrics["train/grad_norm"] > 0
    for key in ("train/loss", "train/entropy", "train/clip_ratio/region_mean", "time/train_s"):
        assert key in metrics and metrics[key] == metrics[key]  # present and not NaN
    assert not model.training  # handed back in eval mode; the policy generates with it as before
    [generation] = policy.generate([[{"role": "user", "content": "Hi"}]], SamplingSettings(max_new_tokens=4))
    assert len(generation.completion_token_ids) >= 1
    assert list(tmp_path.iterdir()) == []  # nothing written to the working directory
    learner.close()


def test_zero_advantages_leave_the_weights_unchanged(make_learner):
    learner = make_learner()
    before = weights(learner.model)
    metrics = learner.step(make_samples(scale={"designer": 0.0, "agent": 0.0}))
    # Exactly: the loss is A * ratio with A = 0, so every gradient is 0, and AdamW's first step from zero
    # moments (no weight decay) moves nothing. After earlier steps the moments would still move the weights.
    assert max_change(learner.model, before) == 0.0
    assert metrics["train/grad_norm"] == 0.0


def test_masked_tokens_get_no_gradient(make_learner):
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
    first, second = make_learner(), make_learner()
    before = weights(first.model)
    one, two = first.step(base), second.step(other)
    assert max_change(first.model, before) > 1e-4
    # Equal up to float32 rounding (the kernels sum in another order when other values sit beside them).
    assert two["train/loss"] == pytest.approx(one["train/loss"], rel=1e-6)
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-6)
    assert relative_difference(first.model, second.model, before) < 1e-4
    silent = [Sample(s.role, s.prompt_ids, s.completion_ids, [0] * len(s.completion_ids),
                     s.logprobs, s.advantage, s.group) for s in base]  # fmt: skip
    third = make_learner()
    before = weights(third.model)
    third.step(silent)
    assert max_change(third.model, before) == 0.0


def test_the_advantages_given_are_the_advantages_used(make_learner):
    """Advantages are an input of the loss: scaling one sample's advantage scales its gradient exactly, an
    uncentred group is trained as given (the learner subtracts nothing)."""
    samples = make_samples(roles=("agent",), scale={"agent": 0.0})
    one = dataclasses.replace(samples[0], advantage=1.0)
    three = dataclasses.replace(samples[0], advantage=3.0)
    norms = []
    for row in (one, three):
        learner = make_learner(old_logprobs="recompute")  # ratio 1: the gradient is linear in A
        norms.append(learner.step([row, *samples[1:]])["train/grad_norm"])
    assert norms[1] == pytest.approx(3 * norms[0], rel=1e-5)


@pytest.mark.parametrize("role", ["designer", "agent"])
def test_each_role_alone_moves_the_weights(make_learner, role):
    other = "agent" if role == "designer" else "designer"
    learner = make_learner()
    before = weights(learner.model)
    metrics = learner.step(make_samples(scale={other: 0.0}))
    assert max_change(learner.model, before) > 1e-4 and metrics["train/grad_norm"] > 0
    assert metrics[f"train/{role}/advantage_abs_mean"] > 0
    assert metrics[f"train/{other}/advantage_abs_mean"] == 0


def test_a_batch_holds_its_samples_only_whatever_the_capacity(make_learner):
    """8 samples in a learner of 8 rows per step and in one of 16: the same passes, loss, gradient and
    weights (no filler rows); more samples than the capacity are refused with the settings named."""
    samples = make_samples()
    full = make_learner(per_device_train_batch_size=4, gradient_accumulation_steps=2)
    roomy = make_learner(per_device_train_batch_size=4, gradient_accumulation_steps=4)
    before = weights(full.model)
    one, two = full.step(samples), roomy.step(samples)
    assert one["train/passes"] == two["train/passes"] == 2
    assert two["train/loss"] == one["train/loss"] and two["train/grad_norm"] == one["train/grad_norm"]
    assert relative_difference(full.model, roomy.model, before) == 0.0
    with pytest.raises(ValueError, match="more than the 8 rows of one step"):
        full.step(make_samples(roles=("agent", "designer", "agent")))
    with pytest.raises(ValueError, match="no samples"):
        full.step([])


def test_save_and_load_continue_identically(make_learner, tmp_path):
    first = make_learner()
    first.step(make_samples(seed=1))
    first.save(tmp_path / "ckpt")
    expected = first.step(make_samples(seed=2))
    resumed = make_learner()  # a fresh model from the same seed: the checkpoint supplies the trained weights
    resumed.load(tmp_path / "ckpt")
    assert resumed.steps == 1
    got = resumed.step(make_samples(seed=2))
    assert resumed.steps == 2
    for a, b in zip(first.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert got["train/loss"] == expected["train/loss"]
    assert got["train/grad_norm"] == expected["train/grad_norm"]
    with pytest.raises(ValueError, match="use_lora=False, this learner has True"):
        make_learner(use_lora=True).load(tmp_path / "ckpt")
    meta = json.loads((tmp_path / "ckpt" / "spade_train.json").read_text())
    (tmp_path / "ckpt" / "spade_train.json").write_text(json.dumps({**meta, "format": 1}))
    with pytest.raises(ValueError, match="format 1 was written by the TRL-driven updater"):
        make_learner().load(tmp_path / "ckpt")


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
    """Samples drawn by the policy at temperature 0.6: the learner's log-probs at that temperature match the
    sampler's, so the ratio against them is 1 and the step equals the on-policy (recomputed) one."""
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
        metrics = Learner.for_policy(policy, config).step(samples)
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
        norms[name] = Learner.for_policy(policy, config).step(samples)["train/grad_norm"]
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
    make_learner, caplog, settings, warned
):
    samples = [dataclasses.replace(s, logprobs=(0.0,) * len(s.logprobs)) for s in make_samples()]
    with caplog.at_level("WARNING", logger="spade_rl.train.learner"):
        make_learner(**settings).step(samples)
    assert (
        any("importance ratios against the sampler are wrong" in r.getMessage() for r in caplog.records)
        == warned
    )


def test_a_certain_policy_s_zero_logprobs_are_counted_as_certain_not_as_missing(tokenizer, tmp_path, caplog):
    """A policy certain of every token it samples gets sampler log-probs of exactly 0.0 (float32 rounds
    them): those samples carry their log-probs, so no warning and ``train/no_logprobs`` 0; they count in
    ``train/certain_samples``, the mark of a collapsed policy. Random completions whose log-probs are
    zeroed (a sampler that recorded none) count the other way."""
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(1e4)  # every next token's top choice has p ~ 1
    policy = TransformersPolicy(model, tokenizer)
    chats = [[{"role": "user", "content": f"Play game {i}."}] for i in range(2)]
    generations = policy.generate(chats, SamplingSettings(max_new_tokens=6, temperature=1.0, seed=3, n=G))
    advantages = zscore_advantages([float(i % 2) + 0.1 * i for i in range(G)]).advantages
    samples = [
        sample_from_generation(g, advantages[i % G], i // G, "agent") for i, g in enumerate(generations)
    ]
    assert all(lp == 0.0 for s in samples for lp in s.logprobs)
    config = TrainConfig(
        learning_rate=1e-3, group_size=G, per_device_train_batch_size=8, output_dir=str(tmp_path)
    )
    with caplog.at_level("WARNING", logger="spade_rl.train.learner"):
        metrics = Learner.for_policy(policy, config).step(samples)
    assert not any("importance ratios" in r.getMessage() for r in caplog.records)
    assert (metrics["train/no_logprobs"], metrics["train/certain_samples"]) == (0.0, float(len(samples)))

    zeroed = [dataclasses.replace(s, logprobs=(0.0,) * len(s.logprobs)) for s in make_samples()]
    metrics = Learner.for_policy(
        TransformersPolicy(tiny_random_model(seed=0, tokenizer=tokenizer)[0], tokenizer), config
    ).step(zeroed)
    assert (metrics["train/no_logprobs"], metrics["train/certain_samples"]) == (float(len(zeroed)), 0.0)


def test_truncated_importance_sampling_needs_recomputed_old_logprobs():
    with pytest.raises(ValueError, match=r"tis_cap .* needs old_logprobs = 'recompute' or 'auto'"):
        TrainConfig(tis_cap=2.0, old_logprobs="sampling")
    with pytest.raises(ValueError, match=r"tis_cap"):
        TrainConfig(tis_cap=0.5, old_logprobs="recompute")
    assert TrainConfig(tis_cap=2.0, old_logprobs="recompute").tis_cap == 2.0


def test_auto_old_logprobs_recompute_with_truncated_importance_sampling_where_another_engine_samples():
    """ "auto": the trainer's own samples keep their log-probs as the old ones; another engine's are
    recomputed, with truncated importance sampling at 2 (slime's --tis-clip default) or the given cap. A cap
    that would not be used (the trainer samples itself) is refused."""
    auto = TrainConfig()
    assert auto.old_logprobs == "auto"
    assert (auto.resolved(sampler_is_trainer=True).old_logprobs, auto.resolved(True).tis_cap) == (
        "sampling",
        None,
    )
    served = auto.resolved(sampler_is_trainer=False)
    assert (served.old_logprobs, served.tis_cap) == ("recompute", 2.0)
    assert TrainConfig(tis_cap=3.0).resolved(sampler_is_trainer=False).tis_cap == 3.0
    with pytest.raises(ValueError, match=r"tis_cap = 3.0 .* trainer samples itself"):
        TrainConfig(tis_cap=3.0).resolved(sampler_is_trainer=True)
    explicit = TrainConfig(old_logprobs="recompute")  # TIS off: given, not resolved
    assert explicit.resolved(sampler_is_trainer=False) == explicit


def test_adam_betas_reach_the_optimiser(make_learner):
    learner = make_learner(adam_beta1=0.9, adam_beta2=0.98, weight_decay=0.1)
    learner.step(make_samples())
    [decay, other] = learner.optimizer.param_groups
    assert decay["betas"] == (0.9, 0.98)
    assert decay["weight_decay"] == 0.1 and other["weight_decay"] == 0.0  # not on biases and norms
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in other["params"])


@pytest.mark.parametrize(
    ("bf16", "setting", "expected"), [(True, None, True), (False, None, False), (True, False, False)]
)
def test_the_output_head_stays_float32_under_bf16_unless_told(make_learner, bf16, setting, expected):
    """Generation keeps its head in float32 under autocast; by default the update scores with it too."""
    learner = make_learner(bf16=bf16, cast_lm_head_to_fp32=setting)
    assert learner.bf16 is bf16
    assert learner.head_fp32 is expected
    metrics = learner.step(make_samples())
    assert metrics["train/grad_norm"] > 0


def test_kl_term_against_a_reference_copy(make_learner):
    learner = make_learner(beta=0.05)
    reference = learner.reference
    assert reference is not None and reference is not learner.model
    frozen = weights(reference)
    first = learner.step(make_samples(seed=1))
    second = learner.step(make_samples(seed=2))
    assert first["train/kl"] == pytest.approx(0.0, abs=1e-6)  # the model still equals its reference
    assert second["train/kl"] > 0
    assert max_change(reference, frozen) == 0.0


@pytest.mark.slow
def test_lora_trains_the_adapter_inside_the_policy_model(make_learner, tokenizer, tmp_path):
    pytest.importorskip("peft")
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    learner = make_learner(model, use_lora=True, lora_rank=4, lora_target_modules=("q_proj", "v_proj"))
    probe = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        logits_before = model(probe).logits
    learner.step(make_samples())
    with torch.no_grad():
        logits_after = model(probe).logits  # the policy's own object now carries the adapter
    assert not torch.allclose(logits_before, logits_after)
    for name, p in learner.model.named_parameters():
        if "lora_" not in name:
            assert not p.requires_grad
    learner.save(tmp_path / "lora")
    expected = learner.step(make_samples(seed=5))
    fresh, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    resumed = make_learner(fresh, use_lora=True, lora_rank=4, lora_target_modules=("q_proj", "v_proj"))
    resumed.load(tmp_path / "lora")
    got = resumed.step(make_samples(seed=5))
    assert got["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(fresh(probe).logits, model(probe).logits)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_one_step_whatever_the_passes(make_learner, loss_type):
    """Rows of mixed lengths in one pass, in passes of 5 and in passes of one row each (sorted by length,
    each cut to its widest row): the same loss, gradient and weights for the losses normalised over the
    whole batch."""
    samples = mixed_length_samples()  # 12 rows: a designer group of 70-token rows, two agent groups of 11
    results = []
    for rows in (12, 5, 1):
        learner = make_learner(
            loss_type=loss_type, per_device_train_batch_size=rows, gradient_accumulation_steps=12
        )
        before = weights(learner.model)
        results.append((learner.step(samples), learner.model))
        assert results[-1][0]["train/passes"] == -(-12 // rows)
    (one, whole), *others = results
    for metrics, model in others:
        assert metrics["train/loss"] == pytest.approx(one["train/loss"], rel=1e-5, abs=1e-7)
        assert metrics["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-5)
        # AdamW's first step is about lr * sign(g): elements with a gradient near 0 differ by rounding
        assert relative_difference(model, whole, before) < 1e-3


def full_logps(model, sample, temperature):
    """The tempered log-prob of every completion token of one sample, from the model's full logits."""
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(sample.prompt_ids) - 1 : -1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(sample.completion_ids)[:, None])[:, 0]


def test_only_the_trained_tokens_go_through_the_output_head(make_learner, monkeypatch):
    """The head projects exactly the trained tokens (environment tokens, prompts and padding are context
    only), and their log-probs are those of the model's full logits, row by row."""
    samples = make_samples(seed=5, env_tail=4)  # agent rows alternate model and environment tokens
    learner = make_learner(per_device_train_batch_size=8, temperature=0.7)
    projected, seen = [], []
    chunk = scoring._chunk_logps

    def counted(hidden, *args):
        projected.append(hidden.shape[0])
        return chunk(hidden, *args)

    trained_logps = learner_module.trained_logps

    def recorded(*args, **kwargs):
        out = trained_logps(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(scoring, "_chunk_logps", counted)
    monkeypatch.setattr(learner_module, "trained_logps", recorded)
    model = learner.model
    expected = [full_logps(model, s, 0.7) for s in samples]
    learner.step(samples)
    # each chunk is projected in the forward pass and again in the backward pass (it keeps no logits)
    assert sum(projected) == 2 * sum(sum(s.completion_mask) for s in samples)
    [scored] = seen
    ours = scored.logps.detach()[scored.mask.bool()]
    # the batch is sorted by length, longest first (stable): designer rows, then agent rows
    order = sorted(
        range(len(samples)), key=lambda i: -(len(samples[i].prompt_ids) + len(samples[i].completion_ids))
    )
    theirs = torch.cat(
        [expected[i][torch.tensor(samples[i].completion_mask, dtype=torch.bool)] for i in order]
    )
    # rows interleave in the mask's row-major order: compare as sorted multisets of values per batch
    torch.testing.assert_close(ours.sort().values, theirs.sort().values, rtol=1e-5, atol=1e-5)


def test_checkpointing_only_long_rows_gives_the_same_update(make_learner, monkeypatch):
    """train.checkpoint_rows_longer_than: passes wider than it run with activation checkpointing, the
    others without; the update is the one without any checkpointing."""
    switched = []
    trained_logps = learner_module.trained_logps

    def recording(model, micro, *args, **kwargs):
        switched.append(selective.layers[0].gradient_checkpointing)
        return trained_logps(model, micro, *args, **kwargs)

    monkeypatch.setattr(learner_module, "trained_logps", recording)
    selective = make_learner(gradient_accumulation_steps=3, checkpoint_rows_longer_than=40)
    before = weights(selective.model)
    one = selective.step(mixed_length_samples())
    assert True in switched and False in switched  # the long designer rows only
    plain = make_learner(gradient_accumulation_steps=3)
    two = plain.step(mixed_length_samples())
    assert one["train/loss"] == pytest.approx(two["train/loss"], rel=1e-5, abs=1e-7)
    assert one["train/grad_norm"] == pytest.approx(two["train/grad_norm"], rel=1e-5)
    assert relative_difference(selective.model, plain.model, before) < 1e-3
    selective.close()  # hands the model back without the checkpointing it installed
    assert not any(layer.gradient_checkpointing for layer in selective.layers)
    with pytest.raises(ValueError, match="checkpoint_rows_longer_than"):
        TrainConfig(checkpoint_rows_longer_than=-1)


def test_release_unused_memory_hands_pages_back_or_does_nothing():
    from spade_rl.memory import _malloc_trim, release_unused_memory

    release_unused_memory()  # never raises, with or without glibc
    if sys.platform.startswith("linux") and Path("/lib/x86_64-linux-gnu/libc.so.6").exists():
        assert _malloc_trim() is not None


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_update(make_learner):
    plain, checkpointed = make_learner(), make_learner(gradient_checkpointing=True)
    before = weights(plain.model)
    one, two = plain.step(make_samples()), checkpointed.step(make_samples())
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-5)
    assert relative_difference(plain.model, checkpointed.model, before) < 1e-4


def test_wide_passes_hand_freed_memory_back_without_changing_the_update(make_learner, monkeypatch):
    """After each pass over rows at least TRIM_AFTER_TOKENS wide (and only those) the learner calls
    release_unused_memory; the step is the same as without it."""
    samples = mixed_length_samples()  # one designer group of 70-token rows, two agent groups of 11
    plain = make_learner(per_device_train_batch_size=1, gradient_accumulation_steps=12)
    before = weights(plain.model)
    expected = plain.step(samples)
    trims = []
    monkeypatch.setattr(learner_module, "TRIM_AFTER_TOKENS", 50)
    monkeypatch.setattr(learner_module, "release_unused_memory", lambda: trims.append(1))
    trimmed = make_learner(per_device_train_batch_size=1, gradient_accumulation_steps=12)
    metrics = trimmed.step(samples)
    assert len(trims) == 4  # after the designer rows' passes only
    assert metrics["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-6)
    assert relative_difference(trimmed.model, plain.model, before) < 1e-4


def test_passes_without_a_trained_token_are_not_computed(make_learner, monkeypatch):
    """A micro-batch whose rows train nothing (episodes the environment ended before the model wrote) is
    skipped in one process: the step is the one of computing it (its loss and gradient are exactly 0)."""
    samples = make_samples(seed=3, roles=("designer", "agent", "agent"))
    silent = [dataclasses.replace(s, completion_mask=(0,) * len(s.completion_mask)) for s in samples[8:]]
    samples = samples[:8] + silent
    settings = dict(per_device_train_batch_size=4, gradient_accumulation_steps=3)
    skipping = make_learner(**settings)
    before = weights(skipping.model)
    metrics = skipping.step(samples)
    assert metrics["train/passes"] == 2
    monkeypatch.setattr(Learner, "_passes", lambda self, micro_batches: micro_batches)
    computing = make_learner(**settings)
    expected = computing.step(samples)
    assert expected["train/passes"] == 3
    assert metrics["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-6)
    assert metrics["train/grad_norm"] == pytest.approx(expected["train/grad_norm"], rel=1e-6)
    assert relative_difference(skipping.model, computing.model, before) < 1e-6


def test_the_supervised_step_is_the_cross_entropy_of_the_targets(tokenizer):
    """sft_step: its loss is the mean over rows of each row's mean cross-entropy on its target tokens, as
    the model's full logits give it; repeated, it learns the rows; with graduated checkpointing the same."""
    rows = [([5, 6, 7, 8, 9], [10, 11, 12]), ([20, 21], [22, 23, 24, 25, 26, 27])]
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    expected = 0.0
    for prompt, target in rows:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + target])).logits[0, len(prompt) - 1 : -1]
        expected += float(torch.nn.functional.cross_entropy(logits.float(), torch.tensor(target))) / 2
    config = dict(
        learning_rate=1e-2, group_size=2, per_device_train_batch_size=1, gradient_accumulation_steps=2
    )
    learner = Learner(model, tokenizer, TrainConfig(**config, max_grad_norm=0.0))
    losses = [learner.sft_step(rows) for _ in range(5)]
    assert losses[0] == pytest.approx(expected, rel=1e-5)
    assert losses[-1] < losses[0] / 2
    other, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    graduated = Learner(
        other, tokenizer, TrainConfig(**config, max_grad_norm=0.0, checkpoint_rows_longer_than=6)
    )
    assert [graduated.sft_step(rows, graduated=True) for _ in range(5)] == pytest.approx(losses, rel=1e-5)
    assert learner_module.checkpointed_layers(30, 640, 448) == 9
    assert learner_module.checkpointed_layers(30, 448, 448) == 0


def test_full_fine_tuning_of_bf16_weights_is_refused_below_1e_5_and_named_with_the_fix(tokenizer, caplog):
    """At lr 1e-6 every AdamW step of bfloat16 weights rounds away: refused, naming the fixes; at 1e-4 the
    steps survive in part: warned about."""
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    model.to(torch.bfloat16)
    geometry = {"group_size": 2, "per_device_train_batch_size": 2}
    with pytest.raises(ValueError, match=r"bfloat16 weights at learning rate 1e-06.*'float32'.*use_lora"):
        Learner(model, tokenizer, TrainConfig(learning_rate=1e-6, **geometry))
    with caplog.at_level("WARNING", logger="spade_rl.train.learner"):
        Learner(model, tokenizer, TrainConfig(learning_rate=1e-4, **geometry))
    assert any("load the model in float32" in r.getMessage() for r in caplog.records)


def test_a_checkpoint_s_model_folder_loads_as_a_model(make_learner, tmp_path):
    """checkpoints/iter-N/updater/model is what `spade-rl eval --model` loads: weights and tokenizer."""
    from spade_rl.policy.models import load_pretrained

    learner = make_learner()
    learner.step(make_samples())
    learner.save(tmp_path / "ckpt")
    model, tokenizer = load_pretrained(str(tmp_path / "ckpt" / "model"), device="cpu", dtype="float32")
    assert tokenizer.eos_token_id == learner.tokenizer.eos_token_id
    for (name, a), b in zip(model.state_dict().items(), learner.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_trl_s_own_loss_types_are_refused_with_where_to_find_them():
    with pytest.raises(ValueError, match=r"'sapo' is one of TRL's own losses.*spade_rl.interop.trl"):
        TrainConfig(loss_type="sapo")
    with pytest.raises(ValueError, match=r"is not one of \['grpo', 'dapo', 'dr_grpo', 'bnpo'\]"):
        TrainConfig(loss_type="ppo")
