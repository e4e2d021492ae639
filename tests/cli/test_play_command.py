"""`spade-rl play --human`: a person types the actions of the rollout's own episode (rollout.play_episode);
`spade-rl play --model`: the forced action opening on or off (--no-action-prefix).

The model's side of `spade-rl play` is `rollout.run_episodes` with a live display: tests/test_rollout.py.
"""

from __future__ import annotations

import pytest

from fixture_envs import PARITY
from spade_rl.cli import app

RAISES = PARITY.replace("self.turn += 1", "raise RuntimeError('broken step')").replace("ParityEnv", "BadEnv")


def test_a_person_plays_to_a_win_with_the_hint(runner, tmp_path):
    path = tmp_path / "parity_env.py"
    path.write_text(PARITY)
    args = ["play", str(path), "--human", "--hint", "--hint-text", "Count the characters.", "--seed", "0"]
    result = runner.invoke(app, args, input="x\nxx\n")  # seed 0: an even length wins
    assert result.exit_code == 0, result.output
    assert "Say something of the right length.\n\nHint: Count the characters." in result.output
    assert "turn 1 action" in result.output and "turn 2 action" in result.output
    assert "no\n(reward 0)" in result.output and "yes\n(reward 1)" in result.output
    assert result.output.rstrip().endswith("won")


def test_a_person_runs_out_of_turns_or_stops(runner, tmp_path):
    path = tmp_path / "parity_env.py"
    endless = PARITY.replace("False, self.turn >= self.max_turns, {}", "False, False, {}")  # never truncates
    assert endless != PARITY
    path.write_text(endless)
    result = runner.invoke(app, ["play", str(path), "--human", "--max-turns", "2"], input="x\nx\n")
    assert result.exit_code == 0, result.output
    assert "Hint:" not in result.output and result.output.rstrip().endswith("out of turns (2)")
    truncated = runner.invoke(app, ["play", "guess", "--human", "--max-turns", "1"], input="\\boxed{1}\n")
    assert truncated.exit_code == 0 and truncated.output.rstrip().endswith("episode over"), truncated.output
    stopped = runner.invoke(app, ["play", str(path), "--human"], input="")  # end of input at the prompt
    assert stopped.exit_code == 0 and stopped.output.rstrip().endswith("stopped"), stopped.output


def test_a_broken_environment_or_a_missing_hint_is_a_clean_error(runner, clean_failure, tmp_path):
    path = tmp_path / "bad_env.py"
    path.write_text(RAISES)
    result = runner.invoke(app, ["play", str(path), "--human"], input="x\n")
    clean_failure(result, "the environment failed: step: ")
    assert "broken step" in result.output
    clean_failure(runner.invoke(app, ["play", str(path), "--human", "--hint"]), "--hint needs a hint")


def test_a_named_environment_is_played_with_its_own_hint(runner):
    """A reference or a held-out family named on the command line brings its own hint (a file has
    none: --hint-text); an unknown name lists what is allowed."""
    from spade_rl.envs import heldout, reference

    for name, hint in (("guess", reference.HINTS["guess"]), ("opposite", heldout.HINTS["opposite"])):
        result = runner.invoke(
            app, ["play", name, "--human", "--hint", "--max-turns", "2"], input="\\boxed{0}\n" * 2
        )
        assert result.exit_code == 0, result.output
        assert f"Hint: {hint}" in " ".join(result.output.split()), result.output
    unknown = runner.invoke(app, ["play", "chess", "--human"])
    assert unknown.exit_code == 2 and "held-out families sequence" in unknown.output


@pytest.mark.slow
def test_a_model_plays_with_the_forced_opening_unless_told_not_to(runner):
    args = ["play", "guess", "--model", "tiny-random", "--max-turns", "1", "--max-new-tokens", "3"]
    forced = runner.invoke(app, [*args, "--temperature", "0"])
    free = runner.invoke(app, [*args, "--temperature", "0", "--no-action-prefix"])
    assert forced.exit_code == 0 and free.exit_code == 0, forced.output + free.output
    # The action shown after the turn's header: the forced \boxed{ and what the model wrote after it.
    assert "turn 1 - model\n\\boxed{" in forced.output
    assert "turn 1 - model\n" in free.output and "turn 1 - model\n\\boxed{" not in free.output
