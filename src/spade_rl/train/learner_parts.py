"""The learner's helpers (:mod:`spade_rl.train.learner`): precision, launch checks, the model's preparation
(LoRA, dropout off, the schedule, activation checkpointing), token metrics over processes, the sampler's
log-probs, RNG state and weight loading."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

import torch

from spade_rl.policy.models import cpu_has_fast_bf16
from spade_rl.train.config import TrainConfig
from spade_rl.train.scoring import Scored

CHECKPOINT_FORMAT = 2  # 1: the TRL-driven updater's checkpoints (transformers' file layout)
_META = "spade_train.json"  # a checkpoint's metadata file


def resolve_bf16(setting: bool | str | None, on_gpu: bool) -> bool:
    """``TrainConfig.bf16`` for a model on a GPU or not: None means a GPU that supports bf16, "auto" that
    or a CPU with native bf16 products."""
    if isinstance(setting, bool):
        return setting
    if on_gpu:
        return torch.cuda.is_bf16_supported()
    return setting == "auto" and cpu_has_fast_bf16()


def token_metrics(
    sums: dict, extremes: dict, accelerator: Any, processes: int, device: Any
) -> dict[str, float]:
    """Token means over every process; per-row extremes over every process (NaN: no trained row)."""
    names = [n for n in sums if n != "tokens"]
    if not names:
        return {}
    totals = torch.stack([torch.as_tensor(sums[n], device=device).float() for n in [*names, "tokens"]])
    totals = accelerator.reduce(totals, "sum") if processes > 1 else totals
    out = {f"train/{n}": float(totals[i] / totals[-1].clamp(min=1.0)) for i, n in enumerate(names)}
    for name, values in extremes.items():
        # this process's extreme (NaN: no row trained), then the extreme over every process
        values = torch.cat(values) if values else torch.empty(0, device=device)
        values = values[~values.isnan()]
        lowest = name.endswith("_min")
        mine = (values.min() if lowest else values.max()) if len(values) else torch.tensor(math.nan)
        every = mine.reshape(1).float().to(device)
        if processes > 1:
            every = accelerator.gather(every)
        every = every[~every.isnan()]
        out[f"train/{name}"] = float(every.min() if lowest else every.max()) if len(every) else math.nan
    return out


def launched() -> bool:
    """Whether this process is one of several started by ``accelerate launch`` / torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _check_launch_precision(mixed_precision: str, bf16: bool) -> None:
    """accelerate's mixed precision (from the launch's configuration) must agree with ``train.bf16``: the
    learner computes in the precision the run's configuration says, and would not silently take
    another."""
    if mixed_precision == "fp16" or (mixed_precision == "bf16" and not bf16):
        raise ValueError(
            f"accelerate launch asks for mixed_precision = {mixed_precision!r}, while this run's train.bf16 "
            f"resolves to {bf16}: set mixed_precision: 'no' in the accelerate configuration (train.bf16 "
            "decides), or train.bf16 = true with mixed_precision: bf16 (fp16 is not supported)"
        )


def _with_lora(model: Any, cfg: TrainConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_target_modules
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules="all-linear" if targets == ("all-linear",) else list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)  # injects the adapter layers into `model` itself


def _base(model: Any) -> Any:
    """The transformers model inside a PeftModel (itself otherwise)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _disable_dropout(model: Any) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def _schedule(cfg: TrainConfig, optimizer: torch.optim.Optimizer) -> Any:
    from transformers import get_scheduler

    return get_scheduler(
        cfg.lr_scheduler_type, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.max_steps
    )


def checkpointed_layers(layers: int, length: int, activation_tokens: int) -> int:
    """How many of ``layers`` recompute their activations for a row of ``length`` tokens, so that the
    activations held are about those of ``activation_tokens`` tokens (0: none recompute).

        checkpointed_layers(30, 640, 448) == 9      # 21 layers x 640 tokens held: 448 tokens' worth"""
    if not activation_tokens or length <= activation_tokens:
        return 0
    return -(-layers * (length - activation_tokens) // length)  # the ceiling, in integers


# A row is "certain" when the model gives each of its trained tokens at least this log-prob (p >= 0.99).
CERTAIN_LOGP = math.log(0.99)


def _logprob_rows(scored: Scored) -> tuple[torch.Tensor, torch.Tensor]:
    """Two boolean masks over the rows of a scored micro-batch that train some token: the rows whose
    sampler log-probs are all 0.0, and the rows the model is certain of (every trained token at
    ``CERTAIN_LOGP`` or above). A sampler that recorded no log-probs leaves zeros, but so does one that
    was certain of every token: in float32 a log-prob rounds to exactly 0.0 above p = 1 - 6e-8. Rows in
    the first mask and not the second are the ones that came without log-probs; the second counts the
    samples of a collapsed policy (``train/certain_samples``)."""
    mask = scored.mask > 0
    has_tokens = mask.any(1)
    zero = has_tokens & ~((scored.sampling_logps != 0) & mask).any(1)
    sure = has_tokens & ~((scored.logps.detach() < CERTAIN_LOGP) & mask).any(1)
    return zero, sure


def _rng_state() -> dict:
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _load_weights(model: Any, folder: Path, lora: bool, fsdp: bool = False) -> None:
    """Copy saved weights into the live model (in place: the policy holds this very object). Under FSDP2
    the whole weights are loaded into the shards by torch's distributed state-dict API (not tested here:
    it needs GPUs)."""
    from safetensors.torch import load_file

    if lora:
        if fsdp:
            raise ValueError("resuming LoRA adapters under FSDP is not supported: resume under DDP")
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, load_file(str(folder / "adapter_model.safetensors")))
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"the adapter in {folder} does not fit this model: {result.unexpected_keys[:5]}")
        return
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(folder / name)))
    if fsdp:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        options = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(model, state, options=options)
        return
    missing, unexpected = model.load_state_dict(state, strict=False)
    live = model.state_dict()
    loaded_storage = {live[k].data_ptr() for k in state if k in live}
    untied = [k for k in missing if live[k].data_ptr() not in loaded_storage]
    if unexpected or untied:
        raise ValueError(
            f"the weights in {folder} do not fit this model: missing {untied[:5]}, "
            f"unexpected {unexpected[:5]}"
        )


def read_checkpoint_meta(path: Path, config: TrainConfig, processes: int) -> dict:
    """The metadata of the learner checkpoint in ``path``, refused (``FileNotFoundError``, ``ValueError``)
    unless this learner can continue it: its format, its LoRA settings and its number of processes."""
    meta_path = path / _META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{path} is not a learner checkpoint (no {_META})")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"checkpoint {path} has format {meta.get('format')!r}; this learner reads format "
            f"{CHECKPOINT_FORMAT} (format 1 was written by the TRL-driven updater of earlier versions: "
            "resume it with that version, or start the run anew)"
        )
    saved = meta["config"]
    for key in ("use_lora", "lora_rank", "lora_alpha", "lora_target_modules"):
        mine = getattr(config, key)
        theirs = tuple(saved.get(key)) if isinstance(mine, tuple) else saved.get(key)
        if theirs != mine:
            raise ValueError(
                f"checkpoint {path} was written with {key}={theirs!r}, this learner has {mine!r}"
            )
    if meta.get("processes", 1) != processes:
        raise ValueError(
            f"checkpoint {path} was written by {meta.get('processes')} process(es); this run has "
            f"{processes}: resume it with as many"
        )
    return meta
