"""End to end: sampled evaluation of the real tiny model through the real sandbox (samples=2, CPU)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spade_rl.evaluate.base import GREEDY, EvalContext
from spade_rl.evaluate.results import EvalResult, compare
from spade_rl.evaluate.runner import run_eval
from spade_rl.policy import TransformersPolicy, tiny_random_model

RG_OPTIONS = {"math": ("gcd",), "algorithmic": (), "cognition": (), "logic": ("aiw",)}
ENVS_OPTIONS = {"envs": ("guess",), "max_turns": 2, "max_new_tokens": 8, "max_context_tokens": 512}


@pytest.fixture(scope="module")
def tiny_policy(tokenizer):
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    yield policy
    policy.close()


def test_two_samples_of_the_tiny_model_on_reasoning_gym_and_envs(tiny_policy, pool, tmp_path):
    ctx = EvalContext(
        limit=2,
        seed=0,
        sampling=replace(GREEDY, max_new_tokens=12, temperature=1.0),
        sandbox=pool,
        batch_size=4,
        options={"reasoning_gym": RG_OPTIONS, "envs": ENVS_OPTIONS},
        samples=2,
    )
    result = run_eval(tiny_policy, ["reasoning_gym", "envs"], ctx, model="tiny")
    rg, envs = result.suites["reasoning_gym"], result.suites["envs"]
    assert rg.n == 4 and envs.n == 2  # 2 items of each task, 2 episodes of the environment
    for suite in (rg, envs):
        assert suite.samples == 2 and all(len(item.samples) == 2 for item in suite.items)
        assert sorted(suite.pass_at_k) == [1, 2]
        assert 0.0 <= suite.pass_at_k[1] <= suite.pass_at_k[2] <= 1.0
        assert suite.pass_at_k[1] == pytest.approx(suite.sample_accuracy)
    assert all(i.detail.get("reason") != "scorer_error" for i in rg.items)  # scored in the sandbox
    assert all(i.detail["stop_reason"] != "env_error" for i in envs.items)
    assert result.sampling["temperature"] == 0.0 and result.samples["n"] == 2
    result.write(tmp_path / "sampled.json")
    again = EvalResult.read(tmp_path / "sampled.json")
    assert again.suites["reasoning_gym"].items == rg.items and again.samples == result.samples
    rows = compare(again, result)
    assert all(row.comparable and row.pass_a == row.pass_b for row in rows if row.category is None)
