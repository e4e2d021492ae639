"""The learner: one optimiser step of the shared policy per call, GRPO for self-play and SFT for the warm-up.

    learner = Learner(policy.model, policy.tokenizer, TrainConfig(learning_rate=1e-6))
    metrics = learner.step(designer_samples + agent_samples)     # GRPO: one optimiser step
    loss = learner.sft_step([(prompt_ids, target_ids), ...])      # supervised: one optimiser step
    learner.save(run_dir / "checkpoints" / "iter-0003" / "updater")   # and after a restart: learner.load(...)

A GRPO step, top to bottom (:meth:`Learner.step`):

1. the samples of both roles -> one padded batch (:func:`spade_rl.train.samples.pad_samples`): prompt and
   completion per row, the environment's tokens and the padding masked out, one advantage per row;
2. the batch -> micro-batches of ``per_device_train_batch_size`` rows of similar length;
3. per micro-batch: the log-probs of its trained tokens from one model call
   (:func:`spade_rl.train.scoring.trained_logps`), the loss of :func:`spade_rl.train.loss.grpo_loss`
   (advantages are its input, as computed by the loop), backward;
4. gradient clipping, one AdamW step, one step of the learning-rate schedule.

The supervised step (:meth:`Learner.sft_step`) is the same with the mean cross-entropy of the target tokens
as the loss. Both run through the same model call and the same optimiser step.

**The model.** The learner trains the very model object it is given: an in-process policy generates with
the new weights at once (with LoRA, peft injects the adapter layers into that model). Dropout is set to 0
(ratios of exactly 1 on-policy). bf16 autocast computes in bfloat16 with float32 master weights; full
fine-tuning of weights that are themselves bfloat16 or float16 is refused below a learning rate of 1e-5 (an
AdamW step of lr 1e-6 rounds to nothing there) and warned about above it: load them in float32, or train
LoRA. Activation checkpointing is on for every pass
(``gradient_checkpointing``) or for micro-batches wider than ``checkpoint_rows_longer_than`` tokens.

**Old log-probabilities.** ``old_logprobs = "auto"`` is "sampling" here (a run whose samples come from
another engine hands the learner "recompute" with truncated importance sampling). ``"sampling"``: the
importance ratio is pi_theta / pi_sampler (the samples' own log-probs), so the clip range bounds the step
against the policy that really produced the tokens; this needs ``temperature`` equal to the sampling
temperature. ``"recompute"``: the ratio is
taken against the learner's own log-probs (1 at the start of a step, which is on-policy), and with
``tis_cap`` each token is weighted by min(pi_old / pi_sampler, tis_cap) (truncated importance sampling).

**Several processes** (``accelerate launch``: DDP or FSDP2, through accelerate's public API). Each process
steps on its own share of the samples (whole groups, :mod:`spade_rl.loop.distributed`). The normalisers
of the loss (trained tokens, rows) are summed over every process first, so that the averaged gradient is
the one of the whole batch. Every process runs the same number of forward/backward passes (FSDP's
forward passes are collectives): a process with fewer micro-batches runs passes of one masked token.
In a single process there are no such passes, and a micro-batch without a trained token is not computed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from spade_rl.memory import release_unused_memory
from spade_rl.policy.models import (
    checkpointing_disable,
    checkpointing_enable,
    quiet_progress,
    switchable_checkpointing,
)
from spade_rl.train.base import BaseLearner
from spade_rl.train.config import TrainConfig, rounds_away
from spade_rl.train.learner_parts import (
    _META,
    CHECKPOINT_FORMAT,
    _base,
    _check_launch_precision,
    _disable_dropout,
    _load_weights,
    _logprob_rows,
    _rng_state,
    _schedule,
    _set_rng_state,
    _with_lora,
    checkpointed_layers,
    launched,
    read_checkpoint_meta,
    resolve_bf16,
    token_metrics,
)
from spade_rl.train.loss import LossSettings, grpo_loss
from spade_rl.train.offload import StateOffload
from spade_rl.train.reporting import Reporter
from spade_rl.train.samples import Sample, TokenBatch, pad_samples, sft_rows, split_groups
from spade_rl.train.scoring import Scored, check_scorable, trained_logps

log = logging.getLogger(__name__)

# After a pass over rows at least this wide (tokens), freed memory goes back to the system before the next
# one: each pass frees its activations in pieces of every size, and the next, of another width, allocates
# beside them (spade_rl.memory).
TRIM_AFTER_TOKENS = 128


class Learner(BaseLearner):
    """One GRPO or SFT optimiser step per call on a model held in this process (see the module doc)."""

    inference_only = False

    def __init__(
        self, model: Any, tokenizer: Any, config: TrainConfig | None = None, *, accelerator: Any = None
    ):
        from accelerate import Accelerator
        from transformers import set_seed

        # "auto" old log-probs: the learner of a model that samples itself (a run whose samples come from
        # another engine passes its configuration resolved, RunConfig.update_config).
        cfg = (config if config is not None else TrainConfig()).resolved(sampler_is_trainer=True)
        self.config = cfg
        first = next(model.parameters())
        self.device = first.device
        on_gpu = self.device.type == "cuda"
        weights = str(first.dtype).removeprefix("torch.")
        reason = rounds_away(weights, cfg.learning_rate, cfg.use_lora)
        if (
            reason is not None
        ):  # a run's configuration is refused for this at load (RunConfig.check_precision)
            raise ValueError(reason)
        if weights in ("bfloat16", "float16") and not cfg.use_lora:
            log.warning(
                "full fine-tuning of %s weights: AdamW steps of about lr=%g lose most of their size to "
                "rounding; load the model in float32 (policy.transformers.dtype = 'float32': train.bf16 "
                "still computes in bfloat16), or train LoRA adapters (train.use_lora = true)",
                weights,
                cfg.learning_rate,
            )
        self.bf16 = resolve_bf16(cfg.bf16, on_gpu)
        self.head_fp32 = cfg.cast_lm_head_to_fp32 if cfg.cast_lm_head_to_fp32 is not None else self.bf16
        self.tokenizer = tokenizer  # saved beside the model in every checkpoint
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else tokenizer.eos_token_id
        if cfg.use_lora:
            model = _with_lora(model, cfg)
        _disable_dropout(model)
        self.reference = None
        if cfg.beta > 0 and not cfg.use_lora:  # with LoRA the reference is the model without its adapter
            self.reference = copy.deepcopy(model).requires_grad_(False).eval()
        self.raw_model = model  # the model itself (a PeftModel with LoRA); self.model may wrap it
        self.head = check_scorable(_base(model))
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        decay = [p for n, p in trainable if p.ndim >= 2]  # no weight decay on biases and norms
        other = [p for n, p in trainable if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2)
        )
        self.scheduler = _schedule(cfg, optimizer)
        # Under accelerate launch, accelerate wraps the model (DDP, FSDP2) and reduces across processes; in
        # one process the learner is plain torch (accelerate's process-wide state, e.g. a mixed precision
        # set by another library's trainer in the same process, cannot reach it).
        if accelerator is None and launched():
            accelerator = Accelerator(device_placement=False, cpu=not on_gpu)
        self.accelerator = accelerator
        self.model, self.optimizer = model, optimizer
        if accelerator is not None:
            _check_launch_precision(accelerator.mixed_precision, self.bf16)
            self.model, self.optimizer = accelerator.prepare(model, optimizer)
        self.layers: list = []  # decoder layers whose checkpointing is switched per pass
        self._checkpointing = True
        if cfg.gradient_checkpointing or (cfg.gradient_checkpointing is None and on_gpu):
            checkpointing_enable(_base(model), {"use_reentrant": False})
        elif cfg.checkpoint_rows_longer_than:
            self.layers = switchable_checkpointing(_base(model), {"use_reentrant": False})
        else:
            self._checkpointing = False
        self.steps = 0
        self._offload = StateOffload()
        self._reporter = Reporter(cfg.report_to, cfg.output_dir, self.process_index == 0)
        self._warned_schedule_end = False
        set_seed(cfg.seed)  # the global RNGs (python, numpy, torch), as a Trainer does when it is built
        log.info(
            "learner ready: up to %d rows per step in passes of %d, loss %s, lr %g, lora %s, bf16 %s, "
            "device %s",
            self.rows_per_update,
            cfg.per_device_train_batch_size,
            cfg.loss_type,
            cfg.learning_rate,
            cfg.use_lora,
            self.bf16,
            self.device,
        )

    @classmethod
    def for_policy(cls, policy: Any, config: TrainConfig | None = None) -> Learner:
        """A learner of a policy that holds its model in process (``TransformersPolicy``)."""
        model = getattr(policy, "model", None)
        if model is None or not hasattr(model, "parameters"):
            raise TypeError(f"{type(policy).__name__} holds no in-process model to train")
        return cls(model, policy.tokenizer, config)

    @property
    def rows_per_update(self) -> int:
        """The most rows one step takes on this process (per-device batch x accumulation steps)."""
        return self.config.rows_per_update

    @property
    def processes(self) -> int:
        return 1 if self.accelerator is None else self.accelerator.num_processes

    @property
    def process_index(self) -> int:
        return 0 if self.accelerator is None else self.accelerator.process_index

    # --- one GRPO step ---------------------------------------------------------------------------------

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """Exactly one GRPO optimiser step on ``samples`` (groups consecutive, one role each, advantages
        given; at most ``rows_per_update`` of them; none only on a process of a distributed step).
        Returns namespaced metrics: ``train/loss``, ``train/grad_norm``, ``train/kl`` (beta > 0),
        ``train/clip_ratio/...``, ``train/entropy``, per-role counts, ``time/train_s``, ..."""
        started = time.perf_counter()
        try:
            metrics = self.backward(samples)
            grad_norm, learning_rate = self._optimizer_step()
        except BaseException:
            self.optimizer.zero_grad(set_to_none=True)
            raise
        metrics["train/grad_norm"], metrics["train/learning_rate"] = grad_norm, learning_rate
        metrics["train/step"] = float(self.steps)
        metrics["time/train_s"] = time.perf_counter() - started
        self._reporter.log(metrics, self.steps)
        log.debug("GRPO step %d: loss %.4g, grad norm %.4g", self.steps, metrics["train/loss"], grad_norm)
        return metrics

    def backward(self, samples: Sequence[Sample]) -> dict[str, float]:
        """The forward and backward passes of one GRPO step, without the optimiser step: the batch's
        gradient is left in the parameters (added to what is there). Returns the loss and its metrics."""
        cfg = self.config
        self._check(samples)
        self._offload.restore(self.optimizer)  # the moments back, if they were parked
        batch = pad_samples(samples, self.pad_id, cfg.max_completion_length).to(self.device)
        # The loss's normalisers over the whole batch, every process's rows included.
        tokens, rows = self._sum_over_processes(batch.trained.sum(), float(len(batch)))
        settings = LossSettings(
            loss_type=cfg.loss_type,
            epsilon_low=cfg.epsilon_low,
            epsilon_high=cfg.epsilon_high,
            beta=cfg.beta,
            max_completion_length=cfg.max_completion_length,
            tis_cap=cfg.tis_cap,
        )
        share = self.processes  # the processes' gradients are averaged: each loss is its share x processes
        planned = batch.micro_batches(cfg.per_device_train_batch_size)
        micro_batches = self._passes(planned)
        sums: dict[str, Any] = {}
        extremes: dict[str, list[torch.Tensor]] = {"clip_ratio/low_min": [], "clip_ratio/high_max": []}
        loss_total = 0.0
        no_logprobs = certain = 0
        self.model.train()
        try:
            for i, micro in enumerate(micro_batches):
                with self._sync(last=i == len(micro_batches) - 1):
                    scored = self._score(micro, cfg.temperature)
                    zero, sure = _logprob_rows(scored)
                    no_logprobs += int((zero & ~sure).sum())
                    certain += int(sure.sum())
                    old = scored.sampling_logps
                    if cfg.old_logprobs == "recompute":
                        old = scored.logps.detach()
                    out = grpo_loss(
                        scored.logps,
                        old,
                        micro.advantages,
                        scored.mask,
                        settings,
                        ref_logps=self._reference_logps(micro) if cfg.beta > 0 else None,
                        sampling_logps=scored.sampling_logps if cfg.tis_cap is not None else None,
                        batch_tokens=tokens.clamp(min=1.0) / share,
                        batch_rows=rows / share,
                        micro_batches=max(1, len(planned)),
                    )
                    self._backward(out.loss)
                loss_total += float(out.loss.detach())
                for name, value in out.token_sums().items():
                    sums[name] = sums.get(name, 0.0) + value
                sums["entropy"] = sums.get("entropy", 0.0) + scored.entropy_sum
                for name, values in out.row_means().items():
                    extremes[name].append(values)
                if micro.input_ids.size(1) >= TRIM_AFTER_TOKENS:
                    release_unused_memory()
        finally:
            self.model.eval()
        if no_logprobs and (cfg.old_logprobs == "sampling" or cfg.tis_cap is not None):
            log.warning(
                "%d samples have log-prob 0.0 on every model token though the model is not certain of "
                "them (sampled without log-probs?): their importance ratios against the sampler are "
                "wrong; use old_logprobs='recompute' and tis_cap = none",
                no_logprobs,
            )
        if self.processes > 1:  # each process's loss is its share x processes: the batch's is their mean
            total = torch.tensor([loss_total], device=self.device)
            loss_total = float(self.accelerator.reduce(total, "sum")) / self.processes
        metrics = {"train/loss": loss_total}
        metrics.update(self._token_metrics(sums, extremes))
        metrics.update({f"train/{k}": v for k, v in batch.counts().items()})
        metrics["train/truncated_samples"] = float(batch.truncated)
        metrics["train/no_logprobs"] = float(no_logprobs)
        metrics["train/certain_samples"] = float(certain)
        metrics["train/passes"] = float(len(micro_batches))
        return metrics

    # --- one supervised step ---------------------------------------------------------------------------

    def sft_step(
        self, rows: Sequence[tuple[Sequence[int], Sequence[int]]], *, graduated: bool = False
    ) -> float:
        """One optimiser step on the mean cross-entropy of each row's target tokens after its prompt,
        averaged over the rows (one row per pass: the warm-up's long designer rows); returns that loss.
        ``graduated``: a row longer than ``checkpoint_rows_longer_than`` recomputes the activations of only
        a share of its layers (:func:`checkpointed_layers`), so that it holds about that many tokens'
        worth, instead of all of them."""
        if not rows:
            raise ValueError("no rows to train on")
        self._offload.restore(self.optimizer)
        batch = sft_rows(rows, self.pad_id).to(self.device)
        loss_total = 0.0
        self.model.train()
        try:
            micro_batches = batch.micro_batches(1)
            for i, micro in enumerate(micro_batches):
                with self._sync(last=i == len(micro_batches) - 1):
                    scored = self._score(micro, 1.0, graduated=graduated)
                    per_row = -(scored.logps * scored.mask).sum(-1) / scored.mask.sum(-1).clamp(min=1.0)
                    loss = per_row.sum() / len(batch)
                    self._backward(loss)
                loss_total += float(loss.detach())
                if micro.input_ids.size(1) >= TRIM_AFTER_TOKENS:
                    release_unused_memory()
            self._optimizer_step()
        except BaseException:
            self.optimizer.zero_grad(set_to_none=True)
            raise
        finally:
            self.model.eval()
        return loss_total

    # --- the parts of a step ---------------------------------------------------------------------------

    def _check(self, samples: Sequence[Sample]) -> None:
        if not samples and self.processes == 1:
            raise ValueError("no samples to train on")
        if len(samples) > self.rows_per_update:
            raise ValueError(
                f"{len(samples)} samples are more than the {self.rows_per_update} rows of one step "
                "(train.per_device_train_batch_size * train.gradient_accumulation_steps, per process): raise "
                "those, or hand fewer groups per step"
            )
        for group in split_groups(samples):
            gid, role = group[0].group, group[0].role
            if any(s.role != role for s in group):
                raise ValueError(f"group {gid} mixes roles: each group must hold samples of one role")
            if len(group) > self.config.group_size:
                raise ValueError(
                    f"group {gid} has {len(group)} samples, more than train.group_size = "
                    f"{self.config.group_size}: set train.group_size to the largest group"
                )

    def _passes(self, micro_batches: list[TokenBatch]) -> list[TokenBatch]:
        """The micro-batches to compute: in one process those with a trained token; across processes,
        as many on every process (the ones short of the most get passes of one masked token)."""
        if self.processes == 1:
            return [m for m in micro_batches if bool(m.trained.any())]
        most = int(self.accelerator.gather(torch.tensor([len(micro_batches)], device=self.device)).max())
        empty = sft_rows([((self.pad_id,), ())], self.pad_id).to(self.device)
        return micro_batches + [empty] * (most - len(micro_batches))

    def _score(self, micro: TokenBatch, temperature: float, graduated: bool = False) -> Scored:
        """One model call under this learner's precision and activation checkpointing."""
        width, limit, layers = (
            micro.input_ids.size(1),
            self.config.checkpoint_rows_longer_than,
            len(self.layers),
        )
        if graduated:
            share = checkpointed_layers(layers, width, limit)
        else:
            share = layers if limit and width > limit else 0
        for n, layer in enumerate(self.layers):
            layer.gradient_checkpointing = n < share
        return trained_logps(
            self.model,
            micro,
            temperature,
            head=self.head,
            head_fp32=self.head_fp32,
            autocast=self._autocast(),
        )

    def _reference_logps(self, micro: TokenBatch) -> torch.Tensor:
        """The reference policy's log-probs of the micro-batch's trained tokens (for the KL term): a frozen
        copy of the model as the learner got it, or with LoRA the model without its adapter."""
        if self.reference is not None:
            model, head, adapter_off = self.reference, self.reference.get_output_embeddings(), None
        else:
            model, head, adapter_off = self.raw_model, self.head, self.raw_model.disable_adapter()
        with torch.no_grad(), adapter_off or contextlib.nullcontext():
            scored = trained_logps(
                model,
                micro,
                self.config.temperature,
                head=head,
                head_fp32=self.head_fp32,
                autocast=self._autocast(),
            )
        return scored.logps

    def _autocast(self) -> Any:
        if not self.bf16:
            return None
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    @contextlib.contextmanager
    def _sync(self, last: bool) -> Iterator[None]:
        """Gradients are reduced across processes on the last pass of a step only."""
        if last or self.accelerator is None:
            yield
            return
        with self.accelerator.no_sync(self.model):
            yield

    @property
    def fsdp(self) -> bool:
        """Whether accelerate shards the model with FSDP (its weights are DTensors then)."""
        from accelerate.utils import DistributedType

        return self.accelerator is not None and self.accelerator.distributed_type == DistributedType.FSDP

    def _backward(self, loss: torch.Tensor) -> None:
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss)

    def _optimizer_step(self) -> tuple[float, float]:
        """Clip (the norm before clipping is returned), step, schedule; returns (grad norm, lr used)."""
        cfg = self.config
        params = [p for p in self.model.parameters() if p.requires_grad]
        if cfg.max_grad_norm <= 0:  # no clipping: the norm is a metric only (NaN across processes)
            grads = [p.grad for p in params if p.grad is not None]
            grad_norm = float(torch.nn.utils.get_total_norm(grads)) if self.processes == 1 else math.nan
        elif self.accelerator is None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
        else:
            grad_norm = float(self.accelerator.clip_grad_norm_(params, cfg.max_grad_norm))
        learning_rate = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        if self.steps >= cfg.max_steps and not self._warned_schedule_end:
            self._warned_schedule_end = True
            if cfg.lr_scheduler_type in ("linear", "cosine"):
                log.warning("step %d reached max_steps: the learning-rate schedule has ended", self.steps)
        return grad_norm, learning_rate

    def _sum_over_processes(self, tokens: torch.Tensor, rows: float) -> tuple[torch.Tensor, float]:
        if self.processes == 1:
            return tokens, rows
        both = self.accelerator.reduce(
            torch.stack([tokens.float(), torch.tensor(rows, device=self.device)]), "sum"
        )
        return both[0], float(both[1])

    def _token_metrics(self, sums: dict, extremes: dict) -> dict[str, float]:
        """Token means over every process; per-row extremes over every process (NaN: no trained row)."""
        return token_metrics(sums, extremes, self.accelerator, self.processes, self.device)

    # --- state -----------------------------------------------------------------------------------------

    def park_optimizer_state(self, path: str | Path) -> int:
        """With ``train.offload_optimizer``: write the optimiser's state to ``path`` and free its memory
        until the next step or :meth:`save` reads it back (:mod:`spade_rl.train.offload`); returns the bytes
        written (0: off, nothing to park yet, or already parked). Under several processes each writes its
        own file beside ``path`` (``<stem>.rank<N><suffix>``)."""
        if not self.config.offload_optimizer:
            return 0
        path = Path(path)
        if self.processes > 1:
            path = path.with_name(f"{path.stem}.rank{self.process_index}{path.suffix}")
        written = self._offload.park(self.optimizer, path)
        if written:
            release_unused_memory()
        return written

    def save(self, directory: str | Path) -> Path:
        """A checkpoint: the model in Hugging Face's format (or the LoRA adapter) and the tokenizer under
        ``model/``, the optimiser and RNG states (a file each per process when there are several), the
        schedule's state and the steps."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self._offload.restore(self.optimizer)  # a checkpoint holds the whole state
        state = self.accelerator.get_state_dict(self.model) if self.processes > 1 else None
        main = self.process_index == 0
        if main:
            with quiet_progress():
                self.raw_model.save_pretrained(str(path / "model"), state_dict=state)
            self.tokenizer.save_pretrained(str(path / "model"))  # the folder loads as a model on its own
        suffix = f".rank{self.process_index}" if self.processes > 1 else ""
        torch.save(self.optimizer.state_dict(), path / f"optimizer{suffix}.pt")
        torch.save(_rng_state(), path / f"rng_state{suffix}.pth")
        if main:
            torch.save(self.scheduler.state_dict(), path / "scheduler.pt")
            meta = {
                "format": CHECKPOINT_FORMAT,
                "steps": self.steps,
                "processes": self.processes,
                "config": dataclasses.asdict(self.config),
            }
            (path / _META).write_text(json.dumps(meta, indent=2))
        log.info("saved the learner's checkpoint at step %d to %s", self.steps, path)
        return path

    def load(self, directory: str | Path) -> None:
        """Restore a checkpoint written by :meth:`save` (weights copied in place, so that the policy keeps
        generating with the same model object); the next step continues the run exactly."""
        path = Path(directory)
        meta = read_checkpoint_meta(path, self.config, self.processes)
        self._offload.discard()  # whatever was parked is replaced by the checkpoint's state
        _load_weights(self.raw_model, path / "model", self.config.use_lora, self.fsdp)
        suffix = f".rank{self.process_index}" if self.processes > 1 else ""
        self.optimizer.load_state_dict(torch.load(path / f"optimizer{suffix}.pt", map_location=self.device))
        self.scheduler.load_state_dict(torch.load(path / "scheduler.pt"))
        _set_rng_state(torch.load(path / f"rng_state{suffix}.pth", weights_only=False))
        self.steps = int(meta["steps"])
        log.info("loaded the learner's checkpoint at step %d from %s", self.steps, path)

    def close(self) -> None:
        """Flush the metrics' reporter; a parked state's file is removed; the activation checkpointing
        the learner installed is removed from the model."""
        self._offload.discard()
        self._reporter.close()
        if self._checkpointing:
            checkpointing_disable(_base(self.raw_model))
            self._checkpointing = False


# --- construction ----------------------------------------------------------------------------------------
