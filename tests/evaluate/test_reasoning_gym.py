"""The Reasoning Gym suite: ground truth scores 100%, corrupted answers 0, garbage is scored."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from reasoning_gym.factory import DATASETS

from spade_rl.evaluate import reasoning_gym_suite as rg
from spade_rl.evaluate.base import GREEDY, EvalContext, SuiteResult
from spade_rl.evaluate.reasoning_gym_suite import FAMILIES, ReasoningGymSuite, normalise
from spade_rl.policy import FakePolicy

NO_FAMILIES = {family: () for family in FAMILIES}


def _ctx(pool, limit=5, seed=0, max_new_tokens=GREEDY.max_new_tokens):
    sampling = replace(GREEDY, max_new_tokens=max_new_tokens)
    return EvalContext(limit=limit, seed=seed, sampling=sampling, sandbox=pool)


def _answering(suite, ctx, answer_of):
    """A FakePolicy that answers each question with ``answer_of(item)`` (text), looked up by question."""
    items = {item["entry"]["question"]: item for item in suite.items(ctx)}
    return FakePolicy(lambda chat: answer_of(items[chat[-1]["content"]]))


def _boxed(answer: str) -> str:
    return f"Let me think. The final answer is \\boxed{{{answer}}}"


def test_ground_truth_scores_every_default_item(pool):
    suite = ReasoningGymSuite()
    ctx = _ctx(pool)
    result = suite.run(_answering(suite, ctx, lambda item: _boxed(item["entry"]["answer"])), ctx)
    assert result.n == 5 * sum(len(tasks) for tasks in FAMILIES.values())
    wrong = [(i.id, i.detail) for i in result.items if not i.correct]
    assert not wrong
    assert result.accuracy == 1.0 and result.metrics["mean_score"] == 1.0
    assert {i.detail["category"] for i in result.items} == set(FAMILIES)
    assert result.version.startswith("reasoning-gym 0.1.")
    assert result.config["seed"] == 0 and result.config["items_per_task"] == 5


# Every task of the four families except those whose items cannot be reproduced from a reference answer:
# graph_color, rubiks_cube and propositional_logic verify a solution and store no answer in the item.
NO_REFERENCE = {"graph_color", "rubiks_cube", "propositional_logic"}
MODULE_FAMILIES = {
    "arithmetic": "math",
    "algebra": "math",
    "geometry": "math",
    "probability": "math",
    "algorithmic": "algorithmic",
    "cognition": "cognition",
    "logic": "logic",
}


def _all_tasks() -> dict[str, tuple[str, ...]]:
    families: dict[str, list[str]] = {family: [] for family in FAMILIES}
    for name, (cls, _) in sorted(DATASETS.items()):
        family = MODULE_FAMILIES.get(cls.__module__.split(".")[1])
        if family and name not in NO_REFERENCE:
            families[family].append(name)
    return {family: tuple(tasks) for family, tasks in families.items()}


@pytest.mark.slow
def test_ground_truth_scores_every_task_of_the_four_families(pool):
    """The harness reproduces each task's own answer: an answer in \\boxed{} (in <answer> tags when its
    braces do not balance) scores 1.0 through extraction and the sandboxed scorer. The only items that
    cannot reproduce are those whose reference answer is the empty string (an empty answer is no answer)."""
    suite = ReasoningGymSuite(**_all_tasks())
    ctx = _ctx(pool, limit=3, max_new_tokens=8192)  # the fake's tokens are bytes; some answers are long

    def answer(item):
        text = item["entry"]["answer"]
        if text.count("{") == text.count("}"):
            return _boxed(text)
        return f"<answer>{text}</answer>"

    result = suite.run(_answering(suite, ctx, answer), ctx)
    assert result.n == 3 * sum(len(t) for t in _all_tasks().values()) > 150
    wrong = [(i.id, i.detail.get("expected"), i.detail.get("error")) for i in result.items if not i.correct]
    assert all(expected == "" for _, expected, _ in wrong), wrong
    assert len(wrong) <= 3


def _corrupt(item, others):
    """A well-formed wrong answer: another item's answer of the same task when one differs, else mangled."""
    answer = item["entry"]["answer"]
    different = [o for o in others if o != answer and o.strip()]
    return different[0] if different else answer[::-1] + " not"


def test_corrupted_answers_score_no_item(pool):
    suite = ReasoningGymSuite()
    ctx = _ctx(pool)
    by_task: dict[str, list[str]] = {}
    for item in suite.items(ctx):
        by_task.setdefault(item["task"], []).append(item["entry"]["answer"])
    policy = _answering(suite, ctx, lambda item: _boxed(_corrupt(item, by_task[item["task"]])))
    result = suite.run(policy, ctx)
    assert result.n == 60
    assert [i.id for i in result.items if i.correct] == []
    assert result.accuracy == 0.0
    assert all(i.detail["extracted"] is not None for i in result.items)  # answered, and wrong


GARBAGE = [
    "",
    "\x00\x01\x02 binary \xff\xfe \ufffd",
    "}{}{ \\boxed{ \\boxed{",
    "\\boxed{}",
    "<answer></answer>",
    "\\boxed{" + "9" * 300 + "}",
    "\\boxed{1e999999999}",
    "\\boxed{__import__('os').system('echo pwned')}",
    "x" * 100_000,
]


def test_garbage_is_scored_not_crashed(pool):
    suite = ReasoningGymSuite(**{**NO_FAMILIES, "math": ("chain_sum",), "logic": ("syllogism",)})
    ctx = _ctx(pool, limit=len(GARBAGE))
    rng = random.Random(0)
    texts = iter(GARBAGE * 2)
    result = suite.run(FakePolicy(lambda chat: next(texts)), ctx)
    assert result.n == 2 * len(GARBAGE)
    assert result.correct == 0 and result.errors == 0  # garbage is a wrong answer, never an error
    assert all(0.0 <= i.score <= 1.0 for i in result.items)
    assert all(len(i.response) <= 2100 for i in result.items)
    random_bytes = bytes(rng.randrange(256) for _ in range(400)).decode("latin-1")
    again = suite.run(FakePolicy(lambda chat: random_bytes), ctx)
    assert again.correct == 0 and again.n == result.n


@pytest.mark.slow
def test_a_hanging_scorer_is_killed_and_scoring_goes_on(pool):
    """coin_flip's scorer computes Fraction("1e999999999"), which never finishes: the answer drove the
    scorer past its deadline, so the item is a wrong answer (not an error) with the reason, the worker is
    replaced, and the next items are scored normally."""
    suite = ReasoningGymSuite(**{**NO_FAMILIES, "math": ("coin_flip",)}, score_timeout_s=1.0)
    ctx = _ctx(pool, limit=3)
    items = suite.items(ctx)
    first = items[0]["entry"]["question"]
    policy = _answering(
        suite,
        ctx,
        lambda item: _boxed("1e999999999" if item["entry"]["question"] == first else item["entry"]["answer"]),
    )
    result = suite.run(policy, ctx)
    assert [i.correct for i in result.items] == [False, True, True]
    assert result.items[0].detail["reason"] == "scorer_limit"
    assert "timeout" in result.items[0].detail["error"]
    assert result.errors == 0 and result.scored == 3 and not result.items[0].error


def test_a_scorer_that_raises_makes_an_error_not_a_wrong_answer(pool, monkeypatch):
    """The real sandboxed scorer, with a task scorer that raises on one answer: that item is an error
    (counted, left out of accuracy and of the metrics), the others are scored as usual."""
    raising = rg.SCORER_SOURCE.replace(
        "            score = float(self._datasets[key].score_answer(",
        "            if request['answer'] == 'boom':\n"
        "                raise KeyError('the scorer broke')\n"
        "            score = float(self._datasets[key].score_answer(",
    )
    assert raising != rg.SCORER_SOURCE
    monkeypatch.setattr(rg, "SCORER_SOURCE", raising)
    suite = ReasoningGymSuite(**{**NO_FAMILIES, "math": ("basic_arithmetic",)})
    ctx = _ctx(pool, limit=3)
    items = suite.items(ctx)
    answers = {
        items[0]["entry"]["question"]: "boom",
        items[1]["entry"]["question"]: items[1]["entry"]["answer"],
    }
    result = suite.run(
        _answering(suite, ctx, lambda item: _boxed(answers.get(item["entry"]["question"], "x"))), ctx
    )
    broken, right, wrong = result.items
    assert broken.error.startswith("KeyError") and "the scorer broke" in broken.error
    assert broken.detail["reason"] == "scorer_error" and not broken.correct
    assert right.correct and not right.error and not wrong.correct and not wrong.error
    assert (result.n, result.scored, result.errors, result.correct) == (3, 2, 1, 1)
    assert result.accuracy == 0.5 and result.summary() == "1/2 correct, 1 error"
    assert result.metrics["mean_score"] == 0.5 and result.metrics["accuracy/math"] == 0.5
    again = SuiteResult.from_dict(result.to_dict())
    assert again.items[0].error == broken.error and again.accuracy == 0.5


def test_answer_tags_format(pool):
    suite = ReasoningGymSuite(**{**NO_FAMILIES, "algorithmic": ("spell_backward",)}, answer_format="answer")
    ctx = _ctx(pool, limit=3)
    policy = _answering(suite, ctx, lambda item: f"<answer>{item['entry']['answer']}</answer>")
    result = suite.run(policy, ctx)
    assert result.accuracy == 1.0
    system = policy.calls[0][0][0][0]["content"]
    assert "<answer>" in system and "boxed" not in system


def test_items_are_seeded_and_stable_across_limits(pool):
    suite = ReasoningGymSuite()
    small = suite.items(_ctx(pool, limit=2))
    large = suite.items(_ctx(pool, limit=4))
    other = suite.items(_ctx(pool, limit=2, seed=1))
    key = [(i["task"], i["index"], i["entry"]["question"]) for i in small]
    assert key == [(i["task"], i["index"], i["entry"]["question"]) for i in large if i["index"] < 2]
    assert key != [(i["task"], i["index"], i["entry"]["question"]) for i in other]


def test_no_answer_is_recorded():
    assert normalise(None) is None
    assert normalise("\\text{Yes}") == "Yes"
    assert normalise("\\textbf{\\text{ No }}") == "No"
    assert normalise("\\text{a} and \\text{b}") == "\\text{a} and \\text{b}"
    assert normalise("\\text{}") is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"math": "no_such_task"}, "unknown Reasoning Gym task 'no_such_task'"),
        ({"math": "gcd", "logic": "gcd"}, "listed in both"),
        (NO_FAMILIES, "every family is empty"),
        ({"answer_format": "json"}, "allowed: boxed, answer"),
        ({"items_per_task": "0"}, "must be positive"),
        ({"colour": "red"}, "allowed: "),
    ],
)
def test_bad_options_say_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=message):
        ReasoningGymSuite(**options)
