"""The GRPO update of the shared policy: one persistent TRL ``GRPOTrainer``, driven one optimiser step a call.

    updater = GRPOUpdater.for_policy(policy, TrainConfig(group_size=8, per_device_train_batch_size=16))
    metrics = updater.update(designer_samples + agent_samples)   # exactly one optimiser step
    updater.save(run_dir / "checkpoints" / "step-000012")        # and, after a restart: updater.load(...)

**What is TRL's and what is ours.** The loss is ours: :func:`spade_rl.train.loss.grpo_loss` (clipped
importance ratio, KL, the ``loss_type`` normalisation, written out in that module's docstring), computed by
the trainer subclass's ``compute_loss`` on TRL's per-token log-probs (its fused output head); TRL's own
``_compute_loss`` is the oracle of ``tests/train/test_train_loss.py`` (and still runs for the loss types
``cispo``, ``sapo``, ``luspo``, ``vespo``). The batch is ours too (the loop hands in samples instead of TRL
generating them), and the order of calls. TRL's / transformers': the advantage computation from reward
functions, the forward pass, micro-batching and gradient accumulation, clipping, the AdamW optimiser, the
schedule, accelerate (DDP, DeepSpeed, FSDP), LoRA through peft, and the ``report_to`` logging.

**Samples instead of generation.** The trainer gets a ``rollout_func`` that returns the batch handed to
:meth:`GRPOUpdater.update` (prompt ids, completion ids, the sampling log-probs under TRL's ``logprobs`` key,
and ``env_mask`` = the completion mask, so environment tokens stay out of the loss) plus a ``role`` and an
``advantage`` column. Two reward functions, one per role, return the precomputed advantage of their role's
rows and ``None`` for the other role's. With ``scale_rewards="none"`` TRL's advantage is ``reward - mean of
its block of group_size rows`` (TRL's ``num_generations``); :func:`~spade_rl.train.samples.assemble_batch`
puts one centred group per block (filler rows carry 0), so the block mean is 0 and TRL uses our
advantages. They differ only by float32 rounding (TRL holds rewards in float32): below 1e-6 for
advantages of order 1, measured by the ``train/advantage_mismatch`` metric of every update and asserted
in the tests.

**Old log-probabilities.** TRL 1.16 without its own vLLM uses the rollout's ``logprobs`` for nothing but an
optional off-policy mask: the importance ratio's "old" log-probs are its own forward pass, detached (ratio 1
at the start of the step). With ``old_logprobs="sampling"`` (the default) the trainer subclass (in
``trl_engine``) puts the sampling log-probs in their place, so the ratio is ``pi_theta / pi_sampler`` and
the clip range bounds the step against the policy that really produced the tokens (a stale or numerically
different sampler, vLLM in bf16). That needs ``temperature`` equal to the sampling temperature and top-p 1
/ no top-k at sampling; otherwise use ``"recompute"`` (TRL's on-policy behaviour).

**Driving TRL one step at a time.** ``Trainer.train()`` owns its loop (dataloader, epochs, ``max_steps``),
and calling it once per update would rebuild the scheduler and the trainer state every time. Instead the
updater performs, once, what ``train()`` does before its loop, and then, per :meth:`update`, the body of one
optimiser step of ``Trainer._run_epoch``: ``gradient_accumulation_steps`` calls of ``trainer.training_step``
(the first one reaches ``GRPOTrainer._prepare_inputs``, which calls our ``rollout_func``, computes the
advantages and splits the batch into length-sorted micro-batches; the others use its buffer), then
gradient clipping, ``optimizer.step()``, ``lr_scheduler.step()``, the step callbacks and ``trainer.log``.
One trainer lives for the whole run, so AdamW's moments, the schedule and the step counter carry over
between calls. Every private method or attribute of transformers 5.24 / trl 1.16 this needs (and the
trainer subclass) is in :mod:`spade_rl.train.trl_engine`, which refuses other versions on import.

**The model.** The trainer wraps the very model object the policy generates with: on CPU/transformers an
update changes the next generation in place (with LoRA, PEFT injects the adapter layers into that model
too). TRL patches that model's ``forward`` with a fused log-prob head that only acts when called with
``fused_lm_head=True`` (generation is unchanged), and the updater sets its dropout to 0 (ratios of
exactly 1 on-policy). On a GPU give the trainer float32 weights: ``bf16`` is autocast, and pure-bf16
weights would round steps of lr 1e-6 away. Building the updater runs TRL's ``set_seed(seed)`` on the
global RNGs. A separate inference engine does not see the update: ``spade_rl.loop.updating.SyncingUpdater``
pushes the weights into vLLM servers after every step (``trainer_weights`` there merges LoRA in).
Several processes (``accelerate launch``) get one updater each and hand each its own samples, whole groups
(``spade_rl.loop.distributed``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from spade_rl.memory import release_unused_memory
from spade_rl.policy.models import cpu_has_fast_bf16, quiet_progress
from spade_rl.train import trl_engine as engine  # checks the trl / transformers versions on import
from spade_rl.train.config import TrainConfig
from spade_rl.train.micro_batches import split_by_length, trim_padding
from spade_rl.train.offload import StateOffload
from spade_rl.train.samples import Batch, Sample, assemble_batch
from spade_rl.train.trl_engine import SampleServingGRPOTrainer

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from trl import GRPOConfig

# Importable from here as before the trainer moved to trl_engine and the batch split to micro_batches.
__all__ = [
    "GRPOUpdater",
    "SampleServingGRPOTrainer",
    "agent_advantage",
    "designer_advantage",
    "resolve_bf16",
    "split_by_length",
    "trim_padding",
]

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
_META = "spade_train.json"


def designer_advantage(prompts: list, completions: list, role: list[str], advantage: list[float], **_: Any):
    """Reward function of the designer rows: their precomputed advantage; None for agent rows."""
    return [a if r == "designer" else None for r, a in zip(role, advantage, strict=True)]


def agent_advantage(prompts: list, completions: list, role: list[str], advantage: list[float], **_: Any):
    """Reward function of the agent rows: their precomputed advantage; None for designer rows."""
    return [a if r == "agent" else None for r, a in zip(role, advantage, strict=True)]


def resolve_bf16(setting: bool | str | None, on_gpu: bool) -> bool:
    """``TrainConfig.bf16`` for a model on a GPU or not: None means a GPU that supports bf16, "auto" that
    or a CPU with native bf16 products."""
    if isinstance(setting, bool):
        return setting
    if on_gpu:
        return torch.cuda.is_bf16_supported()
    return setting == "auto" and cpu_has_fast_bf16()


class GRPOUpdater:
    """One GRPO optimiser step per :meth:`update` on a mixed designer + agent batch (see the module doc)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: TrainConfig | None = None,
    ) -> None:
        self.config = config if config is not None else TrainConfig()
        self._pending: Batch | None = None
        self._scratch = None if self.config.output_dir else tempfile.TemporaryDirectory(prefix="spade-train-")
        self._warned_schedule_end = False
        self._offload = StateOffload()  # the optimiser's state while it is parked (train.offload_optimizer)
        self.trainer = self._build_trainer(model, tokenizer)
        self._wrapped = engine.begin_training(self.trainer, self.config.checkpoint_rows_longer_than)
        pad = tokenizer.pad_token_id
        self.filler_token_id = pad if pad is not None else tokenizer.eos_token_id
        log.info(
            "GRPO updater ready: %d rows per update in blocks of %d, loss %s, lr %g, lora %s, device %s",
            self.rows_per_update,
            self.config.group_size,
            self.config.loss_type,
            self.config.learning_rate,
            self.config.use_lora,
            self.trainer.args.device,
        )

    @classmethod
    def for_policy(cls, policy: Any, config: TrainConfig | None = None) -> GRPOUpdater:
        """An updater around a policy that holds its model in process (``TransformersPolicy``)."""
        model = getattr(policy, "model", None)
        if model is None or not hasattr(model, "parameters"):
            raise TypeError(f"{type(policy).__name__} holds no in-process model to train")
        return cls(model, policy.tokenizer, config)

    # --- public ----------------------------------------------------------------------------------------

    @property
    def step(self) -> int:
        """Optimiser steps taken (restored by :meth:`load`)."""
        return self.trainer.state.global_step

    @property
    def rows_per_update(self) -> int:
        """Rows of one update on this process (TRL's generation batch counts the rows of every process)."""
        return self.trainer.args.generation_batch_size // self.trainer.accelerator.num_processes

    @property
    def model(self) -> Any:
        """The trained module (a ``PeftModel`` around the policy's model with LoRA)."""
        return self.trainer.model

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """Exactly one optimiser step on ``samples`` (groups consecutive, one role each, advantages
        centred, at most ``rows_per_update`` rows once laid out in blocks of ``group_size``).
        Returns namespaced metrics: ``train/loss``, ``train/grad_norm``, ``train/kl`` (beta > 0),
        ``train/clip_ratio/...``, ``train/entropy``, per-role counts, ``time/train_s``, ..."""
        start = time.perf_counter()
        cfg, trainer = self.config, self.trainer
        self._offload.restore(trainer.optimizer)  # the moments back, if they were parked
        batch = assemble_batch(
            samples,
            cfg.group_size,
            self.rows_per_update,
            self.filler_token_id,
            cfg.max_completion_length,
        )
        if batch.no_logprobs and (cfg.old_logprobs == "sampling" or cfg.tis_cap is not None):
            log.warning(
                "%d samples have log-prob 0.0 on every model token (sampled without log-probs?): their "
                "importance ratios against the sampler are wrong; use old_logprobs='recompute' and "
                "tis_cap = none",
                batch.no_logprobs,
            )
        self._pending = batch
        try:
            loss = engine.accumulate_gradients(trainer, self._wrapped, len(batch))
        finally:
            self._pending = None
        grad_norm, learning_rate = engine.optimizer_step(trainer, self._wrapped)
        if self.step >= trainer.args.max_steps and not self._warned_schedule_end:
            self._warned_schedule_end = True
            if cfg.lr_scheduler_type in ("linear", "cosine"):
                log.warning("step %d reached max_steps: the learning-rate schedule has ended", self.step)
        logs: dict[str, Any] = {"loss": loss, "grad_norm": grad_norm, "learning_rate": learning_rate}
        trainer.log(logs)  # adds TRL's metrics of this step to `logs`, sends them to report_to, clears them
        self._wrapped.eval()
        logs.pop("epoch", None)  # meaningless here: the trainer never iterates its dataset
        metrics = {f"train/{k}": float(v) for k, v in logs.items() if isinstance(v, int | float)}
        metrics.update({f"train/{k}": v for k, v in batch.counts().items()})
        metrics["train/truncated_samples"] = float(batch.truncated)
        metrics["train/advantage_mismatch"] = self._advantage_mismatch(batch)
        metrics["train/step"] = float(self.step)
        metrics["time/train_s"] = time.perf_counter() - start
        log.debug("GRPO step %d: loss %.4g, grad norm %.4g", self.step, loss, grad_norm)
        return metrics

    def save(self, directory: str | Path) -> Path:
        """Write a checkpoint: the model (HF format) or the LoRA adapter under ``model/``, the optimiser
        and scheduler states, the RNG states, the trainer state and the step counters."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        trainer = self.trainer
        self._offload.restore(trainer.optimizer)  # a checkpoint holds the whole state
        with quiet_progress():  # no "Writing model shards" bar in the run's output at every checkpoint
            trainer.save_model(str(path / "model"))
        engine.save_training_state(trainer, path)
        trainer.state.save_to_json(str(path / "trainer_state.json"))
        meta = {
            "format": CHECKPOINT_FORMAT,
            "global_step": trainer.state.global_step,
            "trl_step": engine.micro_step_count(trainer),
            "config": dataclasses.asdict(self.config),
        }
        (path / _META).write_text(json.dumps(meta, indent=2))
        log.info("saved GRPO checkpoint at step %d to %s", trainer.state.global_step, path)
        return path

    def load(self, directory: str | Path) -> None:
        """Restore a checkpoint written by :meth:`save` into this updater (weights copied in place, so the
        policy keeps generating with the same model object). The next update continues the run exactly."""
        path = Path(directory)
        meta_path = path / _META
        if not meta_path.is_file():
            raise FileNotFoundError(f"{path} is not a GRPO checkpoint (no {_META})")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"checkpoint format {meta.get('format')!r} is not {CHECKPOINT_FORMAT}")
        saved = meta["config"]
        saved.setdefault("group_size", saved.get("num_generations"))  # its name before the glossary
        for key in (
            "use_lora",
            "group_size",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
        ):
            if saved.get(key) != getattr(self.config, key):
                raise ValueError(
                    f"checkpoint {path} was written with {key}={saved.get(key)!r}, this updater has "
                    f"{key}={getattr(self.config, key)!r}"
                )
        trainer = self.trainer
        self._offload.discard()  # whatever was parked is replaced by the checkpoint's state
        self._load_weights(path / "model")
        engine.load_training_state(trainer, path, meta["trl_step"])
        from transformers import TrainerState

        state = TrainerState.load_from_json(str(path / "trainer_state.json"))
        for name in ("global_step", "epoch", "num_input_tokens_seen", "total_flos", "log_history"):
            setattr(trainer.state, name, getattr(state, name))
        log.info("loaded GRPO checkpoint at step %d from %s", trainer.state.global_step, path)

    def park_optimizer_state(self, path: str | Path) -> int:
        """With ``train.offload_optimizer``: write the optimiser's state to ``path`` and free its memory
        until the next :meth:`update` or :meth:`save` reads it back (:mod:`spade_rl.train.offload`);
        returns the bytes written (0: off, nothing to park yet, or already parked). Under several processes
        each writes its own file beside ``path`` (``<stem>.rank<N><suffix>``)."""
        if not self.config.offload_optimizer:
            return 0
        accelerator = self.trainer.accelerator
        if accelerator.num_processes > 1:  # each process parks its own state (accelerate launch)
            path = Path(path)
            path = path.with_name(f"{path.stem}.rank{accelerator.process_index}{path.suffix}")
        written = self._offload.park(self.trainer.optimizer, path)
        if written:
            release_unused_memory()
        return written

    def close(self) -> None:
        """End the run for the callbacks (flushes tensorboard / wandb); a parked state's file is removed."""
        self._offload.discard()
        engine.end_training(self.trainer)
        if self._scratch is not None:
            self._scratch.cleanup()

    # --- construction ----------------------------------------------------------------------------------

    def _build_trainer(self, model: Any, tokenizer: Any) -> SampleServingGRPOTrainer:
        cfg = self.config
        first = next(model.parameters())
        on_gpu = first.device.type == "cuda"
        if first.dtype in (torch.bfloat16, torch.float16) and not cfg.use_lora:
            log.warning(
                "full fine-tuning of %s weights: AdamW steps of about lr=%g fall below their rounding "
                "and are lost; load the policy's model in float32 (bf16 autocast still computes in bf16)",
                first.dtype,
                cfg.learning_rate,
            )
        # Full fine-tuning with a KL term: TRL would reload the reference from the model's hub id or folder;
        # an in-memory copy taken now works for any model (and is what that reload would give at step 0).
        reference = copy.deepcopy(model) if cfg.beta > 0 and not cfg.use_lora else None
        trainer = engine.build_trainer(
            model,
            tokenizer,
            self._trl_args(on_gpu, beta=0.0 if reference is not None else cfg.beta),
            reward_funcs=[designer_advantage, agent_advantage],
            rollout_func=self._serve,
            peft_config=self._peft_config(),
            use_sampling_logprobs=cfg.old_logprobs == "sampling",
            tis_cap=cfg.tis_cap,
        )
        if reference is not None:
            engine.attach_reference(trainer, reference, cfg.beta)
        return trainer

    def _trl_args(self, on_gpu: bool, beta: float) -> GRPOConfig:
        """TRL's configuration of the trainer (the names that differ from ours: epsilon = epsilon_low)."""
        from trl import GRPOConfig

        cfg = self.config
        bf16 = resolve_bf16(cfg.bf16, on_gpu)
        checkpointing = cfg.gradient_checkpointing if cfg.gradient_checkpointing is not None else on_gpu
        head_fp32 = cfg.cast_lm_head_to_fp32 if cfg.cast_lm_head_to_fp32 is not None else bool(bf16)
        return GRPOConfig(
            output_dir=cfg.output_dir or self._scratch.name,
            learning_rate=cfg.learning_rate,
            lr_scheduler_type=cfg.lr_scheduler_type,
            warmup_steps=cfg.warmup_steps,
            max_steps=cfg.max_steps,
            weight_decay=cfg.weight_decay,
            adam_beta1=cfg.adam_beta1,
            adam_beta2=cfg.adam_beta2,
            max_grad_norm=cfg.max_grad_norm,
            loss_type=cfg.loss_type,
            epsilon=cfg.epsilon_low,
            epsilon_high=cfg.epsilon_high,
            beta=beta,
            temperature=cfg.temperature,
            scale_rewards="none",
            num_generations=cfg.group_size,  # TRL's name for the group size
            per_device_train_batch_size=cfg.per_device_train_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            max_completion_length=cfg.max_completion_length,
            num_iterations=1,
            seed=cfg.seed,
            bf16=bool(bf16),
            fp16=False,
            cast_lm_head_to_fp32=head_fp32,
            use_cpu=not on_gpu,
            activation_checkpointing=bool(checkpointing),
            disable_dropout=True,
            report_to=cfg.report_to,
            logging_steps=1,
            save_strategy="no",
            eval_strategy="no",
            disable_tqdm=True,
            shuffle_dataset=False,
            remove_unused_columns=False,
            dataloader_num_workers=0,
        )

    def _peft_config(self) -> Any:
        cfg = self.config
        if not cfg.use_lora:
            return None
        from peft import LoraConfig

        targets = cfg.lora_target_modules
        return LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules="all-linear" if targets == ("all-linear",) else list(targets),
            bias="none",
            task_type="CAUSAL_LM",
        )

    # --- one step --------------------------------------------------------------------------------------

    def _serve(self, prompts: list, trainer: Any) -> dict[str, list]:
        """The rollout_func: the batch of the running update, in TRL's rollout output format."""
        batch = self._pending
        if batch is None:
            raise RuntimeError("the trainer asked for completions outside GRPOUpdater.update()")
        if len(prompts) != len(batch):
            raise RuntimeError(
                f"the trainer asked for {len(prompts)} completions, the batch has {len(batch)}"
            )
        return {
            "prompt_ids": batch.prompt_ids,
            "completion_ids": batch.completion_ids,
            "logprobs": batch.logprobs,
            "env_mask": batch.completion_mask,
            "role": batch.roles,
            "advantage": batch.advantages,
        }

    def _advantage_mismatch(self, batch: Batch) -> float:
        used = self.trainer.last_advantages
        if used is None:
            return math.nan
        ours = torch.tensor(batch.advantages, dtype=torch.float64)
        return float((used.double().cpu() - ours).abs().max())

    def _load_weights(self, folder: Path) -> None:
        """Copy saved weights into the live model (in place: the policy holds this very object)."""
        from safetensors.torch import load_file

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        if self.config.use_lora:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(model, load_file(str(folder / "adapter_model.safetensors")))
            if getattr(result, "unexpected_keys", None):
                raise ValueError(
                    f"the adapter in {folder} does not fit this model: {result.unexpected_keys[:5]}"
                )
            return
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        state: dict[str, torch.Tensor] = {}
        for name in files:
            state.update(load_file(str(folder / name)))
        missing, unexpected = model.load_state_dict(state, strict=False)
        live = model.state_dict()
        loaded_storage = {live[k].data_ptr() for k in state if k in live}
        untied = [k for k in missing if live[k].data_ptr() not in loaded_storage]
        if unexpected or untied:
            raise ValueError(
                f"the weights in {folder} do not fit this model: "
                f"missing {untied[:5]}, unexpected {unexpected[:5]}"
            )
