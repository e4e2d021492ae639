"""The one seam to TRL's and transformers' private API: every underscored call the updater needs lives here.

    trainer = build_trainer(model, tokenizer, args, rollout_func=serve, peft_config=None)
    wrapped = begin_training(trainer)                     # what Trainer.train() does before its loop
    loss = accumulate_gradients(trainer, wrapped, rows)   # the micro-steps of one optimiser step
    grad_norm, lr = optimizer_step(trainer, wrapped)      # clip, step, schedule, callbacks

:class:`spade_rl.train.updater.GRPOUpdater` drives one persistent TRL ``GRPOTrainer`` one optimiser step
per call. ``Trainer.train()`` owns its loop, so the functions below do, once, what ``train()`` does
before it, and per update the body of one step of ``Trainer._run_epoch``. The trainer subclass overrides
three methods: ``_generate_and_score_completions`` (keeps the advantages; the sampler's log-probs as
"old"), ``_prepare_inputs`` (length-sorted, trimmed micro-batches) and ``compute_loss`` (Trainer's public
override point: the loss of :mod:`spade_rl.train.loss` on TRL's per-token log-probs, so that TRL's fused
output head keeps working). They are private methods of the pinned versions below: importing this module
with other versions raises, and ``tests/train`` exercises each of them.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

# What pyproject.toml pins (a test checks that the two agree).
PINNED_VERSIONS = {"trl": "1.16.0", "transformers": "5.24.0"}
# After a micro-step of rows at least this wide (tokens), freed memory goes back to the system before the
# next one (accumulate_gradients); narrower ones (filler rows, short answers) free too little to matter.
TRIM_AFTER_TOKENS = 128


def check_versions(installed: dict[str, str] | None = None) -> None:
    """Raise unless trl and transformers are the pinned versions (``installed`` overrides the lookup)."""
    if installed is None:
        installed = {name: importlib.metadata.version(name) for name in PINNED_VERSIONS}
    wrong = {name: installed.get(name) for name, pin in PINNED_VERSIONS.items() if installed.get(name) != pin}
    if wrong:
        found = ", ".join(f"{name} {version}" for name, version in wrong.items())
        pins = ", ".join(f"{name}=={pin}" for name, pin in PINNED_VERSIONS.items())
        raise ImportError(
            f"spade_rl.train drives private methods of {pins} (pinned in pyproject.toml), found {found}: "
            f"install the pinned versions (pip install {' '.join(pins.split(', '))})"
        )


check_versions()

from trl import GRPOTrainer  # noqa: E402  (after the version check, which says what is wrong)
from trl.extras.profiling import profiling_decorator  # noqa: E402

from spade_rl.memory import release_unused_memory  # noqa: E402
from spade_rl.train.loss import LOSS_TYPES, GRPOLoss, LossSettings, grpo_loss  # noqa: E402
from spade_rl.train.micro_batches import split_by_length, trim_padding  # noqa: E402


@contextlib.contextmanager
def quiet_dependency_warnings() -> Iterator[None]:
    """Silence what trl 1.16 / peft 0.21 say to us on every batch and that we cannot act on: the
    "experimental rollout_func" notice, and their calls of transformers' deprecated checkpointing names."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*rollout_func.*experimental", category=UserWarning)
        warnings.filterwarnings("ignore", message=r"`\w*gradient_checkpointing\w*` is deprecated")
        yield


@contextlib.contextmanager
def score_completions_only() -> Iterator[None]:
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


def trained_mask(inputs: dict[str, Any]) -> torch.Tensor:
    """1 on the completion tokens a micro-batch trains: the completion's, but the environment's (TRL's
    ``tool_mask``, our rows' ``env_mask``)."""
    mask = inputs["completion_mask"]
    return mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]


# What TRL passes on to the model besides ids and mask (images, token types); the updater serves text only.
_MODEL_INPUTS_BEYOND_TEXT = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "token_type_ids",
    "mm_token_type_ids",
)


class SampleServingGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that keeps the advantages it computed, can take the sampler's log-probs as "old",
    buffers length-sorted micro-batches and computes the loss of :mod:`spade_rl.train.loss`."""

    use_sampling_logprobs: bool = True
    tis_cap: float | None = None  # TrainConfig.tis_cap: truncated importance sampling against the sampler
    last_advantages: torch.Tensor | None = None  # this process's rows, in batch order (before the shuffle)
    # Micro-batches wider than this are computed with activation checkpointing (0: as configured for all).
    checkpoint_longer_than: int = 0
    checkpointed_layers: tuple = ()
    micro_width: int = 0  # tokens per row (prompt + completion) of the micro-batch prepared last

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        self.last_advantages = output["advantages"].detach().clone()
        if self.use_sampling_logprobs and output.get("sampling_per_token_logps") is not None:
            # Replaces TRL's detached forward pass (None when it skipped it): ratio = pi_theta / pi_sampler.
            output["old_per_token_logps"] = output["sampling_per_token_logps"]
        return output

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        """TRL's buffering of one generation batch into micro-batches, with two changes (text models only):
        rows are ordered by real length before the split and each micro-batch is cut to its own widest row
        (:mod:`spade_rl.train.micro_batches`), instead of padding all to the longest and shuffling. The
        gradient of the step is unchanged for the losses normalised over the whole batch (dapo, grpo,
        dr_grpo...; micro-batches keep equal row counts); "bnpo" normalises per micro-batch, so its step
        depends on which rows share one, as with TRL's random shuffle."""
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        steps = self.args.steps_per_generation
        if self._step % (steps * self.num_iterations) == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = [trim_padding(b) for b in split_by_length(batch, steps)]
        micro = self._buffered_inputs[self._step % steps]
        width = micro["prompt_ids"].shape[1] + micro["completion_ids"].shape[1]
        self.micro_width = width
        if self.checkpoint_longer_than:
            for layer in self.checkpointed_layers:
                layer.gradient_checkpointing = width > self.checkpoint_longer_than
        return micro

    def loss_is_ours(self) -> bool:
        """Whether :mod:`spade_rl.train.loss` covers this trainer's settings: its four loss types, without
        the TRL options the updater never sets (MoE router loss, entropy masks and bonus, off-policy masks,
        two-sided clipping, sequence-level ratios, vLLM's importance weights). Otherwise TRL's own runs."""
        args = self.args
        return (
            self.loss_type in LOSS_TYPES
            and not self.aux_loss_enabled
            and self.top_entropy_quantile == 1.0
            and not self._entropy_bonus_enabled
            and self.off_policy_mask_threshold is None
            and args.delta is None
            and self.importance_sampling_level == "token"
            and args.use_bias_correction_kl
            and not (self.use_vllm and self.vllm_importance_sampling_correction)
        )

    @profiling_decorator
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The micro-batch's loss by :func:`spade_rl.train.loss.grpo_loss`, its metrics logged under TRL's
        names. The per-token log-probs and entropies come from TRL's forward pass (fused head, completion
        positions only), as in ``GRPOTrainer._compute_loss``."""
        if return_outputs:
            raise ValueError("The GRPOTrainer does not support returning outputs")
        if not self.loss_is_ours() or any(key in inputs for key in _MODEL_INPUTS_BEYOND_TEXT):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        completion_mask = inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        mask = trained_mask(inputs)
        logps, entropies = self._trained_logps_and_entropies(model, input_ids, attention_mask, mask)
        old_logps = inputs.get("old_per_token_logps")
        old_logps = logps.detach() if old_logps is None else old_logps  # on-policy: ratio 1
        mode = "train" if self.model.training else "eval"
        micro_batches = self.current_gradient_accumulation_steps if mode == "train" else 1
        # dapo: `num_items_in_batch` counts the trained tokens of every process's generation batch
        batch_tokens = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":  # in eval the batch is neither split across steps nor accumulated
            accumulated = self.current_gradient_accumulation_steps
            batch_tokens = batch_tokens * accumulated / self.args.steps_per_generation
        settings = LossSettings(
            loss_type=self.loss_type,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            beta=self.beta,
            max_completion_length=self.max_completion_length,
            tis_cap=self.tis_cap,
        )
        sampling_logps = inputs.get("sampling_per_token_logps") if self.tis_cap is not None else None
        if self.tis_cap is not None and sampling_logps is None:
            raise ValueError(
                "train.tis_cap needs the sampler's log-probs, and these samples have none "
                "(a backend that returns no log-probs): set train.tis_cap = none"
            )
        out = grpo_loss(
            logps,
            old_logps,
            inputs["advantages"],
            mask,
            settings,
            ref_logps=inputs.get("ref_per_token_logps"),
            sampling_logps=sampling_logps,
            batch_tokens=batch_tokens,
            micro_batches=micro_batches,
        )
        self._log_loss_metrics(mode, out, entropies)
        return out.loss

    # Off: every completion position through the output head, as TRL scores them (tests compare the two).
    score_trained_only: bool = True

    def _trained_logps_and_entropies(
        self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs and entropies of the completion positions [rows, completion width], from TRL's
        fused output head, scored only where ``mask`` is 1 (the tokens the loss trains; 0 elsewhere).

        TRL's ``_get_per_token_logps_and_entropies`` labels every completion token: in a multi-turn agent
        row most are the environment's (observations, the chat template), whose log-probs the loss masks
        out, and each labelled position costs a 576 x 49152 projection, its softmax statistics and their
        backward in float32. Here their labels are -100 like the prompt's, which the fused head skips: the
        same loss, gradient and (masked) metrics."""
        width = mask.size(1)
        if not self.score_trained_only:
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, width, compute_entropy=True
            )
            return logps, entropies
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        labels[:, :-width] = -100
        labels[:, -width:] = labels[:, -width:].masked_fill(mask == 0, -100)
        with self.accelerator.autocast():
            outputs = model(
                input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True
            )
        return outputs.log_probs[:, -width:], outputs.entropy[:, -width:]

    def _log_loss_metrics(self, mode: str, out: GRPOLoss, entropies: torch.Tensor) -> None:
        """TRL's metrics of one micro-batch: token means over every process, per-row extremes gathered."""
        metrics = self._metrics[mode]
        sums = out.token_sums()
        sums["entropy"] = (entropies * out.mask).sum()
        tokens = sums.pop("tokens")
        for name in ("kl", "entropy", *(f"clip_ratio/{k}_mean" for k in ("low", "high", "region"))):
            if name in sums:
                totals = self.accelerator.reduce(torch.stack([sums[name], tokens]), reduction="sum")
                metrics[name].append((totals[0] / totals[1].clamp(min=1.0)).item())
        rows = out.row_means()
        metrics["clip_ratio/low_min"].append(_nanmin(self.accelerator.gather(rows["clip_ratio/low_min"])))
        metrics["clip_ratio/high_max"].append(_nanmax(self.accelerator.gather(rows["clip_ratio/high_max"])))


def _nanmin(values: torch.Tensor) -> float:
    values = values[~values.isnan()]
    return float(values.min()) if len(values) else float("nan")


def _nanmax(values: torch.Tensor) -> float:
    values = values[~values.isnan()]
    return float(values.max()) if len(values) else float("nan")


# --- driving the trainer one step at a time -----------------------------------------------------------


def build_trainer(
    model: Any,
    tokenizer: Any,
    args: Any,
    *,
    reward_funcs: list[Callable],
    rollout_func: Callable,
    peft_config: Any = None,
    use_sampling_logprobs: bool = True,
    tis_cap: float | None = None,
) -> SampleServingGRPOTrainer:
    """The trainer around ``model`` (TRL's ``GRPOConfig`` ``args``), without the callbacks that print."""
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback

    with quiet_dependency_warnings():
        trainer = SampleServingGRPOTrainer(
            model=model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": [""]}),  # never iterated: update() feeds the rows
            processing_class=tokenizer,
            rollout_func=rollout_func,
            peft_config=peft_config,
        )
    trainer.use_sampling_logprobs = use_sampling_logprobs
    trainer.tis_cap = tis_cap
    for callback in (PrinterCallback, ProgressCallback):  # library code does not print
        trainer.remove_callback(callback)
    return trainer


def attach_reference(trainer: SampleServingGRPOTrainer, reference: Any, beta: float) -> None:
    """What GRPOTrainer does with a reference model it loaded itself, for a copy taken in memory (the
    trainer was built with beta 0 so that it loaded none)."""
    from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

    reference.requires_grad_(False)
    reference.eval()
    disable_dropout_in_model(reference)
    args = trainer.args
    add_fused_lm_head(reference, temperature=args.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32)
    trainer.ref_model = trainer.accelerator.prepare_model(reference, evaluation_mode=True)
    trainer.beta = args.beta = beta


def begin_training(trainer: SampleServingGRPOTrainer, checkpoint_rows_longer_than: int = 0) -> Any:
    """What ``Trainer.train()`` does before its loop; returns the prepared (possibly wrapped) model."""
    args = trainer.args
    trainer.is_in_train = True
    if args.activation_checkpointing:
        kwargs = dict(args.activation_checkpointing_kwargs or {}) or None
        trainer.model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif checkpoint_rows_longer_than:
        # Installed once, then switched per micro-batch by its width (SampleServingGRPOTrainer).
        from spade_rl.policy.models import switchable_checkpointing

        trainer.checkpointed_layers = tuple(switchable_checkpointing(trainer.model))
        trainer.checkpoint_longer_than = checkpoint_rows_longer_than
    max_steps = args.max_steps
    trainer._init_training_state(max_steps, max_steps, 1, None, None)
    wrapped, _ = trainer._prepare_for_training(max_steps, None, None)
    trainer._initial_num_input_tokens_seen = trainer.state.num_input_tokens_seen
    trainer._initial_global_step = trainer.state.global_step
    wrapped.zero_grad()
    trainer.control = trainer.callback_handler.on_train_begin(args, trainer.state, trainer.control)
    return wrapped


def accumulate_gradients(trainer: SampleServingGRPOTrainer, wrapped: Any, rows: int) -> float:
    """The ``gradient_accumulation_steps`` micro-steps of one optimiser step (gradients synchronised on
    the last one only); the first reaches ``_prepare_inputs``, which asks the rollout_func for the batch of
    ``rows`` rows. A micro-batch without a trained token (filler rows) is counted but not computed, in a
    single process whose loss is ours (:func:`_trains_nothing`; across processes every one computes every
    micro-step, as their gradient and metric reductions must meet). Returns the sum of the micro-steps'
    losses; gradients are cleared if one raises."""
    args = trainer.args
    micro_steps = args.gradient_accumulation_steps
    prompts = [{"prompt": ""} for _ in range(rows)]  # what the rollout_func is asked to "complete"
    trainer._buffered_inputs = None  # the first micro-step generates (= serves the batch)
    trainer._step -= trainer._step % args.steps_per_generation
    trainer.current_gradient_accumulation_steps = micro_steps
    trainer.control = trainer.callback_handler.on_step_begin(args, trainer.state, trainer.control)
    loss = 0.0
    skip = trainer.accelerator.num_processes == 1 and trainer.loss_is_ours()
    try:
        with quiet_dependency_warnings(), score_completions_only():
            for i in range(micro_steps):
                if i and skip and _trains_nothing(trainer):
                    _skip_micro_step(trainer)
                    continue
                last = i == micro_steps - 1
                trainer.accelerator.gradient_state._set_sync_gradients(last)
                no_sync = trainer.accelerator.no_sync(model=wrapped)
                with contextlib.nullcontext() if last else no_sync:
                    loss += float(trainer.training_step(wrapped, prompts, None))
                if trainer.micro_width >= TRIM_AFTER_TOKENS:
                    # Each micro-step frees its activations in pieces of every size, and the next, of another
                    # width, allocates beside them: without this the heap kept about 0.9 GB of freed memory
                    # by the end of a default update and its peak grew by as much (spade_rl.memory).
                    release_unused_memory()
        # The last micro-step, if skipped, did not set what accelerate's optimiser wrapper steps on.
        trainer.accelerator.gradient_state._set_sync_gradients(True)
    except BaseException:
        wrapped.zero_grad()
        raise
    return loss


def _trains_nothing(trainer: SampleServingGRPOTrainer) -> bool:
    """Whether the micro-batch that the next micro-step would compute has no trained token (filler rows
    only, :func:`spade_rl.train.samples.assemble_batch`): every loss of :mod:`spade_rl.train.loss` masks
    each term, so its loss and gradient are exactly 0 and the step is the same without it."""
    buffered = trainer._buffered_inputs
    if not buffered:
        return False
    micro = buffered[trainer._step % trainer.args.steps_per_generation]
    return "completion_mask" in micro and not bool(trained_mask(micro).any())


def _skip_micro_step(trainer: SampleServingGRPOTrainer) -> None:
    """What ``GRPOTrainer.training_step`` counts for a micro-step, without its forward and backward pass
    (a default update has 16 filler rows of 28: each cost 0.35 s of casts and gradient accumulation)."""
    trainer._step += 1
    if trainer._step % trainer.current_gradient_accumulation_steps == 0:
        trainer._metrics["train"]["step_time"].append(trainer._current_train_step_time)
        trainer._current_train_step_time = 0.0


def optimizer_step(trainer: SampleServingGRPOTrainer, wrapped: Any) -> tuple[float, float]:
    """The end of one step of ``Trainer._run_epoch``: clip, step, schedule, count, callbacks. Returns the
    gradient norm (before clipping) and the learning rate the step used."""
    args, handler = trainer.args, trainer.callback_handler
    grad_norm = trainer._clip_grad_norm(wrapped) if args.max_grad_norm > 0 else None
    grad_norm = trainer._get_grad_norm(wrapped, grad_norm=grad_norm)
    trainer.control = handler.on_pre_optimizer_step(args, trainer.state, trainer.control)
    trainer.optimizer.step()
    trainer.control = handler.on_optimizer_step(args, trainer.state, trainer.control)
    learning_rate = trainer._get_learning_rate()
    if not trainer.accelerator.optimizer_step_was_skipped:
        trainer.lr_scheduler.step()
    wrapped.zero_grad()
    trainer.state.global_step += 1
    trainer.control = handler.on_step_end(args, trainer.state, trainer.control)
    return float(grad_norm), learning_rate


def micro_step_count(trainer: SampleServingGRPOTrainer) -> int:
    """TRL's own count of micro-steps (it decides when to generate): saved with a checkpoint."""
    return trainer._step


def save_training_state(trainer: SampleServingGRPOTrainer, path: Path) -> None:
    """The optimiser, scheduler and RNG states into ``path`` (transformers' file names)."""
    trainer._save_optimizer_and_scheduler(str(path))
    trainer._save_rng_state(str(path))


def load_training_state(trainer: SampleServingGRPOTrainer, path: Path, micro_steps: int) -> None:
    """What :func:`save_training_state` wrote, and TRL's micro-step count; the next step generates anew."""
    trainer._load_optimizer_and_scheduler(str(path))
    trainer._load_rng_state(str(path))
    trainer._step = micro_steps
    trainer._buffered_inputs = None


def end_training(trainer: SampleServingGRPOTrainer) -> None:
    """End the run for the callbacks (flushes tensorboard / wandb)."""
    trainer.control = trainer.callback_handler.on_train_end(trainer.args, trainer.state, trainer.control)
    trainer.is_in_train = False
