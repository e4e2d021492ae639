"""The gem suite: registered, options checked before any model loads, GEM's games played in the suite's
own preloaded sandbox by a scripted policy (known outcomes) and by the real tiny model."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from spade_rl.envs import external
from spade_rl.evaluate.base import GREEDY, EvalContext, SuiteResult, get_suite
from spade_rl.policy import FakePolicy

pytestmark = pytest.mark.skipif(not external.installed("gem"), reason=external.INSTALL["gem"])
GAMES = ("game:GuessTheNumber-v0-hard", "game:Mastermind-v0-easy")
SMALL = {"max_turns": 8, "max_new_tokens": 16, "max_context_tokens": 2048}


def halving(chat: list[dict]) -> str:
    """Guess The Number by halving the range; anything else gets an answer GEM cannot parse."""
    text = chat[-1]["content"]
    found = re.search(r"between (\d+) and (\d+)", text)
    if "Guess The Number" not in text or found is None:
        return "pass"
    low, high = int(found[1]), int(found[2])
    for guess, direction in re.findall(r"you guessed (\d+), and the target number is (higher|lower)", text):
        low, high = (
            (max(low, int(guess) + 1), high) if direction == "higher" else (low, min(high, int(guess) - 1))
        )
    return f"\\boxed{{{(low + high) // 2}}}"


def test_registered_with_its_options_checked():
    suite = get_suite("gem")
    assert suite.options["games"] == external.DEFAULT_EVAL_GAMES["gem"]
    assert suite.version().startswith("gem-llm 0.1.0 spade-rl ")
    with pytest.raises(ValueError, match=r"option gem.games: unknown gem game\(s\) \['game:Chess'\]"):
        get_suite("gem", games="game:Chess")
    with pytest.raises(ValueError, match=r"option gem.kwargs: not JSON"):
        get_suite("gem", kwargs="{nope")
    with pytest.raises(ValueError, match=r"option gem.max_turns must be at least 1"):
        get_suite("gem", max_turns=0)
    # Games without a reference solution can be evaluated (only a training pool needs one).
    assert get_suite("gem", games="game:Game2048-v0-easy").options["games"] == ("game:Game2048-v0-easy",)


def test_a_scripted_policy_wins_what_it_can_and_nothing_else(pool, tokenizer):
    suite = get_suite("gem", games=",".join(GAMES), **SMALL)
    ctx = EvalContext(limit=3, seed=5, sampling=GREEDY, sandbox=pool)
    result = suite.run(FakePolicy(halving, tokenizer=tokenizer), ctx)
    assert result.n == 6 and [i.id for i in result.items[:3]] == [f"{GAMES[0]}/seed={s}" for s in (5, 6, 7)]
    wins = {game: result.metrics[f"win_rate/{game}"] for game in GAMES}
    assert wins == {GAMES[0]: 1.0, GAMES[1]: 0.0} and result.accuracy == 0.5
    assert all(i.score == float(i.correct) for i in result.items) and result.errors == 0
    lost = result.items[-1]
    assert lost.detail["stop_reason"] == "terminated" and lost.detail["turns"] == 1  # GEM ends it at "pass"
    again = SuiteResult.from_dict(result.to_dict())
    assert again.items == result.items and again.version == result.version


@pytest.mark.slow
def test_the_tiny_model_plays_gem_through_the_real_sandbox(pool, tokenizer):
    from spade_rl.policy import TransformersPolicy, tiny_random_model

    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    try:
        suite = get_suite("gem", games=GAMES[0], action_prefix="\\boxed{", action_stop="}", **SMALL)
        ctx = EvalContext(limit=2, seed=0, sampling=replace(GREEDY, max_new_tokens=8), sandbox=pool)
        result = suite.run(policy, ctx)
    finally:
        policy.close()
    assert result.n == 2 and result.errors == 0
    assert all(i.detail["stop_reason"] in ("terminated", "truncated", "max_turns") for i in result.items)
    assert all(i.response.startswith("[turn 1] \\boxed{") for i in result.items)  # the forced opening


def test_the_command_line_runs_the_suite_with_its_options(monkeypatch, tokenizer, tmp_path):
    """`spade-rl eval --suite gem` end to end through the CLI, with a scripted model (no weights)."""
    from typer.testing import CliRunner

    import spade_rl.policy
    from spade_rl.cli import app
    from spade_rl.evaluate.results import EvalResult

    monkeypatch.setattr(
        spade_rl.policy, "make_policy", lambda config: FakePolicy(halving, tokenizer=tokenizer)
    )
    out = tmp_path / "gem.json"
    args = ["eval", "--suite", "gem", "--limit", "2", "--out", str(out), "--option", f"gem.games={GAMES[0]}"]
    result = CliRunner().invoke(app, [*args, "--option", "gem.max_turns=8"])
    assert result.exit_code == 0, result.output
    suite = EvalResult.read(out).suites["gem"]
    assert suite.n == 2 and suite.accuracy == 1.0 and suite.config["max_turns"] == 8
    bad = CliRunner().invoke(app, ["eval", "--suite", "gem", "--option", "gem.games=game:Chess"])
    assert bad.exit_code == 2 and "unknown gem game" in bad.output and "Traceback" not in bad.output
