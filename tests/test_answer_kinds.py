"""tools/answer_kinds.py: the kinds of answers in an envs evaluation's recorded responses, per game."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from spade_rl.evaluate.base import ItemResult, SuiteResult
from spade_rl.evaluate.results import EvalResult

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("answer_kinds", ROOT / "tools" / "answer_kinds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_turn_s_last_closed_box_is_read(tool):
    assert tool.turn_actions("[turn 1] \\boxed{3}\n[turn 2] I think\n\\boxed{up left}") == [
        "\\boxed{3}",
        "I think\n\\boxed{up left}",
    ]
    assert tool.answer_kind("\\boxed{12}") == ("number", "12")
    assert tool.answer_kind("\\boxed{-3.5}") == ("number", "-3.5")
    assert tool.answer_kind("first \\boxed{1} then \\boxed{cat}") == ("word", "cat")
    assert tool.answer_kind("\\boxed{yak yak pig}") == ("words", "yak yak pig")
    assert tool.answer_kind("\\boxed{ }") == ("empty", "")
    assert tool.answer_kind("\\boxed{12") == ("missing", None)
    assert tool.answer_kind("12") == ("missing", None)


def test_games_are_summarised_apart(tool):
    items = [
        {"id": "tally/1", "correct": True, "response": "[turn 1] \\boxed{2}", "detail": {"env": "tally"}},
        {
            "id": "tally/2",
            "correct": False,
            "response": "[turn 1] \\boxed{yak pig}\n[turn 2] \\boxed{yak pig}",
        },
        {"id": "maze/1", "correct": False, "response": "[turn 1] \\boxed{up}\n[turn 2] \\boxed{left}"},
        {"id": "maze/2", "correct": False, "response": "[turn 1] go\n[turn 2] go"},
    ]
    summary = tool.summarise(items)
    tally, maze = summary["tally"], summary["maze"]
    assert (tally["episodes"], tally["turns"], tally["win_rate"]) == (2, 3, 0.5)
    assert tally["number"] == pytest.approx(1 / 3) and tally["words"] == pytest.approx(2 / 3)
    assert tally["repeats"] == 1.0  # the one episode of two turns repeated its answer
    assert (maze["word"], maze["missing"], maze["repeats"]) == (
        0.5,
        0.5,
        0.0,
    )  # unanswered turns repeat nothing


def test_the_command_reads_evaluation_files_and_refuses_others(tool, tmp_path, capsys):
    items = [ItemResult("guess/1000", True, 1.0, "[turn 1] \\boxed{10}", {"env": "guess", "seed": 1000})]
    path = tmp_path / "eval.json"
    EvalResult("m", "fake", 0, 1, {}, {"envs": SuiteResult("envs", "v1", items)}).write(path)
    assert tool.main([str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[str(path)]["guess"]["number"] == 1.0
    assert tool.main([str(path)]) == 0 and "guess" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert tool.main([str(bad)]) == 2
    assert "not an evaluation file with a 'envs' suite" in capsys.readouterr().err
