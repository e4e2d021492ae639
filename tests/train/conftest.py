"""Fixtures of the learner's tests: one thread, a factory of learners on a fresh tiny model (CPU, no
network)."""

from __future__ import annotations

import pytest
import torch
from train_helpers import G

from spade_rl.policy import tiny_random_model
from spade_rl.train import TrainConfig
from spade_rl.train.learner import Learner


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model's matrices are too small to share among threads: one thread is faster, and much
    faster on a busy machine. Restored after each module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def make_learner(tokenizer, tmp_path):
    """make_learner(model=None, **config) -> Learner on a fresh tiny model (seed 0) unless given one."""

    def make(model=None, **overrides):
        if model is None:
            model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
        settings = dict(
            learning_rate=1e-3,
            group_size=G,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
        )
        settings.update(overrides)
        return Learner(model, tokenizer, TrainConfig(**settings))

    return make
