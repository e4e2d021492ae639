"""The configuration of the GRPO update: one frozen dataclass, validated on construction.

    config = TrainConfig(learning_rate=1e-6, group_size=8, per_device_train_batch_size=8)
    config.rows_per_update        # the most samples one optimiser step takes, per process

Names follow TRL's ``GRPOConfig`` where one exists, so that a reader can look the meaning up there (the
learner, :mod:`spade_rl.train.learner`, does not use TRL).
``learning_rate`` defaults to 1e-6, the paper's value for full fine-tuning of a multi-billion-parameter
model; a tiny model on a CPU (tests, smoke runs) moves visibly only at about 1e-4 to 1e-3, and LoRA usually
wants about 1e-5 to 1e-4. ``temperature`` must be the temperature the samples were drawn at: the learner
divides the logits by it before computing the log-probabilities that enter the importance ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The loss variants of spade_rl.train.loss (TRL's names). TRL's GRPOTrainer has others (cispo, sapo, luspo,
# vespo): train with TRL itself for those (spade_rl.interop.trl).
LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")
TRL_ONLY_LOSS_TYPES = ("cispo", "sapo", "luspo", "vespo")
# Where the "old" log-probabilities of the importance ratio come from (see spade_rl.train.learner).
OLD_LOGPROBS = ("auto", "sampling", "recompute")
TIS_CAP = (
    2.0  # truncated importance sampling's cap where old_logprobs = "auto" recomputes (slime's --tis-clip)
)
REPORT_TO = ("none", "tensorboard", "wandb")
# The lowest learning rate at which full fine-tuning of 16-bit weights is allowed. AdamW moves a weight by
# about the learning rate per step; bfloat16 keeps 8 significant bits, so a weight of size w is stored to
# about w * 2^-9 (4e-5 for w = 0.02, float16: 1e-5): a step of 1e-6 rounds back to the same number.
LOWEST_LR_16BIT = 1e-5
LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")


@dataclass(frozen=True)
class TrainConfig:
    # optimiser
    learning_rate: float = 1e-6
    lr_scheduler_type: str = "constant"
    warmup_steps: int = 0
    max_steps: int = 100_000  # the length of a decaying learning-rate schedule, in updates
    weight_decay: float = 0.0
    adam_beta1: float = 0.9  # AdamW's moment decays (transformers' defaults; the reference: 0.9, 0.98)
    adam_beta2: float = 0.999
    max_grad_norm: float = 1.0  # 0 turns clipping off
    # GRPO loss
    loss_type: str = "dapo"  # TRL's default: tokens normalised over the whole batch
    epsilon_low: float = 0.2  # the clip range of the importance ratio: [1 - low, 1 + high]
    epsilon_high: float = 0.28
    beta: float = 0.0  # KL coefficient against the model as it was when the learner was built
    temperature: float = 0.6  # the sampling temperature of the samples
    # Where the ratio's old log-probs come from. "sampling": the sampler's own (right when the trainer is the
    # sampler); "recompute": the trainer's, on-policy (1 at the start of a step); "auto" (see resolved):
    # "recompute" with truncated importance sampling where another engine samples (vLLM, servers), whose
    # log-probs differ from the trainer's and whose ratio would be unbounded for negative advantages, and
    # "sampling" where the trainer samples itself.
    old_logprobs: str = "auto"
    # Truncated importance sampling (with recomputed old log-probs, as the reference trains: slime's
    # --use-tis): each token's loss weighted by min(pi_old / pi_sampler, tis_cap), detached, so that a
    # sampler that differs from the trainer (vLLM in bf16, stale weights) does not bias the gradient.
    # None: off with old_logprobs = "recompute", TIS_CAP where "auto" recomputes. With "sampling" the ratio
    # is already taken against the sampler, and a cap is refused.
    tis_cap: float | None = None
    # batch geometry
    group_size: int = 8  # G: the most samples one GRPO group may hold (TRL's num_generations)
    per_device_train_batch_size: int = 8  # rows per forward/backward pass
    # passes per optimiser step at most: a step takes up to per_device_train_batch_size * this many rows
    # (rows_per_update) and makes as many passes as its rows need
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 4096  # longer completions keep their first tokens
    # model
    use_lora: bool = False
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = ("all-linear",)
    # None: bf16 autocast when the model is on a GPU that supports it, else fp32; "auto": also on a CPU
    # with native bf16 products (AVX512-BF16 or AMX: the CPU default's update 1.5x faster, measured)
    bf16: bool | str | None = None
    # The output head in float32 under bf16 autocast (TRL's cast_lm_head_to_fp32). None: whenever the update
    # runs in bf16, so that its log-probs are computed as generation computes them (its head stays in
    # float32): measured on the default model, 24 sampled rows, the importance ratio at the start of a step
    # was outside the clip range [0.8, 1.28] for 0.8% of tokens with a bf16 head, 0.08% with a float32 one
    # (mean |log-prob difference| 0.027 vs 0.015).
    cast_lm_head_to_fp32: bool | None = None
    gradient_checkpointing: bool | None = None  # None: on for a GPU, off on the CPU
    # Without gradient_checkpointing: micro-batches wider than this many tokens (prompt + completion) are
    # computed with activation checkpointing all the same (0: none). On a CPU at one row per pass, the
    # activations take about 2.3 MB per token (SmolLM2-135M, bf16 autocast, measured): a 600-token
    # designer row held 1.4 GB for its pass; checkpointed, it costs one more forward pass instead.
    checkpoint_rows_longer_than: int = 0
    # The optimiser's state (AdamW's moments: twice the model's float32 weights, 1.08 GB on the default
    # model) written to the run directory between updates and read back before the next one, so that the
    # design, play and evaluation phases do not hold it (spade_rl.train.offload): the same training, for
    # one write and one read of that size per iteration.
    offload_optimizer: bool = False
    # bookkeeping
    seed: int = 0
    output_dir: str | None = None  # where report_to backends write (tensorboard: output_dir/runs); needed
    # for report_to other than "none"
    report_to: str = "none"

    def __post_init__(self) -> None:
        _choice("lr_scheduler_type", self.lr_scheduler_type, LR_SCHEDULERS)
        if self.loss_type in TRL_ONLY_LOSS_TYPES:
            raise ValueError(
                f"train loss_type {self.loss_type!r} is one of TRL's own losses, which spade-rl's learner "
                f"does not compute: use one of {list(LOSS_TYPES)}, or train with TRL (spade_rl.interop.trl)"
            )
        _choice("loss_type", self.loss_type, LOSS_TYPES)
        _choice("old_logprobs", self.old_logprobs, OLD_LOGPROBS)
        _choice("report_to", self.report_to, REPORT_TO)
        _number("learning_rate", self.learning_rate, low=0.0, low_open=True)
        _number("weight_decay", self.weight_decay, low=0.0)
        _number("adam_beta1", self.adam_beta1, low=0.0, high=1.0, high_open=True)
        _number("adam_beta2", self.adam_beta2, low=0.0, high=1.0, high_open=True)
        if self.tis_cap is not None:
            _number("tis_cap", self.tis_cap, low=1.0)
            if self.old_logprobs == "sampling":
                raise ValueError(
                    "train tis_cap corrects the trainer's recomputed old log-probs for the sampler's: it "
                    "needs old_logprobs = 'recompute' or 'auto' (got 'sampling', where the ratio is "
                    "already taken against the sampler)"
                )
        _number("max_grad_norm", self.max_grad_norm, low=0.0)
        _number("epsilon_low", self.epsilon_low, low=0.0, high=1.0, low_open=True, high_open=True)
        _number("epsilon_high", self.epsilon_high, low=0.0, low_open=True)
        _number("beta", self.beta, low=0.0)
        _number("temperature", self.temperature, low=0.0, low_open=True)
        _number("lora_dropout", self.lora_dropout, low=0.0, high=1.0, high_open=True)
        _integer("warmup_steps", self.warmup_steps, 0)
        _integer("max_steps", self.max_steps, 1)
        _integer("group_size", self.group_size, 2)  # GRPO compares at least two samples
        _integer("per_device_train_batch_size", self.per_device_train_batch_size, 1)
        _integer("gradient_accumulation_steps", self.gradient_accumulation_steps, 1)
        _integer("max_completion_length", self.max_completion_length, 1)
        _integer("lora_rank", self.lora_rank, 1)
        _integer("lora_alpha", self.lora_alpha, 1)
        _integer("seed", self.seed, 0)
        _integer("checkpoint_rows_longer_than", self.checkpoint_rows_longer_than, 0)
        for name in ("use_lora", "offload_optimizer"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"train {name} must be True or False, got {getattr(self, name)!r}")
        if not (self.bf16 is None or isinstance(self.bf16, bool) or self.bf16 == "auto"):
            raise ValueError(
                f"train bf16 must be None (on a GPU that supports it), 'auto' (also on a CPU with native "
                f"bf16 products), True or False, got {self.bf16!r}"
            )
        if self.cast_lm_head_to_fp32 not in (None, True, False):
            raise ValueError(
                "train cast_lm_head_to_fp32 must be None (when the update runs in bf16), True or False, "
                f"got {self.cast_lm_head_to_fp32!r}"
            )
        if self.gradient_checkpointing not in (None, True, False):
            raise ValueError("train gradient_checkpointing must be None (automatic), True or False")
        if self.rows_per_update < self.group_size:
            raise ValueError(
                f"train per_device_train_batch_size * gradient_accumulation_steps "
                f"({self.per_device_train_batch_size} * {self.gradient_accumulation_steps} = "
                f"{self.rows_per_update}) must hold at least one group of group_size ({self.group_size})"
            )
        targets = self.lora_target_modules
        if isinstance(targets, str) or not targets or not all(isinstance(t, str) and t for t in targets):
            raise ValueError(
                "train lora_target_modules must be a non-empty tuple of module names, or ('all-linear',)"
            )
        object.__setattr__(self, "lora_target_modules", tuple(targets))
        if "lm_head" in targets:
            raise ValueError(
                "train lora_target_modules must not name lm_head: the learner scores tokens with the output "
                "head's own weights"
            )
        if self.output_dir is not None and (not isinstance(self.output_dir, str) or not self.output_dir):
            raise ValueError(f"train output_dir must be None or a non-empty path, got {self.output_dir!r}")
        if self.output_dir is None and self.report_to != "none":
            raise ValueError(f"train output_dir must be set for report_to={self.report_to!r} to write into")

    def resolved(self, sampler_is_trainer: bool) -> TrainConfig:
        """This configuration with ``old_logprobs = "auto"`` decided: "sampling" when the trainer's own model
        sampled (the in-process policy), else "recompute" with truncated importance sampling (``tis_cap``,
        :data:`TIS_CAP` when not set). A cap given where the trainer samples itself is refused (its ratio is
        taken against the sampler, nothing is truncated)."""
        import dataclasses

        if self.old_logprobs != "auto":
            return self
        if not sampler_is_trainer:
            cap = TIS_CAP if self.tis_cap is None else self.tis_cap
            return dataclasses.replace(self, old_logprobs="recompute", tis_cap=cap)
        if self.tis_cap is not None:
            raise ValueError(
                f"train tis_cap = {self.tis_cap} is used where the old log-probs are recomputed, but the "
                "trainer samples itself here (old_logprobs 'auto' takes the ratio against the sampler's "
                "log-probs): set old_logprobs = 'recompute' to train with it, or leave tis_cap out"
            )
        return dataclasses.replace(self, old_logprobs="sampling")

    @property
    def rows_per_update(self) -> int:
        """Rows of one optimiser step on one process (per-device batch size x accumulation steps)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps


def rounds_away(weights: str, learning_rate: float, use_lora: bool) -> str | None:
    """Why AdamW steps of ``learning_rate`` on ``weights`` ("bfloat16", "float16", "float32", ...) trained
    in full would round to nothing, with the fixes; None when they do not (float32, LoRA's float32 adapters,
    or a learning rate of at least :data:`LOWEST_LR_16BIT`)."""
    if use_lora or weights not in ("bfloat16", "float16") or learning_rate >= LOWEST_LR_16BIT:
        return None
    return (
        f"full fine-tuning of {weights} weights at learning rate {learning_rate:g}: AdamW moves a weight by "
        f"about the learning rate per step, less than half the spacing of {weights} numbers near a typical "
        "weight, so every step rounds away. Keep float32 master weights (policy.transformers.dtype = "
        "'float32'; train.bf16 and policy.transformers.autocast still compute in bfloat16), or train LoRA "
        f"adapters (train.use_lora = true), or use a learning rate of at least {LOWEST_LR_16BIT:g}"
    )


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"train {name} {value!r} is not one of {list(allowed)}")


def _integer(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"train {name} must be an int >= {minimum}, got {value!r}")


def _number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        span = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
        raise ValueError(f"train {name} must be a finite number in {span}, got {value!r}")
