"""The GRPO update of the shared policy, for both roles at once (SPADE step 6).

    from spade_rl.train import GRPOUpdater, TrainConfig, sample_from_episode, sample_from_generation
    samples = [sample_from_generation(o.generation, a, group=0) for o, a in zip(outcomes, designer_adv)]
    samples += [sample_from_episode(e, a, group=1 + k) for ...]      # one group per environment
    updater = GRPOUpdater.for_policy(policy, TrainConfig(group_size=8, per_device_train_batch_size=16))
    metrics = updater.update(samples)                                 # one optimiser step

``samples`` (:class:`Sample`, helpers from episodes and designer generations, the batch layout),
``config`` (:class:`TrainConfig`), ``loss`` (the GRPO loss written out, a pure function of per-token
log-probs), ``updater`` (:class:`GRPOUpdater`: TRL's ``GRPOTrainer`` driven one step per call, with our
loss), ``trl_engine`` (every private TRL / transformers call, behind a version check) and
``micro_batches`` (the batch cut into length-sorted micro-batches). Importing this package is light; torch
and trl load with :class:`GRPOUpdater`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spade_rl.train.config import LOSS_TYPES, OLD_LOGPROBS, REPORT_TO, TrainConfig
from spade_rl.train.samples import (
    ROLES,
    Batch,
    Sample,
    assemble_batch,
    sample_from_episode,
    sample_from_generation,
)

if TYPE_CHECKING:
    from spade_rl.train.updater import GRPOUpdater


def __getattr__(name: str) -> Any:
    if name == "GRPOUpdater":
        from spade_rl.train.updater import GRPOUpdater

        return GRPOUpdater
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LOSS_TYPES",
    "OLD_LOGPROBS",
    "REPORT_TO",
    "ROLES",
    "Batch",
    "GRPOUpdater",
    "Sample",
    "TrainConfig",
    "assemble_batch",
    "sample_from_episode",
    "sample_from_generation",
]
