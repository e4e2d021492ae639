"""Fixtures of the evaluation tests: the real sandbox pool and the default model's tokenizer (no model)."""

from __future__ import annotations

import pytest

from spade_rl.policy import default_tokenizer
from spade_rl.sandbox import SandboxConfig, SandboxPool


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxConfig(pool_size=2)) as p:
        yield p


@pytest.fixture(scope="session")
def tokenizer():
    return default_tokenizer()
