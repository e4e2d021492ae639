"""Fixtures shared by every test folder (tests mirror ``src/spade_rl``; each folder's own conftest adds
what only its tests need). Plain helpers that tests import live beside this file: ``fixture_envs.py``
(small environments, scripted designer outputs, the two roles of a test run) and ``chat_templates.py``
(hand-written chat templates)."""

from __future__ import annotations

import random
import types

import pytest

from spade_rl.policy import default_tokenizer
from spade_rl.sandbox import Sandbox, SandboxConfig


@pytest.fixture(autouse=True)
def reproducible_validations(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Validations in the test process draw their seeds (``ValidationReport.seed``, from which every seed
    of the battery derives) from the test's id rather than the system's random source: a test replays the
    same validations on every run, so the verdict on a sound environment that a trivial policy wins a
    little under the cap cannot flip from one CI run to the next with the draw (it did: 3 of 16 seeds
    won by a warm-up design's random answers, and by TextArena's GuessTheNumber's 'repeat \\boxed{1}').
    Each validation still gets its own seed; a validation in another process (the CLI) draws at random,
    and ``ValidationSettings.seed`` still names one."""
    rng = random.Random(request.node.nodeid)
    monkeypatch.setattr(
        "spade_rl.design.validate.secrets", types.SimpleNamespace(randbelow=lambda n: rng.randrange(n))
    )


@pytest.fixture(scope="session")
def tokenizer():
    """The default model's tokenizer, as the package ships it (no model weights, no network)."""
    return default_tokenizer()


@pytest.fixture(scope="session")
def thinking_tokenizer(tokenizer):
    """The default tokenizer with a ChatML template that has Qwen3's thinking switch (chat_templates.py)."""
    from chat_templates import THINKING_TEMPLATE, with_template

    return with_template(tokenizer, THINKING_TEMPLATE)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    """The tiny random model (seed 0) saved as a folder: what ``policy.model`` names in a run's config."""
    from spade_rl.policy import tiny_random_model

    model, tokenizer = tiny_random_model(seed=0)
    folder = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def sandbox():
    """A started sandbox of two workers with the default hardening, shared by one test module."""
    with Sandbox(SandboxConfig(pool_size=2)) as started:
        yield started
