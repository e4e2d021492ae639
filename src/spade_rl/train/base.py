"""What every learner of the loop is: the one type behind ``SelfPlay.learner``.

    learner.step(samples) -> metrics       # one optimiser step (or none, for an inference-only run)
    learner.steps                          # optimiser steps taken (restored by load)
    learner.save(directory); learner.load(directory); learner.park_optimizer_state(path); learner.close()

:class:`spade_rl.train.learner.Learner` trains a model in this process; the loop wraps it to push its
weights to vLLM servers after every step (:class:`spade_rl.loop.updating.SyncingLearner`) or to mirror
every call on the other processes of ``accelerate launch`` (:class:`spade_rl.loop.distributed.
DistributedLearner`); :class:`spade_rl.loop.updating.InferenceOnlyLearner` trains nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spade_rl.train.samples import Sample


class BaseLearner(ABC):
    inference_only: bool = False  # True: the run generates with weights that no step can change
    steps: int = 0

    @abstractmethod
    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimiser step on ``samples``; namespaced metrics (``train/...``, ``time/train_s``)."""

    @abstractmethod
    def save(self, directory: str | Path) -> Path:
        """A checkpoint of everything the next step depends on, in ``directory``."""

    @abstractmethod
    def load(self, directory: str | Path) -> None:
        """Restore a checkpoint written by :meth:`save`."""

    def park_optimizer_state(self, path: str | Path) -> int:
        """Move the optimiser's state to ``path`` until the next step needs it; bytes written (0: none)."""
        return 0

    def close(self) -> None:  # noqa: B027  (nothing to release is a fine default)
        """Release what the learner holds (files, reporters, connections)."""
