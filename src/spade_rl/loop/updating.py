"""How the loop's policy gets updated, wherever it generates: in process, on vLLM servers, or not at all.

    learner = make_learner(config, policy)       # what SelfPlay calls; then step / save / load / close
    metrics = learner.step(samples)

Which learner (:func:`make_learner`), by ``[policy]`` backend:

- ``transformers`` (or any policy holding its model in process): :class:`~spade_rl.train.learner.Learner`
  trains that very model, so the next generation uses the new weights with no copy at all;
- ``servers`` with ``servers.weight_sync = "nccl"`` or ``"disk"``: the trainer loads its own copy of
  ``policy.model`` (the servers must serve the same one) with the ``[policy.transformers]`` device and dtype,
  and :class:`SyncingLearner` pushes its weights to every server once at start (or after a checkpoint is
  loaded), and after every optimiser step (``sync/...`` and ``time/sync_s`` metrics), through
  :mod:`spade_rl.policy.weight_sync`. Before anything runs, every server is checked: development mode, a
  weight-transfer engine for ``nccl``, and, with ``train.old_logprobs = "sampling"`` (the default "auto"
  recomputes them here, with truncated importance sampling), log-probs of the tempered distribution
  (``--logprobs-mode processed_logprobs``);
- ``servers`` with ``weight_sync = "none"``: :class:`InferenceOnlyLearner`. The run designs, validates,
  plays, rewards and archives, but never updates anything (the servers' weights cannot follow an update,
  so training a local copy would only drift from what generates). It says so in a warning at start, in
  every update's metrics (``train/inference_only = 1``, ``train/skipped = 1``) and in ``config.json``
  (``weight_sync = "none"``). This is the mode of a fixed external model, e.g. a baseline whose environments
  all come from one frozen designer (to freeze only the designer while the agent trains, see
  ``[designer] source = "frozen"``);
- ``openai`` and ``vllm``: refused, with what to use instead (an OpenAI chat endpoint cannot continue a
  token sequence, which the multi-turn rollouts need; the in-process vLLM engine has no weight sync here).

Under ``accelerate launch`` with several processes, :mod:`spade_rl.loop.distributed` wraps the learner so
that every process trains its share of each step. The weights a sync sends come from
:func:`trainer_weights`, which gathers them one tensor at a time when FSDP2 shards them (every process then
takes part; only the main one sends).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_rl.loop.config import ConfigError, RunConfig
from spade_rl.policy import Policy, PolicyError
from spade_rl.policy.weight_sync import TensorSpec, WeightSync, make_weight_sync
from spade_rl.train.base import BaseLearner
from spade_rl.train.samples import split_groups

if TYPE_CHECKING:
    from spade_rl.train import Learner, Sample

log = logging.getLogger(__name__)

_INFERENCE_ONLY_FILE = "inference_only.json"


class InferenceOnlyLearner(BaseLearner):
    """A learner that never steps: the run generates with weights that cannot follow a training step."""

    inference_only = True

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.steps = 0
        log.warning("INFERENCE-ONLY RUN: %s; no update will be made (train/inference_only = 1)", reason)

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        log.info("inference-only: %d samples not trained on", len(samples))
        return {"train/skipped": 1.0, "train/inference_only": 1.0}

    def save(self, directory: str | Path) -> Path:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / _INFERENCE_ONLY_FILE).write_text(json.dumps({"inference_only": True, "reason": self.reason}))
        return path

    def load(self, directory: str | Path) -> None:
        if not (Path(directory) / _INFERENCE_ONLY_FILE).is_file():
            raise ConfigError(
                f"{directory} is the checkpoint of a training run; it cannot be resumed as inference-only "
                "(set policy.servers.weight_sync back to what the run was started with)"
            )


class SyncingLearner(BaseLearner):
    """A :class:`~spade_rl.train.learner.Learner` whose weights go to vLLM servers at start, after ``load``
    and after every step.

    ``sync`` is ``None`` on the non-main processes of a distributed run: they only take part in gathering
    sharded weights (``gather_only``), the main process sends them."""

    def __init__(self, learner: Learner, sync: WeightSync | None, *, gather_only: bool = False) -> None:
        self.learner = learner
        self.sync = sync
        self.gather_only = gather_only
        self.last_push: dict[str, float] = {}
        self.push()

    @property
    def steps(self) -> int:
        return self.learner.steps

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        metrics = self.learner.step(samples)
        metrics.update(self.push())
        return metrics

    def push(self) -> dict[str, float]:
        """Send the current weights as version ``step-N`` (or gather them for the main process)."""
        if self.sync is None and not self.gather_only:
            return {}
        with trainer_weights(self.learner) as (specs, tensors):
            if self.sync is None:
                for _ in tensors:  # take part in the gather collectives; the main process sends
                    pass
                return {}
            self.last_push = self.sync.push(specs, tensors, version=f"step-{self.steps}")
        return self.last_push

    def save(self, directory: str | Path) -> Path:
        return self.learner.save(directory)

    def park_optimizer_state(self, path: str | Path) -> int:
        return self.learner.park_optimizer_state(path)

    def load(self, directory: str | Path) -> None:
        self.learner.load(directory)
        self.push()  # the servers still hold the weights of before the checkpoint

    def close(self) -> None:
        try:
            self.learner.close()
        finally:
            if self.sync is not None:
                self.sync.close()


@contextlib.contextmanager
def trainer_weights(learner: Learner) -> Iterator[tuple[list[TensorSpec], Iterator[tuple[str, Any]]]]:
    """The trained weights as an inference engine loads them: announcements first (no gathering), then the
    tensors one at a time, under Hugging Face names, tied weights once, LoRA merged in for the duration.

    Under FSDP2 each parameter is a DTensor, all-gathered with ``full_tensor()`` as it is read: a
    collective, so every process must consume the stream. FSDP1 is refused (its per-module traversal is not
    implemented here), and so is LoRA under FSDP (merging an adapter into sharded weights)."""
    fsdp = learner.fsdp
    if fsdp and getattr(learner.accelerator.state.fsdp_plugin, "fsdp_version", 1) == 1:
        raise ConfigError(
            "weight sync under FSDP1 is not supported: use fsdp_version: 2 (configs/accelerate)"
        )
    model = learner.raw_model
    lora = hasattr(model, "merge_adapter")
    if not lora:
        named = [(_vllm_name(name), p) for name, p in model.named_parameters()]
        yield [TensorSpec(name, _full_shape(p)) for name, p in named], _full(named)
        return
    if fsdp:
        raise ConfigError("weight sync of LoRA adapters under FSDP is not supported: train LoRA under DDP")
    model.merge_adapter()
    try:
        named = [
            (_vllm_name(name.removeprefix("base_model.model.").replace(".base_layer", "")), p)
            for name, p in model.named_parameters()
            if model.prefix not in name and "original_module" not in name
        ]
        named = [(name.replace("modules_to_save.default.", ""), p) for name, p in named]
        yield [TensorSpec(name, _full_shape(p)) for name, p in named], _full(named)
    finally:
        model.unmerge_adapter()


def _vllm_name(name: str) -> str:
    return name.replace("_checkpoint_wrapped_module.", "")


def _full_shape(param: Any) -> tuple[int, ...]:
    return tuple(param.shape)  # an FSDP2 DTensor reports its full (global) shape


def _full(named: list[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    for name, param in named:
        full = getattr(param, "full_tensor", None)  # an FSDP2 DTensor: all-gather it
        yield name, full() if callable(full) else param.data


def load_trainer_model(config: RunConfig, device: str | None = None) -> tuple[Any, Any]:
    """The trainer's own copy of ``policy.model`` (``[policy.transformers]`` device and dtype; ``device``
    overrides the device, as each process of a distributed run takes its own GPU)."""
    from spade_rl.policy.models import choose_device, load_pretrained

    settings = config.policy.transformers
    if device is None:
        device = choose_device(settings.device)
    return load_pretrained(config.policy.model, device=device, dtype=settings.dtype)


def make_learner(config: RunConfig, policy: Policy, *, device: str | None = None) -> BaseLearner:
    """The learner of a run whose policy is ``policy`` (see the module docstring); in a distributed run,
    the main process's (the others run :func:`spade_rl.loop.distributed.run_follower`)."""
    from spade_rl.loop.distributed import Processes, wrap_for_processes
    from spade_rl.policy.servers import ServerPolicy
    from spade_rl.train.learner import Learner

    processes = Processes.from_env()
    processes.check(config)
    if isinstance(policy, ServerPolicy):
        servers = policy.config
        if servers.weight_sync == "none":
            return InferenceOnlyLearner(
                f"policy.servers.weight_sync = 'none': the {len(policy.roots)} server(s) keep their weights"
            )
        model, tokenizer = load_trainer_model(config, processes.device(config) if device is None else device)
        _check_same_tokenizer(tokenizer, policy.tokenizer, config.policy.model)
        sync = make_weight_sync(servers, api_key=policy.api_key, device=next(model.parameters()).device)
        assert sync is not None
        try:
            sync.check(processed_logprobs=config.update_config.old_logprobs == "sampling")
        except PolicyError as error:
            raise ConfigError(str(error)) from error
        inner: BaseLearner = SyncingLearner(Learner(model, tokenizer, config.update_config), sync)
    elif hasattr(getattr(policy, "model", None), "parameters"):
        inner = Learner.for_policy(policy, config.update_config)
    else:
        backend = config.policy.backend
        advice = {
            "openai": "an OpenAI chat endpoint cannot continue the rollouts' token sequences; serve the "
            "model with vLLM and use backend = 'servers' (weight_sync = 'none' for an inference-only run)",
            "vllm": "the in-process vLLM engine has no weight sync here; run `vllm serve` (or `trl "
            "vllm-serve`) and use backend = 'servers' with weight_sync = 'nccl' or 'disk'",
        }.get(backend, "use backend = 'transformers', or 'servers'")
        raise ConfigError(f"a self-play run cannot train a {type(policy).__name__} ({backend!r}): {advice}")
    return wrap_for_processes(inner, processes, config)


def _check_same_tokenizer(trainer: Any, serving: Any, model: str | None) -> None:
    if len(trainer) != len(serving) or trainer.eos_token_id != serving.eos_token_id:
        raise ConfigError(
            f"the trainer's model {model or '(default)'} has a tokenizer of {len(trainer)} tokens (end "
            f"{trainer.eos_token_id}), the servers' prompts are rendered with one of {len(serving)} (end "
            f"{serving.eos_token_id}): policy.model must be the model the servers serve"
        )


# Per-step counts that add up over an iteration's steps (combine_step_metrics); the rest are averaged.
_SUMMED_METRICS = (
    "time/train_s",
    "train/passes",
    "train/no_logprobs",
    "train/certain_samples",
    "train/truncated_samples",
)


def plan_steps(samples: list, groups_per_step: int, epochs: int, rng: random.Random) -> list[list]:
    """The optimiser steps of one iteration's samples: ``epochs`` passes over its groups (consecutive runs
    of one ``Sample.group``), each cut into steps of at most ``groups_per_step`` whole groups (0: all in
    one step). The first pass keeps the batch's order; every later one is shuffled with ``rng``.

    3 groups a, b, c with groups_per_step 2 and 2 epochs: [[a, b], [c], <a shuffled pass>, ...]."""
    groups = split_groups(samples)
    size = groups_per_step or len(groups)
    steps = []
    for epoch in range(epochs):
        order = list(groups)
        if epoch:
            rng.shuffle(order)
        for start in range(0, len(order), size):
            steps.append([s for group in order[start : start + size] for s in group])
    return steps


def combine_step_metrics(per_step: list[dict]) -> dict:
    """The metrics of an iteration's optimiser steps as one line: with one step, its own; with several,
    counts (rows, samples and tokens trained, seconds) summed over the steps, every other number averaged,
    the last ``train/step`` (and ``train/steps``: how many), and ``train/loss_first`` / ``train/loss_last``
    (the loss of the first and the last step)."""
    if len(per_step) == 1:
        return per_step[0]
    keys = dict.fromkeys(k for m in per_step for k in m)
    combined: dict = {}
    for key in keys:
        values = [m[key] for m in per_step if isinstance(m.get(key), int | float)]
        if values:
            summed = key in _SUMMED_METRICS or key.endswith(("/samples", "/model_tokens"))
            combined[key] = sum(values) if summed else sum(values) / len(values)
    combined["train/step"] = per_step[-1].get("train/step", float(len(per_step)))
    combined["train/steps"] = float(len(per_step))
    if "train/loss" in per_step[0] and "train/loss" in per_step[-1]:
        combined["train/loss_first"] = per_step[0]["train/loss"]
        combined["train/loss_last"] = per_step[-1]["train/loss"]
    return combined
