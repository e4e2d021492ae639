"""TRL as the oracle of the learner: the same batch through ``spade_rl.train.learner`` and through TRL's own
``GRPOTrainer.compute_loss`` gives the same loss, the same gradient of every weight and the same clip
metrics, for every loss type spade-rl computes, with and without the KL term, in one pass and in several.

TRL is only the oracle here (the learner never imports it): the batch is written in TRL's format by hand
(left-padded prompts, right-padded completions, the environment's tokens in ``tool_mask``), so a row lost,
a token shifted or a normaliser changed on either side shows up as a difference far above float rounding.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

pytest.importorskip("trl")

from spade_rl.policy import tiny_random_model
from spade_rl.rewards import zscore_advantages
from spade_rl.train import Sample, TrainConfig
from spade_rl.train.learner import Learner

TEMPERATURE = 0.6
# (loss type, KL coefficient, rows per pass): bnpo normalises per micro-batch by definition, so it compares
# in one pass only; the others in one pass and in three
ORACLE = [
    (loss_type, beta, rows)
    for loss_type in ("dapo", "grpo", "dr_grpo", "bnpo")
    for beta in (0.0, 0.04)
    for rows in ((8, 3) if loss_type != "bnpo" else (8,))
]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def oracle_samples() -> list[Sample]:
    """Two groups of four of different lengths, environment tokens inside and after the agent's turns, one
    row that trains nothing; sampler log-probs near enough to the model's that the clip binds at both ends
    and not everywhere."""
    rng = torch.Generator().manual_seed(11)

    def ids(n):
        return tuple(int(x) for x in torch.randint(5, 2000, (n,), generator=rng))

    advantages = zscore_advantages([0.1, 0.9, 0.4, 0.0]).advantages
    designer = [
        Sample("designer", ids(9 - k), ids(12 - 2 * k), (1,) * (12 - 2 * k), (0.0,) * (12 - 2 * k), a, 0)
        for k, a in enumerate(advantages)
    ]
    agent_mask = (1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0)  # the agent's turns, an observation, then the last one's
    agent = [
        Sample("agent", ids(5 + k), ids(11), agent_mask if k < 3 else (0,) * 11, (0.0,) * 11, -a, 1)
        for k, a in enumerate(advantages)
    ]
    return designer + agent


def with_model_logprobs(samples, model, shift_seed=0):
    """The samples with sampler log-probs = the model's own at TEMPERATURE plus noise of +-0.4."""
    generator = torch.Generator().manual_seed(shift_seed)
    out = []
    for s in samples:
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1].float() / TEMPERATURE
        own = logits.log_softmax(-1).gather(-1, torch.tensor(s.completion_ids)[:, None])[:, 0]
        noisy = own + 0.4 * (2 * torch.rand(len(own), generator=generator) - 1)
        logprobs = tuple(float(x) if m else 0.0 for x, m in zip(noisy, s.completion_mask, strict=True))
        out.append(dataclasses.replace(s, logprobs=logprobs))
    return out


def trl_inputs(samples, pad_id, reference=None):
    """The batch in the format of TRL's ``GRPOTrainer.compute_loss``."""
    prompt_width = max(len(s.prompt_ids) for s in samples)
    completion_width = max(len(s.completion_ids) for s in samples)
    rows = len(samples)
    prompt_ids = torch.full((rows, prompt_width), pad_id)
    prompt_mask = torch.zeros((rows, prompt_width), dtype=torch.long)
    completion_ids = torch.full((rows, completion_width), pad_id)
    completion_mask = torch.zeros((rows, completion_width), dtype=torch.long)
    tool_mask = torch.zeros((rows, completion_width), dtype=torch.long)
    old = torch.zeros((rows, completion_width))
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        prompt_ids[i, prompt_width - p :] = torch.tensor(s.prompt_ids)
        prompt_mask[i, prompt_width - p :] = 1
        completion_ids[i, :c] = torch.tensor(s.completion_ids)
        completion_mask[i, :c] = 1
        tool_mask[i, :c] = torch.tensor(s.completion_mask)
        old[i, :c] = torch.tensor(s.logprobs)
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.tensor([s.advantage for s in samples]),
        "old_per_token_logps": old,
        "num_items_in_batch": (completion_mask * tool_mask).sum(),
    }
    if reference is not None:
        inputs["ref_per_token_logps"] = reference
    return inputs


def reference_logps(model, samples):
    """The model's log-probs of every completion token (TRL's columns), as the reference of the KL term."""
    width = max(len(s.completion_ids) for s in samples)
    out = torch.zeros((len(samples), width))
    for i, s in enumerate(samples):
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1].float() / TEMPERATURE
        own = logits.log_softmax(-1).gather(-1, torch.tensor(s.completion_ids)[:, None])[:, 0]
        out[i, : len(own)] = own
    return out


def trl_trainer(model, tokenizer, tmp_path, loss_type, rows):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        loss_type=loss_type,
        beta=0.0,  # set after: TRL would load a reference model by name; the test gives its log-probs
        temperature=TEMPERATURE,
        epsilon=0.2,  # the learner's clip range (TrainConfig's defaults)
        epsilon_high=0.28,
        num_generations=4,
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=1,
        max_completion_length=16,
        use_cpu=True,
        bf16=False,
        report_to="none",
        disable_dropout=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["x"]}),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = (
        1  # one micro-batch: the whole batch, as compute_loss sees it
    )
    return trainer


def gradients(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("loss_type", "beta", "rows_per_pass"), ORACLE)
def test_the_learner_s_loss_and_gradients_are_trl_s(tokenizer, tmp_path, loss_type, beta, rows_per_pass):
    base, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    reference_model = copy.deepcopy(base)
    with torch.no_grad():  # move away from the reference, so that the KL term and its gradient are not 0
        for p in base.parameters():
            p.add_(0.02 * torch.randn_like(p))
    samples = with_model_logprobs(oracle_samples(), base)
    reference = reference_logps(reference_model, samples) if beta else None
    trl_model = copy.deepcopy(base)

    config = TrainConfig(
        loss_type=loss_type,
        beta=beta,
        temperature=TEMPERATURE,
        group_size=4,
        per_device_train_batch_size=rows_per_pass,
        gradient_accumulation_steps=3,
        max_completion_length=16,
        learning_rate=1e-3,
    )
    learner = Learner(base, tokenizer, config)
    if beta:
        learner.reference.load_state_dict(reference_model.state_dict())  # the same reference as TRL's
    ours = learner.backward(samples)
    our_grads = gradients(learner.raw_model)

    trainer = trl_trainer(trl_model, tokenizer, tmp_path, loss_type, rows=len(samples))
    trainer.beta = beta
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, trl_inputs(samples, learner.pad_id, reference))
    loss.backward()
    trl_grads = gradients(trainer.model)
    trl_metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}

    assert ours["train/passes"] == -(-len(samples) // rows_per_pass)
    assert ours["train/loss"] == pytest.approx(float(loss.detach()), rel=1e-5, abs=1e-7)
    assert our_grads.keys() == trl_grads.keys()
    largest = max(float(g.abs().max()) for g in trl_grads.values())
    assert largest > 1e-3  # a gradient worth comparing
    worst = max(float((our_grads[n] - trl_grads[n]).abs().max()) for n in trl_grads)
    assert worst <= 1e-5 * largest, f"gradients differ by {worst} (largest {largest})"
    assert 0 < trl_metrics["clip_ratio/low_mean"] and 0 < trl_metrics["clip_ratio/high_mean"]  # clip active
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "entropy"):
        assert ours[f"train/{name}"] == pytest.approx(trl_metrics[name], rel=1e-4, abs=1e-6), name
    if beta:
        assert ours["train/kl"] == pytest.approx(trl_metrics["kl"], rel=1e-4) and trl_metrics["kl"] > 1e-4
