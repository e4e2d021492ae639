"""The GRPO update of the shared policy: one persistent TRL ``GRPOTrainer``, driven one optimiser step a call.

    updater = GRPOUpdater.for_policy(policy, TrainConfig(num_generations=8, per_device_train_batch_size=16))
    metrics = updater.update(designer_samples + agent_samples)   # exactly one optimiser step
    updater.save(run_dir / "checkpoints" / "step-000012")        # and, after a restart: updater.load(...)

**What is TRL's and what is ours.** The loss (clipped importance ratio, KL, the ``loss_type`` aggregation),
the advantage computation from reward functions, the micro-batching, gradient accumulation, clipping, the
AdamW optimiser, the schedule and the ``report_to`` logging are TRL's / transformers' own. Ours: the batch
(the loop hands in samples instead of TRL generating them) and the order of calls.

**Samples instead of generation.** The trainer gets a ``rollout_func`` that returns the batch handed to
:meth:`GRPOUpdater.update` (prompt ids, completion ids, the sampling log-probs under TRL's ``logprobs`` key,
and ``env_mask`` = the completion mask, so environment tokens stay out of the loss) plus a ``role`` and an
``advantage`` column. Two reward functions, one per role, return the precomputed advantage of their role's
rows and ``None`` for the other role's. With ``scale_rewards="none"`` TRL's advantage is ``reward - mean of
its block of num_generations rows``; :func:`~spade_rl.train.samples.assemble_batch` puts one centred group
per block (filler rows carry 0), so the block mean is 0 and TRL uses our advantages. They differ only by
float32 rounding (TRL holds rewards in float32): below 1e-6 for advantages of order 1, measured by the
``train/advantage_mismatch`` metric of every update and asserted in the tests.

**Old log-probabilities.** TRL 1.16 without its own vLLM uses the rollout's ``logprobs`` for nothing but an
optional off-policy mask: the importance ratio's "old" log-probs are its own forward pass, detached (ratio 1
at the start of the step). With ``old_logprobs="sampling"`` (the default) the trainer subclass below puts
the sampling log-probs in their place, so the ratio is ``pi_theta / pi_sampler`` and the clip range bounds
the step against the policy that really produced the tokens (a stale or numerically different sampler,
vLLM in bf16). That needs ``temperature`` equal to the sampling temperature and top-p 1 / no top-k at
sampling; otherwise use ``"recompute"`` (TRL's on-policy behaviour).

**Driving TRL one step at a time.** ``Trainer.train()`` owns its loop (dataloader, epochs, ``max_steps``),
and calling it once per update would rebuild the scheduler and the trainer state every time. Instead the
updater performs, once, what ``train()`` does before its loop (trainer state, optimiser and scheduler
creation, ``accelerator.prepare``, ``on_train_begin``) and then, per :meth:`update`, the body of one
optimiser step of ``Trainer._run_epoch``: ``gradient_accumulation_steps`` calls of ``trainer.training_step``
(the first one reaches ``GRPOTrainer._prepare_inputs``, which calls our ``rollout_func``, computes the
advantages, shuffles and splits the batch into micro-batches; the others use its buffer), then gradient
clipping, ``optimizer.step()``, ``lr_scheduler.step()``, the step callbacks and ``trainer.log``. One trainer
lives for the whole run, so AdamW's moments, the schedule and the step counter carry over between calls.
These are private methods of transformers 5.24 / trl 1.16, which the project pins; the tests exercise them.

**The model.** The trainer wraps the very model object the policy generates with: on CPU/transformers an
update changes the next generation in place (with LoRA, PEFT injects the adapter layers into that model
too). TRL patches that model's ``forward`` with a fused log-prob head that only acts when called with
``fused_lm_head=True`` (generation is unchanged), and the updater sets its dropout to 0 (ratios of
exactly 1 on-policy). On a GPU give the trainer float32 weights: ``bf16`` is autocast, and pure-bf16
weights would round steps of lr 1e-6 away. Building the updater runs TRL's ``set_seed(seed)`` on the
global RNGs. A separate inference engine does not see the update: ``spade_rl.loop.updating.SyncingUpdater``
pushes the weights into vLLM servers after every step (``after_step`` and :meth:`merged_weights` serve
other engines).
Several processes (``accelerate launch``) get one updater each and hand each its own samples, whole groups
(``spade_rl.loop.distributed``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from trl import GRPOConfig, GRPOTrainer

from spade_rl.policy.models import cpu_has_fast_bf16, quiet_progress
from spade_rl.train.config import TrainConfig
from spade_rl.train.samples import Batch, Sample, assemble_batch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
_META = "spade_train.json"


@contextlib.contextmanager
def _quiet_dependency_warnings() -> Iterator[None]:
    """Silence what trl 1.16 / peft 0.21 say to us on every batch and that we cannot act on: the
    "experimental rollout_func" notice, and their calls of transformers' deprecated checkpointing names."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*rollout_func.*experimental", category=UserWarning)
        warnings.filterwarnings("ignore", message=r"`\w*gradient_checkpointing\w*` is deprecated")
        yield


@contextlib.contextmanager
def _score_completions_only() -> Iterator[None]:
    """TRL 1.16's fused log-prob head projects, on a device without Triton, every position of every row
    through the output head (its comment: so that tile shapes do not change and recompile on Neuron), the
    prompt's too, though only the completion's are read; on Triton devices only the labelled positions
    (the completion). Here the head takes the labelled positions everywhere: the loss and the gradient are
    the same (the prompt's values were masked to 0), and the CPU default's update skips the output head
    (a 576 x 49152 projection and its softmax statistics, forward and backward) on every prompt position:
    a 28-row update took 29 s instead of 43 s (measured). The name patched is the one
    ``trl.trainer.utils`` reads for that decision only; the kernels still choose Triton or torch by
    their own."""
    import trl.trainer.utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if original is None:  # another TRL: leave it as it is
        yield
        return
    trl_utils._use_triton = lambda device: True
    try:
        yield
    finally:
        trl_utils._use_triton = original


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


class SampleServingGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that keeps the advantages it computed and can take the sampler's log-probs as "old"."""

    use_sampling_logprobs: bool = True
    last_advantages: torch.Tensor | None = None  # this process's rows, in batch order (before the shuffle)
    # Micro-batches wider than this are computed with activation checkpointing (0: as configured for all).
    checkpoint_longer_than: int = 0
    _checkpointed_layers: tuple = ()

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        self.last_advantages = output["advantages"].detach().clone()
        if self.use_sampling_logprobs and output.get("sampling_per_token_logps") is not None:
            # Replaces TRL's detached forward pass (None when it skipped it): ratio = pi_theta / pi_sampler.
            output["old_per_token_logps"] = output["sampling_per_token_logps"]
        return output

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        """TRL's buffering of one generation batch into micro-batches, with two changes (text models only).

        TRL pads every row of the whole batch to its longest prompt and its longest completion, then
        shuffles and splits: a 1,400-token designer sample makes every 400-token agent row cost 1,400
        tokens of forward and backward, and padding forces the attention that keeps a ``L x L`` matrix per
        layer. Here rows are ordered by real length before the split and each micro-batch is cut to its own
        widest row. The gradient of the step is unchanged for the losses normalised over the whole batch
        (dapo, grpo, dr_grpo...; micro-batches keep equal row counts); "bnpo" normalises per micro-batch,
        so its step depends on which rows share one, as with TRL's random shuffle.
        """
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        steps = self.args.steps_per_generation
        if self._step % (steps * self.num_iterations) == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = [trim_padding(b) for b in split_by_length(batch, steps)]
        micro = self._buffered_inputs[self._step % steps]
        if self.checkpoint_longer_than:
            width = micro["prompt_ids"].shape[1] + micro["completion_ids"].shape[1]
            for layer in self._checkpointed_layers:
                layer.gradient_checkpointing = width > self.checkpoint_longer_than
        return micro


_PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def split_by_length(batch: dict[str, Any], chunks: int) -> list[dict[str, Any]]:
    """``batch`` (TRL's padded rows) split into ``chunks`` equal micro-batches of rows of similar length,
    longest first; per-row values (tensors or lists) follow their row, scalars are shared."""
    lengths = batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)
    rows = lengths.shape[0]
    if rows % chunks:
        raise ValueError(f"{rows} rows do not split into {chunks} equal micro-batches")
    order = sorted(range(rows), key=lambda r: (-int(lengths[r]), r))
    size = rows // chunks
    out = []
    for c in range(chunks):
        index = order[c * size : (c + 1) * size]
        part: dict[str, Any] = {}
        for key, value in batch.items():
            if isinstance(value, torch.Tensor) and value.ndim > 0:
                part[key] = value[torch.tensor(index, device=value.device)]
            elif isinstance(value, list):
                part[key] = [value[i] for i in index]
            else:
                part[key] = value
        out.append(part)
    return out


def trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """A micro-batch without the padding columns no row of it needs: prompts are left-padded (columns before
    the earliest real prompt token go), completions right-padded (columns after the longest go). Every 2-D
    tensor as wide as the completions (ids, masks, per-token log-probs, TRL's tool mask) is cut alike."""
    prompt_mask, completion_mask = batch["prompt_mask"], batch["completion_mask"]
    real = prompt_mask.any(0).nonzero()
    first = int(real[0]) if len(real) else prompt_mask.shape[1] - 1
    width = completion_mask.shape[1]
    keep = max(1, int(completion_mask.sum(1).max()))
    out = dict(batch)
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.ndim != 2:
            continue
        if key in _PROMPT_KEYS:
            out[key] = value[:, first:]
        elif value.shape[1] == width:
            out[key] = value[:, :keep]
    return out


class GRPOUpdater:
    """One GRPO optimiser step per :meth:`update` on a mixed designer + agent batch (see the module doc).

    ``after_step(updater)`` runs after every optimiser step: the hook for pushing weights to an engine that
    holds its own copy of them.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: TrainConfig | None = None,
        *,
        after_step: Callable[[GRPOUpdater], None] | None = None,
    ) -> None:
        self.config = config if config is not None else TrainConfig()
        self.after_step = after_step
        self._pending: Batch | None = None
        self._scratch = None if self.config.output_dir else tempfile.TemporaryDirectory(prefix="spade-train-")
        self._warned_schedule_end = False
        self.trainer = self._build_trainer(model, tokenizer)
        self._wrapped = self._begin_training()
        pad = tokenizer.pad_token_id
        self.filler_token_id = pad if pad is not None else tokenizer.eos_token_id
        log.info(
            "GRPO updater ready: %d rows per update in blocks of %d, loss %s, lr %g, lora %s, device %s",
            self.rows_per_update,
            self.config.num_generations,
            self.config.loss_type,
            self.config.learning_rate,
            self.config.use_lora,
            self.trainer.args.device,
        )

    @classmethod
    def for_policy(cls, policy: Any, config: TrainConfig | None = None, **kwargs: Any) -> GRPOUpdater:
        """An updater around a policy that holds its model in process (``TransformersPolicy``)."""
        model = getattr(policy, "model", None)
        if model is None or not hasattr(model, "parameters"):
            raise TypeError(f"{type(policy).__name__} holds no in-process model to train")
        return cls(model, policy.tokenizer, config, **kwargs)

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
        centred, at most ``rows_per_update`` rows once laid out in blocks of ``num_generations``).
        Returns namespaced metrics: ``train/loss``, ``train/grad_norm``, ``train/kl`` (beta > 0),
        ``train/clip_ratio/...``, ``train/entropy``, per-role counts, ``time/train_s``, ..."""
        start = time.perf_counter()
        cfg, trainer = self.config, self.trainer
        batch = assemble_batch(
            samples,
            cfg.num_generations,
            self.rows_per_update,
            self.filler_token_id,
            cfg.max_completion_length,
        )
        if batch.no_logprobs and cfg.old_logprobs == "sampling":
            log.warning(
                "%d samples have log-prob 0.0 on every model token (sampled without log-probs?): their "
                "importance ratios against the sampler are wrong; use old_logprobs='recompute'",
                batch.no_logprobs,
            )
        micro_steps = trainer.args.gradient_accumulation_steps
        rows = [{"prompt": ""} for _ in range(len(batch))]  # what the rollout_func is asked to "complete"
        trainer._buffered_inputs = None  # the first micro-step generates (= serves this batch)
        trainer._step -= trainer._step % trainer.args.steps_per_generation
        trainer.current_gradient_accumulation_steps = micro_steps
        trainer.control = trainer.callback_handler.on_step_begin(trainer.args, trainer.state, trainer.control)
        self._pending = batch
        loss = 0.0
        try:
            with _quiet_dependency_warnings(), _score_completions_only():
                for i in range(micro_steps):
                    last = i == micro_steps - 1
                    trainer.accelerator.gradient_state._set_sync_gradients(last)
                    no_sync = trainer.accelerator.no_sync(model=self._wrapped)
                    with contextlib.nullcontext() if last else no_sync:
                        loss += float(trainer.training_step(self._wrapped, rows, None))
        except BaseException:
            self._wrapped.zero_grad()
            raise
        finally:
            self._pending = None
        grad_norm = self._optimizer_step()
        logs: dict[str, Any] = {"loss": loss, "grad_norm": grad_norm, "learning_rate": self._last_lr}
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
        if self.after_step is not None:
            self.after_step(self)
        return metrics

    @contextlib.contextmanager
    def merged_weights(self) -> Iterator[dict[str, torch.Tensor]]:
        """The full weights under the base model's parameter names (LoRA merged in for the duration):
        what an inference engine with its own copy of the model needs after a step."""
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        if not hasattr(model, "merge_adapter"):
            yield dict(model.state_dict())
            return
        model.merge_adapter()
        try:
            weights = {}
            for name, tensor in model.state_dict().items():
                if "lora_" in name or "original_module" in name:
                    continue
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                weights[name] = tensor
            yield weights
        finally:
            model.unmerge_adapter()

    def save(self, directory: str | Path) -> Path:
        """Write a checkpoint: the model (HF format) or the LoRA adapter under ``model/``, the optimiser
        and scheduler states, the RNG states, the trainer state and the step counters."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        trainer = self.trainer
        with quiet_progress():  # no "Writing model shards" bar in the run's output at every checkpoint
            trainer.save_model(str(path / "model"))
        trainer._save_optimizer_and_scheduler(str(path))
        trainer._save_rng_state(str(path))
        trainer.state.save_to_json(str(path / "trainer_state.json"))
        meta = {
            "format": CHECKPOINT_FORMAT,
            "global_step": trainer.state.global_step,
            "trl_step": trainer._step,
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
        for key in (
            "use_lora",
            "num_generations",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
        ):
            if saved.get(key) != getattr(self.config, key):
                raise ValueError(
                    f"checkpoint {path} was written with {key}={saved.get(key)!r}, this updater has "
                    f"{key}={getattr(self.config, key)!r}"
                )
        trainer = self.trainer
        self._load_weights(path / "model")
        trainer._load_optimizer_and_scheduler(str(path))
        trainer._load_rng_state(str(path))
        from transformers import TrainerState

        state = TrainerState.load_from_json(str(path / "trainer_state.json"))
        for name in ("global_step", "epoch", "num_input_tokens_seen", "total_flos", "log_history"):
            setattr(trainer.state, name, getattr(state, name))
        trainer._step = meta["trl_step"]
        trainer._buffered_inputs = None
        log.info("loaded GRPO checkpoint at step %d from %s", trainer.state.global_step, path)

    def close(self) -> None:
        """End the run for the callbacks (flushes tensorboard / wandb)."""
        trainer = self.trainer
        trainer.control = trainer.callback_handler.on_train_end(trainer.args, trainer.state, trainer.control)
        trainer.is_in_train = False
        if self._scratch is not None:
            self._scratch.cleanup()

    # --- construction ----------------------------------------------------------------------------------

    def _build_trainer(self, model: Any, tokenizer: Any) -> SampleServingGRPOTrainer:
        from datasets import Dataset
        from transformers import PrinterCallback, ProgressCallback

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
        bf16 = resolve_bf16(cfg.bf16, on_gpu)
        checkpointing = cfg.gradient_checkpointing if cfg.gradient_checkpointing is not None else on_gpu
        head_fp32 = cfg.cast_lm_head_to_fp32 if cfg.cast_lm_head_to_fp32 is not None else bool(bf16)
        # Full fine-tuning with a KL term: TRL would reload the reference from the model's hub id or folder;
        # an in-memory copy taken now works for any model (and is what that reload would give at step 0).
        reference = copy.deepcopy(model) if cfg.beta > 0 and not cfg.use_lora else None
        args = GRPOConfig(
            output_dir=cfg.output_dir or self._scratch.name,
            learning_rate=cfg.learning_rate,
            lr_scheduler_type=cfg.lr_scheduler_type,
            warmup_steps=cfg.warmup_steps,
            max_steps=cfg.max_steps,
            weight_decay=cfg.weight_decay,
            max_grad_norm=cfg.max_grad_norm,
            loss_type=cfg.loss_type,
            epsilon=cfg.epsilon_low,
            epsilon_high=cfg.epsilon_high,
            beta=0.0 if reference is not None else cfg.beta,
            temperature=cfg.temperature,
            scale_rewards="none",
            num_generations=cfg.num_generations,
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
        peft_config = None
        if cfg.use_lora:
            from peft import LoraConfig

            targets = cfg.lora_target_modules
            peft_config = LoraConfig(
                r=cfg.lora_rank,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=cfg.lora_dropout,
                target_modules="all-linear" if targets == ("all-linear",) else list(targets),
                bias="none",
                task_type="CAUSAL_LM",
            )
        with _quiet_dependency_warnings():
            trainer = SampleServingGRPOTrainer(
                model=model,
                reward_funcs=[designer_advantage, agent_advantage],
                args=args,
                train_dataset=Dataset.from_dict({"prompt": [""]}),  # never iterated: update() feeds the rows
                processing_class=tokenizer,
                rollout_func=self._serve,
                peft_config=peft_config,
            )
        trainer.use_sampling_logprobs = cfg.old_logprobs == "sampling"
        for callback in (PrinterCallback, ProgressCallback):  # library code does not print
            trainer.remove_callback(callback)
        if reference is not None:
            self._attach_reference(trainer, reference)
        return trainer

    def _attach_reference(self, trainer: SampleServingGRPOTrainer, reference: Any) -> None:
        """What GRPOTrainer does with a reference model it loaded itself, for the copy taken in memory."""
        from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

        reference.requires_grad_(False)
        reference.eval()
        disable_dropout_in_model(reference)
        args = trainer.args
        add_fused_lm_head(
            reference, temperature=args.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32
        )
        trainer.ref_model = trainer.accelerator.prepare_model(reference, evaluation_mode=True)
        trainer.beta = args.beta = self.config.beta

    def _begin_training(self) -> Any:
        """What ``Trainer.train()`` does before its loop; returns the prepared (possibly wrapped) model."""
        trainer, args = self.trainer, self.trainer.args
        trainer.is_in_train = True
        if args.activation_checkpointing:
            kwargs = dict(args.activation_checkpointing_kwargs or {}) or None
            trainer.model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        elif self.config.checkpoint_rows_longer_than:
            # Installed once, then switched per micro-batch by its width (SampleServingGRPOTrainer).
            trainer.model.activation_checkpointing_enable()
            from transformers.modeling_layers import GradientCheckpointingLayer

            layers = [m for m in trainer.model.modules() if isinstance(m, GradientCheckpointingLayer)]
            for layer in layers:
                layer.gradient_checkpointing = False
            trainer._checkpointed_layers = layers
            trainer.checkpoint_longer_than = self.config.checkpoint_rows_longer_than
        max_steps = args.max_steps
        trainer._init_training_state(max_steps, max_steps, 1, None, None)
        wrapped, _ = trainer._prepare_for_training(max_steps, None, None)
        trainer._initial_num_input_tokens_seen = trainer.state.num_input_tokens_seen
        trainer._initial_global_step = trainer.state.global_step
        wrapped.zero_grad()
        trainer.control = trainer.callback_handler.on_train_begin(args, trainer.state, trainer.control)
        return wrapped

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

    def _optimizer_step(self) -> float:
        """The end of one step of ``Trainer._run_epoch``: clip, step, schedule, count, callbacks."""
        trainer, args = self.trainer, self.trainer.args
        handler = trainer.callback_handler
        grad_norm = trainer._clip_grad_norm(self._wrapped) if args.max_grad_norm > 0 else None
        grad_norm = trainer._get_grad_norm(self._wrapped, grad_norm=grad_norm)
        trainer.control = handler.on_pre_optimizer_step(args, trainer.state, trainer.control)
        trainer.optimizer.step()
        trainer.control = handler.on_optimizer_step(args, trainer.state, trainer.control)
        self._last_lr = trainer._get_learning_rate()
        if not trainer.accelerator.optimizer_step_was_skipped:
            trainer.lr_scheduler.step()
        self._wrapped.zero_grad()
        trainer.state.global_step += 1
        trainer.control = handler.on_step_end(args, trainer.state, trainer.control)
        if trainer.state.global_step >= args.max_steps and not self._warned_schedule_end:
            self._warned_schedule_end = True
            if self.config.lr_scheduler_type in ("linear", "cosine"):
                log.warning("step %d reached max_steps: the learning-rate schedule has ended", self.step)
        return float(grad_norm)

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
