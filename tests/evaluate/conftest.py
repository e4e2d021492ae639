"""Fixtures of the evaluation tests: the real sandbox under the name these tests use (the tokenizer is the
root conftest's)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def pool(sandbox):
    return sandbox
