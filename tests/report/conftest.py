"""Run directories for the report tests: hand-written ones for edge cases, and one real short run.

``hand_run(name)`` gives a :class:`HandRun` that writes an archive (through the real ``Archive``),
metrics lines, transcripts, a config and evaluation files exactly where ``spade-rl run`` puts them.
``real_run`` is a three-iteration ``SelfPlay`` run: the tiny in-process model plays and is trained,
and the designer's answers are scripted (as in tests/loop/test_selfplay.py), with model-written text
that tries to run a script in the report.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from report_helpers import HANGS, PARITY, SYNTAX, HandRun, designer_output

from fixture_envs import SCRIPTED
from spade_rl.policy import FakePolicy


@pytest.fixture
def hand_run(tmp_path):
    def make(name: str = "run") -> HandRun:
        return HandRun(tmp_path / name)

    return make


SMALL_RUN = [
    *SCRIPTED,
    "loop.iterations=3",
    "loop.designs_per_iteration=2",
    "loop.envs_per_iteration=2",
    "loop.plays_per_env=2",
    "loop.transcripts_per_iteration=8",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=8",
    "design.max_new_tokens=2048",
    "sandbox.call_timeout_s=0.5",
    "design.validation.call_timeout_s=0.5",
]


@pytest.fixture(scope="session")
def real_run(tmp_path_factory) -> Path:
    """A finished three-iteration run: valid, hanging and broken designs; the tiny model plays and learns."""
    from spade_rl.loop.config import load_config
    from spade_rl.loop.run import SelfPlay
    from spade_rl.policy import tiny_random_model
    from spade_rl.policy.transformers_backend import TransformersPolicy

    designs = [
        designer_output(PARITY),
        designer_output(HANGS),
        designer_output(PARITY.replace("ParityEnv", "ParityTwoEnv")),
        designer_output(SYNTAX),
        designer_output(PARITY.replace("ParityEnv", "ParityThreeEnv")),
        "I would write a maze here.",
    ]
    model, tokenizer = tiny_random_model(seed=0)
    run_dir = tmp_path_factory.mktemp("real") / "run"
    with SelfPlay(
        load_config(None, SMALL_RUN),
        run_dir,
        policy=TransformersPolicy(model, tokenizer),
        designer_policy=FakePolicy(designs, tokenizer=tokenizer),  # a scripted designer, the model plays
    ) as run:
        for _ in run.iterations():
            pass
    return run_dir


@pytest.fixture
def real_run_copy(real_run, tmp_path) -> Path:
    """A copy of the real run that a test may change (the checkpoints are left behind)."""
    copy = tmp_path / "run"
    shutil.copytree(real_run, copy, ignore=shutil.ignore_patterns("checkpoints", "report"))
    return copy
