"""The profiles a run's configuration builds on: named tables of settings that sit between each
component's own defaults and a configuration file.

    profile = "cpu"     # the top-level key of a TOML file; `spade-rl run` without --config uses "cpu"

A value is resolved in this order, the later winning: the component's default (its dataclass), the
profile, the file, the ``key=value`` overrides (``spade-rl config --explain`` says which one gave each
value). Every file names its profile, so that none inherits settings it did not ask for:

- ``"cpu"``: ``spade-rl run`` on a 2-core CPU with the default model (SmolLM2-135M). Each lever that makes
  SPADE's signals non-zero at this scale was measured with bench/learning_signal.py
  (docs/learning-signal.md), those of the learning speed with bench/update_geometry.py and
  experiments/cpu-levers.toml, the memory caps in docs/performance.md.
- ``"none"``: nothing between the components' defaults and the file. The paper configurations
  (configs/spade-paper-*.toml) build on it and write every value of the reference recipe themselves.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

# The CPU profile, as the tables of a TOML file (configs/cpu-default.toml writes the same values out).
_CPU: dict[str, Any] = {
    "loop": {
        # Six groups a turn: the new valid designs first, the rest drawn from the frontier-weighted pool with
        # replacement; 8 plays per group on one instance (one seed), 4 more with the hint for regret; the
        # update in optimiser steps of 2 groups (docs/learning-signal.md, experiments/results/cpu-sanity/).
        "iterations": 4,
        "designs_per_iteration": 4,
        "envs_per_iteration": 6,
        "plays_per_env": 8,
        "hint_plays_per_env": 4,
        "group_seeds": "shared",
        "pool_replace": True,
        "groups_per_step": 2,
    },
    "policy": {
        # Generation in bfloat16 where the CPU multiplies it natively (3x faster prefill), float32 elsewhere;
        # the keys/values of play capped (a batch 0.7 GiB, the prefix cache 0.53 GiB; docs/performance.md).
        "transformers": {"autocast": "auto", "batch_tokens": 16384, "prefix_cache_tokens": 12288},
    },
    # A design is about 8 lines (a QuestionTask subclass), grounded in 120 words of a document.
    "design": {
        "form": "question",
        "max_new_tokens": 200,
        "prompt": {"max_document_words": 120, "max_example_chars": 1200},
    },
    # Answer first: the turn starts with \boxed{ (environment tokens, never trained) and stops at "}".
    "rollout": {
        "max_turns": 8,
        "max_new_tokens": 24,
        "action_prefix": {"games": "\\boxed{"},
        "action_stop": {"games": ["}"]},
    },
    # Reference games a 135M model wins some of the time (their defaults it never wins).
    "pool": {
        "reference_kwargs": {
            "guess": {"high": 20},
            "arithmetic": {"stories": ["more", "fewer"]},
            "maze": {"min_cells": 1, "max_cells": 2},
            "codebreaker": {"length": 2, "symbols": 3},
        }
    },
    # On a small CPU model nearly every design is invalid: the progress bonus gives the designer a signal
    # all the same (off in the paper's setting).
    "rewards": {"progress_bonus": 0.1},
    # Groups of 8 (K plays, or the designs of one iteration); a step holds 2 of them (loop.groups_per_step).
    "train": {
        "learning_rate": 5e-5,  # a 135M model moves visibly in the few dozen steps a CPU run makes
        "group_size": 8,
        "per_device_train_batch_size": 2,  # rows per pass: fewer passes (bench/update_geometry.py), in 4 GB
        "gradient_accumulation_steps": 8,
        "bf16": "auto",  # the update in bfloat16 autocast where generation computes in it (float32 weights)
        "checkpoint_rows_longer_than": 256,  # long rows: a 600-token one would hold 1.4 GB of activations
        "offload_optimizer": True,  # AdamW's moments (1.08 GB) on disk while the iteration designs and plays
    },
    # The designer's warm-up (WarmupConfig's own default, 0 designs, is off: the paper has none): 48
    # designs; rows over 320 tokens recompute a share of their activations (peak 4.2 -> 3.6 GiB).
    "warmup": {"designs": 48, "activation_tokens": 320},
}

PROFILES: MappingProxyType[str, dict[str, Any]] = MappingProxyType({"cpu": _CPU, "none": {}})
DEFAULT_PROFILE = "cpu"  # what a run without a configuration file builds on


def profile_data(name: str) -> dict[str, Any]:
    """A copy of the tables of profile ``name`` (ValueError naming the profiles for any other name)."""
    import copy

    if not isinstance(name, str) or name not in PROFILES:
        raise ValueError(f"profile {name!r} does not exist; allowed: {list(PROFILES)}")
    return copy.deepcopy(PROFILES[name])
