"""The GRPO update (spade_rl.train): samples, batch layout, config, real TRL steps on the tiny model (CPU)."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trl import GRPOTrainer

from spade_rl.policy import Generation, SamplingSettings, default_tokenizer, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rewards import centred_advantages, zscore_advantages
from spade_rl.rollout import Episode, EpisodeSpec
from spade_rl.train import (
    GRPOUpdater,
    Sample,
    TrainConfig,
    assemble_batch,
    sample_from_episode,
    sample_from_generation,
)
from spade_rl.train.updater import SampleServingGRPOTrainer, split_by_length, trim_padding

G = 4  # group size in these tests


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model's matrices are too small to share among threads: one thread is faster, and much
    faster on a busy machine. Restored after this module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer():
    return default_tokenizer()


@pytest.fixture
def make_updater(tokenizer, tmp_path):
    """make_updater(model=None, **config) -> GRPOUpdater on a fresh tiny model (seed 0) unless given one."""

    def make(model=None, **overrides):
        if model is None:
            model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
        settings = dict(
            learning_rate=1e-3,
            num_generations=G,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            output_dir=str(tmp_path / "out"),
        )
        settings.update(overrides)
        return GRPOUpdater(model, tokenizer, TrainConfig(**settings))

    return make


def make_samples(
    seed=0,
    roles=("designer", "agent"),
    scale=None,
    prompt_len=8,
    completion_len=10,
    group_size=G,
    env_tail=0,
):
    """One group per role: random prompts and completions, advantages from spade_rl.rewards (agent z-scores,
    designer centred), times ``scale[role]`` (default 1). Agent completions alternate model and environment
    tokens, then end with ``env_tail`` environment tokens."""
    rng = random.Random(seed)
    scale = scale or {}
    samples = []
    for group, role in enumerate(roles):
        rewards = [rng.random() for _ in range(group_size)]
        advantages = (zscore_advantages if role == "agent" else centred_advantages)(rewards).advantages
        for advantage in advantages:
            mask = (
                [1] * completion_len
                if role == "designer"
                else [(i // 3) % 2 ^ 1 for i in range(completion_len)]
            )
            mask += [0] * env_tail
            samples.append(
                Sample(
                    role=role,
                    prompt_ids=[rng.randrange(5, 2000) for _ in range(prompt_len)],
                    completion_ids=[rng.randrange(5, 2000) for _ in mask],
                    completion_mask=mask,
                    logprobs=[-rng.uniform(5, 12) if m else 0.0 for m in mask],
                    advantage=advantage * scale.get(role, 1.0),
                    group=group,
                )
            )
    return samples


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


def max_change(model, before):
    return max(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before, strict=True))


def relative_difference(a, b, before):
    """||W_a - W_b|| / ||W_b - W_0||: how far two updates from the same W_0 differ, relative to an update.
    (AdamW's first step is about lr * g / |g|, so single elements whose gradient is ~0 can differ by up
    to lr between two runs that agree to float rounding; the norm ratio is the robust measure.)"""
    pairs = zip(a.parameters(), b.parameters(), before, strict=True)
    diff = step = 0.0
    for x, y, w in pairs:
        diff += float((x.detach() - y.detach()).pow(2).sum())
        step += float((y.detach() - w).pow(2).sum())
    return (diff / step) ** 0.5


# --- samples ------------------------------------------------------------------------------------------


def test_sample_from_episode_splits_at_the_prompt_length():
    episode = Episode(EpisodeSpec(source="class XEnv: ..."))
    episode.append([1, 2, 3], model=False)
    episode.append([4, 5], model=True, logprobs=[-0.5, -0.25])
    episode.append([6], model=False)
    episode.append([7], model=True, logprobs=[-1.0])
    episode.prompt_length = 3
    sample = sample_from_episode(episode, advantage=0.5, group=7)
    assert sample.role == "agent" and sample.group == 7 and sample.advantage == 0.5
    assert sample.prompt_ids == (1, 2, 3)
    assert sample.completion_ids == (4, 5, 6, 7)
    assert sample.completion_mask == (1, 1, 0, 1)
    assert sample.logprobs == (-0.5, -0.25, 0.0, -1.0)
    assert sample.model_tokens == 3


def test_sample_from_generation_trains_every_completion_token():
    generation = Generation("hi", (1, 2), (3, 4, 5), (-0.1, -0.2, -0.3), "stop")
    sample = sample_from_generation(generation, advantage=-1.0, group=0)
    assert sample.role == "designer"
    assert (sample.prompt_ids, sample.completion_ids) == ((1, 2), (3, 4, 5))
    assert sample.completion_mask == (1, 1, 1) and sample.logprobs == (-0.1, -0.2, -0.3)
    with pytest.raises(ValueError, match="no log-probabilities"):
        sample_from_generation(Generation("hi", (1,), (3,), None, "stop"), 0.0, 0)


def test_truncation_keeps_the_first_tokens():
    sample = Sample("agent", [1], [2, 3, 4, 5], [1, 0, 1, 1], [-1.0, 0.0, -2.0, -3.0], 0.0, 0)
    cut = sample.truncated(2)
    assert (cut.completion_ids, cut.completion_mask, cut.logprobs) == ((2, 3), (1, 0), (-1.0, 0.0))
    assert sample.truncated(4) is sample
    batch = assemble_batch([sample, sample], 2, 2, filler_token_id=0, max_completion_length=3)
    assert batch.completion_ids == [[2, 3, 4], [2, 3, 4]] and batch.truncated == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"role": "solver"}, "role"),
        ({"prompt_ids": []}, "prompt_ids must not be empty"),
        ({"completion_mask": [1, 2]}, "only 0"),
        ({"logprobs": [-1.0]}, "one entry per completion token"),
        ({"logprobs": [-1.0, float("nan")]}, "finite"),
        ({"advantage": float("inf")}, "advantage"),
        ({"completion_ids": [-1, 2]}, "non-negative"),
    ],
)
def test_sample_validation(change, message):
    fields = dict(
        role="agent", prompt_ids=[1], completion_ids=[2, 3], completion_mask=[1, 0], logprobs=[-1.0, 0.0]
    )
    fields.update(change)
    with pytest.raises(ValueError, match=message):
        Sample(advantage=fields.pop("advantage", 0.0), group=0, **fields)


# --- config -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"loss_type": "ppo"}, "loss_type"),
        ({"old_logprobs": "vllm"}, "old_logprobs"),
        ({"report_to": "mlflow"}, "report_to"),
        ({"lr_scheduler_type": "step"}, "lr_scheduler_type"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"epsilon_low": 1.0}, "epsilon_low"),
        ({"epsilon_high": -0.1}, "epsilon_high"),
        ({"beta": -0.001}, "beta"),
        ({"temperature": 0}, "temperature"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm"),
        ({"num_generations": 1}, "num_generations"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size"),
        ({"gradient_accumulation_steps": 1.5}, "gradient_accumulation_steps"),
        ({"max_completion_length": 0}, "max_completion_length"),
        ({"num_generations": 3, "per_device_train_batch_size": 4}, "multiple of num_generations"),
        ({"lora_target_modules": ()}, "lora_target_modules"),
        ({"lora_target_modules": ("q_proj", "lm_head")}, "lm_head"),
        ({"use_lora": "yes"}, "use_lora"),
        ({"bf16": "always"}, "bf16"),
        ({"cast_lm_head_to_fp32": "auto"}, "cast_lm_head_to_fp32"),
        ({"output_dir": ""}, "output_dir"),
        ({"report_to": "tensorboard"}, "output_dir must be set"),
    ],
)
def test_config_validation_names_the_key(change, key):
    with pytest.raises(ValueError, match=key):
        TrainConfig(**change)


def test_config_messages_list_the_allowed_values():
    with pytest.raises(ValueError, match=r"\['grpo', 'dapo', 'dr_grpo', 'bnpo'"):
        TrainConfig(loss_type="ppo")
    assert TrainConfig(per_device_train_batch_size=4, gradient_accumulation_steps=4).rows_per_update == 16


def test_importing_the_package_does_not_load_trl():
    code = "import sys, spade_rl.train; print('trl' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# --- batch layout -------------------------------------------------------------------------------------


def test_batch_puts_one_group_per_block_and_fills_the_rest():
    samples = make_samples(group_size=3)  # 3 designer + 3 agent samples, G = 4
    batch = assemble_batch(samples, num_generations=G, rows=12, filler_token_id=0)
    assert len(batch) == 12
    assert batch.roles == ["designer"] * 4 + ["agent"] * 8
    assert batch.filler == [False] * 3 + [True] + [False] * 3 + [True] * 5
    assert [batch.advantages[i] for i in (3, 7, 8, 11)] == [0.0] * 4
    assert all(batch.completion_mask[i] == [0] for i in (3, 7, 8, 11))  # fillers train nothing
    for block in range(3):  # every block's mean is 0, so TRL's centring changes nothing
        assert abs(sum(batch.advantages[block * G : block * G + G])) < 1e-9
    counts = batch.counts()
    assert counts["designer/samples"] == 3 and counts["agent/samples"] == 3 and counts["filler_rows"] == 6


def test_empty_completion_becomes_one_untrained_token():
    sample = Sample("agent", [1, 2], [], [], [], 0.0, 0)
    batch = assemble_batch([sample, sample], 2, 2, filler_token_id=9)
    assert batch.completion_ids == [[9], [9]] and batch.completion_mask == [[0], [0]]
    assert batch.no_logprobs == 0


def test_samples_without_logprobs_are_counted():
    with_lp = Sample("agent", [1], [2, 3], [1, 0], [-0.5, 0.0], 0.0, 0)
    without = Sample("agent", [1], [2, 3], [1, 0], [0.0, 0.0], 0.0, 0)
    assert assemble_batch([with_lp, without], 2, 2, filler_token_id=0).counts()["no_logprobs"] == 1


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (make_samples(roles=("agent", "agent", "designer")), "more than the 8 rows"),
        (make_samples(group_size=5, roles=("agent",)), "more than num_generations=4"),
        (make_samples(roles=("agent",))[:2] + make_samples(roles=("designer",))[2:], "mixes roles"),
        (make_samples(roles=("agent",), scale={"agent": 1.0})[:3], "not 0"),
    ],
)
def test_batch_errors_say_what_is_wrong(samples, message):
    with pytest.raises(ValueError, match=message):
        assemble_batch(samples, num_generations=G, rows=8, filler_token_id=0)


def test_a_group_split_in_two_places_is_an_error():
    a, b = make_samples(roles=("agent",), seed=1), make_samples(roles=("designer",), seed=2)
    b = [dataclasses.replace(s, group=1) for s in b]
    with pytest.raises(ValueError, match="consecutive"):
        assemble_batch(a[:2] + b + a[2:], num_generations=G, rows=16, filler_token_id=0)


# --- updates ------------------------------------------------------------------------------------------


def test_one_update_changes_the_weights_the_policy_generates_with(tokenizer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    seen = []
    updater = GRPOUpdater.for_policy(
        policy,
        TrainConfig(learning_rate=1e-3, num_generations=G, per_device_train_batch_size=8),
        after_step=lambda u: seen.append(u.step),
    )
    assert updater.model is policy.model and updater.rows_per_update == 8
    before = weights(model)
    metrics = updater.update(make_samples())
    assert max_change(model, before) > 1e-4  # the policy's own model object was trained
    assert updater.step == 1 and metrics["train/step"] == 1.0 and seen == [1]
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


def test_sampling_logprobs_from_the_policy_give_unit_ratios(tokenizer, tmp_path):
    """Samples drawn by the policy at temperature 0.6: TRL's log-probs at that temperature match the
    sampler's, so the ratio against them is 1 and the update equals TRL's own on-policy update."""
    results = {}
    for mode in ("sampling", "recompute"):
        model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
        policy = TransformersPolicy(model, tokenizer)
        chats = [[{"role": "user", "content": f"Design environment {i}."}] for i in range(2)]
        generations = policy.generate(
            chats, SamplingSettings(max_new_tokens=12, temperature=0.6, seed=3, n=G)
        )
        samples = []
        for group, role in enumerate(("designer", "agent")):
            block = generations[group * G : group * G + G]
            advantages = zscore_advantages([float(i % 2) + 0.1 * i for i in range(G)]).advantages
            samples += [
                sample_from_generation(g, a, group, role) for g, a in zip(block, advantages, strict=True)
            ]
        config = TrainConfig(
            learning_rate=1e-3,
            num_generations=G,
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
    base_names = set(model.state_dict())
    base = {name: p.detach().clone() for name, p in model.named_parameters()}
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
    with updater.merged_weights() as merged:
        assert set(merged) == base_names
        q = "model.layers.0.self_attn.q_proj.weight"
        assert not torch.equal(merged[q], base[q])
        assert torch.equal(merged["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    updater.save(tmp_path / "lora")
    expected = updater.update(make_samples(seed=5))
    fresh, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    resumed = make_updater(fresh, use_lora=True, lora_rank=4, lora_target_modules=("q_proj", "v_proj"))
    resumed.load(tmp_path / "lora")
    got = resumed.update(make_samples(seed=5))
    assert got["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(fresh(probe).logits, model(probe).logits)


def mixed_length_samples():
    """A long designer group and short agent groups: TRL alone would pad every row to the longest."""
    long = make_samples(seed=1, roles=("designer",), prompt_len=40, completion_len=30)
    short = make_samples(seed=2, roles=("agent", "agent"), prompt_len=6, completion_len=5)
    return long + [dataclasses.replace(s, group=s.group + 1) for s in short]


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

    from spade_rl.train import updater as updater_module

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
    monkeypatch.setattr(updater_module, "_score_completions_only", contextlib.nullcontext)
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
        switched.append(self._checkpointed_layers[0].gradient_checkpointing)
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


def test_split_by_length_and_trim_padding():
    pad = 0
    prompts = torch.tensor([[pad, pad, 5, 6], [pad, pad, pad, 7], [1, 2, 3, 4], [pad, 8, 9, 9]])
    prompt_mask = (prompts != pad).long()
    completions = torch.tensor([[5, pad, pad], [5, 6, 7], [5, 6, pad], [5, pad, pad]])
    completion_mask = (completions != pad).long()
    batch = {
        "prompt_ids": prompts,
        "prompt_mask": prompt_mask,
        "completion_ids": completions,
        "completion_mask": completion_mask,
        "old_per_token_logps": completion_mask.float() * -1,
        "advantages": torch.tensor([0.0, 1.0, 2.0, 3.0]),
        "num_items_in_batch": torch.tensor(7),
        "labels": ["a", "b", "c", "d"],
    }
    first, second = split_by_length(batch, 2)
    # lengths 3, 4, 6, 4: row 2 first, then rows 1 and 3 (ties keep their order), then row 0
    assert first["advantages"].tolist() == [2.0, 1.0] and first["labels"] == ["c", "b"]
    assert second["advantages"].tolist() == [3.0, 0.0] and second["labels"] == ["d", "a"]
    assert int(first["num_items_in_batch"]) == 7
    cut = trim_padding(second)
    assert cut["prompt_ids"].tolist() == [[8, 9, 9], [pad, 5, 6]]
    assert cut["completion_ids"].tolist() == [[5], [5]]
    assert cut["old_per_token_logps"].shape == (2, 1)
    assert cut["advantages"].tolist() == [3.0, 0.0]
    with pytest.raises(ValueError, match="equal micro-batches"):
        split_by_length(batch, 3)


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_update(make_updater):
    plain, checkpointed = make_updater(), make_updater(gradient_checkpointing=True)
    before = weights(plain.model)
    one, two = plain.update(make_samples()), checkpointed.update(make_samples())
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-5)
    assert relative_difference(plain.model, checkpointed.model, before) < 1e-4
