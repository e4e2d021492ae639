"""The textarena suite: registered, options checked, TextArena's single-player games played in the suite's
own preloaded sandbox by scripted policies (known outcomes) and by the real tiny model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spade_rl.envs import external
from spade_rl.evaluate.base import GREEDY, EvalContext, get_suite
from spade_rl.policy import FakePolicy

pytestmark = pytest.mark.skipif(not external.installed("textarena"), reason=external.INSTALL["textarena"])
SMALL = {"max_turns": 16, "max_new_tokens": 16, "max_context_tokens": 4096}
HANOI = ["A C", "A B", "C B", "A C", "B A", "B C", "A C"]  # 3 disks, optimal


def test_registered_with_its_options_checked():
    suite = get_suite("textarena")
    assert suite.options["games"] == external.DEFAULT_EVAL_GAMES["textarena"]
    assert suite.version().startswith("textarena 0.7.4 spade-rl ")
    with pytest.raises(
        ValueError, match=r"unknown textarena game\(s\) \['Chess-v0'\]; allowed: GuessTheNumber-v0"
    ):
        get_suite("textarena", games="Chess-v0")
    with pytest.raises(ValueError, match=r"option textarena.games: name at least one game"):
        get_suite("textarena", games="")


@pytest.mark.slow
def test_scripted_policies_win_tower_of_hanoi_and_lose_at_garbage(pool, tokenizer):
    def hanoi(chat: list[dict]) -> str:
        moves_made = chat[-1]["content"].count("You moved disk")
        return f"\\boxed{{{HANOI[moves_made]}}}" if moves_made < len(HANOI) else "[A B]"

    ctx = EvalContext(limit=2, seed=0, sampling=GREEDY, sandbox=pool)
    won = get_suite("textarena", games="TowerOfHanoi-v0", **SMALL).run(
        FakePolicy(hanoi, tokenizer=tokenizer), ctx
    )
    assert won.accuracy == 1.0 and [i.detail["turns"] for i in won.items] == [7, 7]
    lost = get_suite("textarena", games="Mastermind-v0", **SMALL).run(
        FakePolicy(lambda c: "??", tokenizer=tokenizer), ctx
    )
    assert lost.accuracy == 0.0 and all(i.detail["stop_reason"] == "terminated" for i in lost.items)
    assert lost.errors == 0 and lost.metrics["mean_turns"] == 2  # TextArena allows one invalid move


@pytest.mark.slow
def test_the_tiny_model_plays_textarena_through_the_real_sandbox(pool, tokenizer):
    from spade_rl.policy import TransformersPolicy, tiny_random_model

    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    try:
        suite = get_suite("textarena", games="GuessTheNumber-v0,FrozenLake-v0", max_turns=4, max_new_tokens=8)
        ctx = EvalContext(limit=1, seed=0, sampling=replace(GREEDY, max_new_tokens=8), sandbox=pool)
        result = suite.run(policy, ctx)
    finally:
        policy.close()
    assert result.n == 2 and result.errors == 0
    assert {i.detail["game"] for i in result.items} == {"GuessTheNumber-v0", "FrozenLake-v0"}
