"""A training run on GEM and TextArena games: the fixed-pool loop (designer.source = 'none') seeds its pool
with them, validated by the run's own sandbox (whose workers the run makes preload the packages), and the
tiny model plays and trains on them through the real sandbox."""

from __future__ import annotations

import pytest

from fixture_envs import SMALL
from spade_rl.envs import external
from spade_rl.loop.config import load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import TransformersPolicy, tiny_random_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (external.installed("gem") and external.installed("textarena")), reason="needs gem and textarena"
    ),
]
GAMES = [
    "pool.reference=[]",
    'pool.gem=["game:GuessTheNumber-v0-hard"]',
    'pool.textarena=["GuessTheNumber-v0"]',
    "designer.source='none'",
    "loop.iterations=1",
    "loop.pool_replace=false",  # both games in the one iteration (drawn with replacement, one may come twice)
    "rollout.max_turns=3",
    "design.validation.trivial_seeds=0",
]


def test_the_tiny_model_trains_on_gem_and_textarena_games(tmp_path):
    model, tokenizer = tiny_random_model(seed=0)
    with SelfPlay(
        load_config(None, [*SMALL, *GAMES]), tmp_path / "run", policy=TransformersPolicy(model, tokenizer)
    ) as run:
        preload = run.executor.sandbox.config.preload
        assert external.PRELOAD["gem"] in preload and external.PRELOAD["textarena"] in preload
        records = [run.archive.get(i) for i in run.archive.ids()]
        assert sorted((r.skill, r.valid) for r in records) == [
            ("gem:game:GuessTheNumber-v0-hard", True),
            ("textarena:GuessTheNumber-v0", True),
        ], [(r.skill, r.reason, r.message) for r in records]
        [metrics] = list(run.iterations())
    # Both games were played (the pool's two environments), and none of their steps timed out.
    assert metrics["iteration"] == 1 and metrics["agent/envs"] == 2 and metrics["sandbox/timeouts"] == 0
    assert 0.0 <= metrics["agent/win_rate"] <= 1.0
    assert metrics["guard/flagged"] == 0.0  # no game taken out of the pool by the play-time guard
