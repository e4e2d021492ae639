"""experiments/revalidate.py: a run's archived designs validated again with the caps on, counted by whether
the run's agent won them; through the real sandbox, on a run directory written as a run writes one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scripts import load_script
from spade_rl.archive import Archive, PlayStats
from spade_rl.envs import kits
from spade_rl.loop.config import load_config, save_config

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "revalidate.py"

# The answer is 2 or 3 at random whatever the question says (experiments/results/cpu-curriculum, spade
# seed 0), the answer printed at one place of the question (spade-no-designer-training seed 1), and a
# sound question.
COIN_FLIP = """class DoublingEnv(QuestionTask):
    def make(self, rng):
        start, answer = rng.randint(10, 20), rng.randint(2, 3)
        return f"A sequence of {start} steps doubles every second. How many in half the time?", answer

    hint = "Each second adds the same amount: multiply it by the seconds and add the start."
"""
COPIED = """class BeatsEnv(QuestionTask):
    def make(self, rng):
        a, b = rng.sample(['Difficulty', 'Mantis', 'Pink', 'Gold', 'Silver'], 2)
        return f"The {a} beats the {b}. Which one wins?", a

    hint = "Follow the chain of comparisons to the one that nothing beats."
"""
# The answer drawn from the seed apart from what the question states (spade-caps seed 1).
DRAWN = """class TheoryPredictionEnv(QuestionTask):
    def make(self, rng):
        number, answer = rng.randint(10, 20), rng.randint(2, 10)
        return f"There are {number} numbers each predicting. How many predictions per day?", answer

    hint = "Divide the number of predictions by the number of predictions."
"""
SOUND = """class SumEnv(QuestionTask):
    def make(self, rng):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        return f"What is {a} + {b}?", a + b

    hint = "Add the hundreds, then the tens, then the ones, carrying as you go."
"""


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT, "revalidate")


def write_run(folder: Path, designs: list[tuple[str, float]]) -> Path:
    """A run directory as a run writes one: its config and an archive of ``designs`` (source, best
    no-hint win rate), each valid at iteration 1."""
    save_config(load_config(None, ["sandbox.pool_size=2"]), folder / "config.json")  # as a run saves it
    with Archive(folder / "archive.sqlite") as archive:
        for i, (design, won) in enumerate(designs):
            hint = design.split('hint = "')[1].split('"')[0]
            env = archive.add(
                kits.compose("question", design), valid=True, reason="ok", skill="math", setting="games",
                iteration=1, hint=hint,
            )  # fmt: skip
            archive.record_stats(env.env_id, 1 + i, PlayStats(8, 0, won, 0.0, 0.0, 1.0, won, 0.0))
    return folder


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path, [(COIN_FLIP, 0.5), (COPIED, 1.0), (SOUND, 0.0)])


def test_the_caps_refuse_the_won_classes_and_keep_the_sound_design(script, run_dir):
    result = script.revalidate(run_dir, common=0.15, copy=0.75, seed=0)
    assert result["designs"] == 3
    verdicts = {item["id"]: item["verdict"] for item in result["refused"]}
    assert verdicts.get(2) == "copy cap", result
    assert verdicts.get(1) in ("common-answer cap", "other (answer_replay_wins)"), result
    assert 3 not in verdicts, result  # the sound sum stays valid
    assert result["counts"]["never won"] == {"valid": 1}
    assert sum(result["counts"]["won"].values()) == 2


def test_the_caps_off_refuse_neither_copy_nor_sound(script, run_dir):
    result = script.revalidate(run_dir, common=None, copy=None, seed=0)
    verdicts = {item["id"]: item["verdict"] for item in result["refused"]}
    assert 2 not in verdicts and 3 not in verdicts, result


def test_a_folder_that_is_not_a_run_is_refused_with_what_it_needs(script, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["revalidate.py", str(tmp_path)])
    with pytest.raises(SystemExit) as stopped:
        script.main()
    assert stopped.value.code == 2
    assert "has no config.json" in capsys.readouterr().err


def test_undetermined_answers_refuse_the_drawn_answer_only_when_asked(script, tmp_path):
    write_run(tmp_path, [(DRAWN, 0.25), (SOUND, 0.0)])
    asked = script.revalidate(tmp_path, common=0.15, copy=0.75, seed=0, undetermined=True)
    assert asked["refused"] == [{"id": 1, "best": 0.25, "verdict": "undetermined answer"}], asked
    assert asked["counts"] == {"won": {"undetermined answer": 1}, "never won": {"valid": 1}}
    assert script.revalidate(tmp_path, common=None, copy=None, seed=0)["refused"] == []
