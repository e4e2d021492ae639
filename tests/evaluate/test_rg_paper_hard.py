"""The paper's Reasoning Gym hard split: the table, the split option, skipped tasks, hard items scored."""

from __future__ import annotations

import logging

import pytest
import reasoning_gym
from reasoning_gym.factory import DATASETS

from spade_rl.evaluate import reasoning_gym_suite
from spade_rl.evaluate._rg_paper_hard import PAPER_HARD, PAPER_HARD_CONFIGS
from spade_rl.evaluate.base import GREEDY, EvalContext
from spade_rl.evaluate.reasoning_gym_suite import FAMILIES, ReasoningGymSuite, task_seed
from spade_rl.policy import FakePolicy

ONLY = {family: () for family in FAMILIES}


def test_the_table_holds_the_100_tasks_of_the_reference():
    # eval_offline/configs/_games_gem.yaml of spade-rl/spade: 31 math, 36 algorithmic, 24 cognition, 9 logic.
    assert {family: len(tasks) for family, tasks in PAPER_HARD.items()} == {
        "math": 31,
        "algorithmic": 36,
        "cognition": 24,
        "logic": 9,
    }
    tasks = [task for family in PAPER_HARD.values() for task in family]
    assert len(set(tasks)) == 100 and set(tasks) == set(PAPER_HARD_CONFIGS)
    assert PAPER_HARD_CONFIGS["ab"] == {"length": 25}  # spot checks against rg_a3_hard.py
    assert PAPER_HARD_CONFIGS["zebra_puzzles"] == {"num_characteristics": 5, "num_people": 5}
    assert "quantum_lock" in PAPER_HARD["math"] and "codeio" in PAPER_HARD["algorithmic"]
    assert not [task for task in tasks if task not in DATASETS]  # all in the pinned reasoning-gym


def test_the_split_option_selects_the_hard_tasks_and_configurations():
    suite = ReasoningGymSuite(split="paper_hard")
    assert len(suite.tasks()) == 100 and suite.skipped == []
    assert [task for family, task in suite.tasks() if family == "logic"] == list(PAPER_HARD["logic"])
    assert suite.configs["basic_arithmetic"] == PAPER_HARD_CONFIGS["basic_arithmetic"]
    some = ReasoningGymSuite(split="paper_hard", **{**ONLY, "math": "gcd,chain_sum"})
    assert some.tasks() == [("math", "gcd"), ("math", "chain_sum")]
    assert ReasoningGymSuite().configs == {}  # the default split keeps the default configurations


@pytest.mark.parametrize(
    "options, message",
    [
        ({"split": "hard"}, "option reasoning_gym.split 'hard' is not allowed; allowed: default, paper_hard"),
        ({"split": "paper_hard", "math": "aiw"}, "option reasoning_gym.math: ['aiw'] not in the math family"),
    ],
)
def test_bad_split_options_say_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ReasoningGymSuite(**options)


def test_tasks_the_installed_version_lacks_are_skipped_with_a_warning(monkeypatch, caplog, pool):
    monkeypatch.delitem(reasoning_gym_suite.DATASETS, "acre")
    monkeypatch.delitem(reasoning_gym_suite.DATASETS, "codeio")
    with caplog.at_level(logging.WARNING, logger="spade_rl.evaluate.reasoning_gym_suite"):
        suite = ReasoningGymSuite(split="paper_hard", **{**ONLY, "logic": "acre,aiw"})
    assert suite.skipped == ["acre"] and suite.tasks() == [("logic", "aiw")]
    assert "lacks 1 task(s), skipped: acre" in caplog.text
    ctx = EvalContext(limit=1, seed=0, sampling=GREEDY, sandbox=pool)
    result = suite.run(FakePolicy(lambda chat: "no idea"), ctx)
    assert result.config["skipped"] == ["acre"] and result.config["split"] == "paper_hard"
    assert [i.detail["task"] for i in result.items] == ["aiw"]


HARD_TASKS = {"math": "gcd,chain_sum", "algorithmic": "spell_backward", "cognition": "", "logic": "aiw"}


def test_hard_items_are_generated_with_their_configuration_and_score_in_the_sandbox(pool):
    suite = ReasoningGymSuite(split="paper_hard", **HARD_TASKS)
    ctx = EvalContext(limit=2, seed=0, sampling=GREEDY, sandbox=pool)
    items = suite.items(ctx)
    for item in items:
        config = PAPER_HARD_CONFIGS[item["task"]]
        seed = task_seed(0, item["task"])
        expected = reasoning_gym.create_dataset(item["task"], seed=seed, size=2, **config)[item["index"]]
        assert item["entry"]["question"] == expected["question"] and item["config"] == config
    # hard chain sums have 5 to 8 terms of 4 to 6 digits; the default configuration has none that long
    chain = [i for i in items if i["task"] == "chain_sum"]
    assert all(len(str(i["entry"]["answer"]).lstrip("-")) >= 3 for i in chain)
    by_question = {i["entry"]["question"]: i for i in items}
    truth = FakePolicy(lambda chat: f"\\boxed{{{by_question[chat[-1]['content']]['entry']['answer']}}}")
    result = suite.run(truth, ctx)
    assert result.accuracy == 1.0, [(i.id, i.detail) for i in result.items if not i.correct]
    assert result.metrics["accuracy/math"] == 1.0 and result.metrics["accuracy/logic"] == 1.0
    assert {i.detail["category"] for i in result.items} == {"math", "algorithmic", "logic"}
    wrong = suite.run(FakePolicy(lambda chat: "\\boxed{-1}"), ctx)
    assert wrong.correct == 0 and not any(i.detail.get("reason") == "scorer_error" for i in wrong.items)


def test_codeio_items_are_generated_in_the_sandbox_not_here(monkeypatch, pool):
    # codeio runs code snippets shipped with reasoning-gym to make its items: never in this process.
    real = reasoning_gym_suite.reasoning_gym.create_dataset

    def guarded(task, **kw):
        assert task != "codeio", "codeio items generated in the trusted process"
        return real(task, **kw)

    monkeypatch.setattr(reasoning_gym_suite.reasoning_gym, "create_dataset", guarded)
    suite = ReasoningGymSuite(split="paper_hard", **{**ONLY, "algorithmic": "codeio,ab"})
    ctx = EvalContext(limit=2, seed=0, sampling=GREEDY, sandbox=pool)
    items = suite.items(ctx)
    assert [i["task"] for i in items] == ["codeio", "codeio", "ab", "ab"]
    codeio = [i for i in items if i["task"] == "codeio"]
    assert all(i["entry"]["question"] and i["config"] == {"difficulty": 7} for i in codeio)
    assert [i["entry"]["question"] for i in suite.items(ctx)[:2]] == [i["entry"]["question"] for i in codeio]
    by_question = {i["entry"]["question"]: i for i in items}
    truth = FakePolicy(lambda chat: f"<answer>{by_question[chat[-1]['content']]['entry']['answer']}</answer>")
    result = ReasoningGymSuite(
        split="paper_hard", answer_format="answer", **{**ONLY, "algorithmic": "codeio,ab"}
    ).run(truth, ctx)
    assert [i.detail["task"] for i in result.items if i.correct] == ["codeio", "codeio", "ab", "ab"]
