"""The update of the shared policy, for both roles at once (SPADE step 6), and the designer's warm-up step.

    from spade_rl.train import Learner, TrainConfig, sample_from_episode, sample_from_generation
    samples = [sample_from_generation(o.generation, a, group=0) for o, a in zip(outcomes, designer_adv)]
    samples += [sample_from_episode(e, a, group=1 + k) for ...]      # one group per environment
    learner = Learner.for_policy(policy, TrainConfig(group_size=8, per_device_train_batch_size=16))
    metrics = learner.step(samples)                                   # one GRPO optimiser step

``samples`` (:class:`Sample` and its helpers from episodes and designer generations; samples padded into
one batch of token rows, cut into micro-batches), ``scoring`` (the one model call: the
log-probs of the trained tokens), ``loss`` (the GRPO loss written out, a pure function of per-token
log-probs), ``learner`` (:class:`Learner`: batch, passes, loss, one optimiser step; and the SFT step),
``config`` (:class:`TrainConfig`), ``offload`` (the optimiser's state on disk between steps) and
``reporting`` (TensorBoard / wandb). :class:`BaseLearner` is the type every learner of the loop has (in
process, pushing weights to servers, several processes, inference only). Importing this package is light;
torch loads with :class:`Learner`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spade_rl.train.base import BaseLearner
from spade_rl.train.config import LOSS_TYPES, OLD_LOGPROBS, REPORT_TO, TrainConfig
from spade_rl.train.samples import ROLES, Sample, sample_from_episode, sample_from_generation

if TYPE_CHECKING:
    from spade_rl.train.learner import Learner


def __getattr__(name: str) -> Any:
    if name == "Learner":
        from spade_rl.train.learner import Learner

        return Learner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LOSS_TYPES",
    "OLD_LOGPROBS",
    "REPORT_TO",
    "ROLES",
    "BaseLearner",
    "Learner",
    "Sample",
    "TrainConfig",
    "sample_from_episode",
    "sample_from_generation",
]
