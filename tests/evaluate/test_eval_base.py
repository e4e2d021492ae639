"""The evaluation interface: Wilson intervals, answer extraction, result records, options, the registry."""

from __future__ import annotations

import math
import sys
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_rl.evaluate import base
from spade_rl.evaluate.base import (
    GREEDY,
    EvalContext,
    ItemResult,
    Suite,
    SuiteResult,
    SuiteUnavailable,
    extract_answer,
    generate_texts,
    get_suite,
    wilson_interval,
)
from spade_rl.policy import FakePolicy


def test_wilson_interval_matches_hand_computation():
    # 5 of 10, z = 1.96: z² = 3.8416, denominator 1 + 0.38416 = 1.38416, centre (0.5 + 0.19208)/1.38416 = 0.5,
    # half-width 1.96/1.38416 * sqrt(0.025 + 0.009604) = 1.416021 * 0.186022 = 0.263410.
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.236590, abs=1e-6) and high == pytest.approx(0.763410, abs=1e-6)
    # 0 of 10: centre 0.19208/1.38416 = 0.138771, half-width 1.416021 * sqrt(0.009604) = 0.138770.
    low, high = wilson_interval(0, 10)
    assert low == pytest.approx(0.0, abs=1e-6) and high == pytest.approx(0.277541, abs=1e-6)
    # 10 of 10 mirrors 0 of 10.
    low, high = wilson_interval(10, 10)
    assert low == pytest.approx(1 - 0.277541, abs=1e-6) and high == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    # a wider z widens the interval
    assert wilson_interval(5, 10, z=2.576)[0] < 0.236590


@pytest.mark.parametrize("correct, n", [(-1, 5), (6, 5), (1, -1), (True, 5), (1.0, 5)])
def test_wilson_interval_refuses_impossible_counts(correct, n):
    with pytest.raises(ValueError):
        wilson_interval(correct, n)


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"The answer is \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{2}", "2"),  # the last one
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # balanced braces
        (r"\boxed { 7 }", "7"),
        ("<answer> yes </answer>", "yes"),
        ("<ANSWER>Yes</Answer>", "Yes"),  # tags are case-insensitive
        (r"<answer>\boxed{3}</answer>", "3"),  # a box inside the answer tags wins
        (r"\boxed{1} and finally <answer>2</answer>", "2"),  # whichever ends later
        (r"<answer>2</answer> no, \boxed{5}", "5"),
        (r"\boxed{9} and then \boxed{10", "9"),  # an unclosed box (cut off) does not count
        ("<answer>unfinished", None),
        (r"\boxed{}", None),
        (r"\boxed{   }", None),
        ("no answer at all", None),
        ("", None),
        ("line one\n\\boxed{a\nb}", "a\nb"),
        ("}}}{{{\\boxed{x}", "x"),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_of_non_text_is_none():
    assert extract_answer(None) is None  # type: ignore[arg-type]
    assert extract_answer(b"\\boxed{1}") is None  # type: ignore[arg-type]


def python_lines_run(function, *args) -> int:
    """How many lines of Python ``function(*args)`` runs (the work it does, counted, not timed)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        function(*args)
    finally:
        sys.settrace(None)
    return count


def test_extract_answer_is_linear_on_hostile_text():
    def hostile(n: int) -> str:
        return "\\boxed{" * n + "x" + "{" * n

    assert extract_answer(hostile(200_000)) is None
    assert extract_answer(hostile(200_000) + "\\boxed{ok}") == "ok"
    # Twice the text, at most about twice the work (a quadratic scan would do four times as much).
    small, large = (python_lines_run(extract_answer, hostile(n) + "\\boxed{ok}") for n in (2_000, 4_000))
    assert large <= 2.1 * small, (small, large)


def _suite_result() -> SuiteResult:
    items = [
        ItemResult("a/0", True, 1.0, "\\boxed{1}", {"category": "a", "expected": "1"}),
        ItemResult("a/1", False, 0.25, "junk", {"category": "a"}),
        ItemResult("b/0", True, 1.0, "", {}),
    ]
    return SuiteResult("toy", "toy 1.0", items, {"mean": 0.75}, {"seed": 0, "tasks": ["a", "b"]}, 1.5)


def test_suite_result_counts_and_round_trips():
    result = _suite_result()
    assert (result.n, result.correct) == (3, 2)
    assert result.accuracy == pytest.approx(2 / 3)
    assert result.ci == wilson_interval(2, 3)
    data = result.to_dict()
    assert data["accuracy"] == pytest.approx(2 / 3) and data["n"] == 3
    again = SuiteResult.from_dict(data)
    assert again == result
    assert SuiteResult("empty", "v", []).accuracy == 0.0
    assert SuiteResult("empty", "v", []).ci == (0.0, 1.0)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("version"), "lacks the field 'version'"),
        (lambda d: d.update(items="x"), "wrong type"),
        (lambda d: d["items"][0].update(correct="yes"), "'correct'"),
        (lambda d: d["items"][1].pop("id"), "lacks the field 'id'"),
        (lambda d: d.update(metrics={"x": "high"}), "metrics"),
        (lambda d: d["items"][0].update(detail=[]), "detail"),
    ],
)
def test_suite_result_from_dict_says_what_is_wrong(change, message):
    data = _suite_result().to_dict()
    change(data)
    with pytest.raises(ValueError, match=message):
        SuiteResult.from_dict(data)


class _Toy(Suite):
    name: ClassVar[str] = "toy"
    OPTIONS: ClassVar[dict[str, Any]] = {
        "count": 3,
        "ratio": 0.5,
        "strict": False,
        "names": ("a", "b"),
        "mode": "x",
    }

    def version(self) -> str:
        return "toy 1"

    def run(self, policy, ctx):
        return SuiteResult(self.name, self.version(), [])


def test_suite_options_are_checked_and_converted_from_text():
    toy = _Toy(count="7", ratio="0.25", strict="true", names="p, q,,r", mode="y")
    assert toy.options == {"count": 7, "ratio": 0.25, "strict": True, "names": ("p", "q", "r"), "mode": "y"}
    assert _Toy().options["names"] == ("a", "b")
    assert _Toy(names="").options["names"] == ()
    with pytest.raises(ValueError, match="allowed: count, mode, names, ratio, strict"):
        _Toy(colour="red")
    for bad in ({"count": "seven"}, {"count": 2.5}, {"count": True}, {"ratio": "nan"}, {"strict": "maybe"}):
        with pytest.raises(ValueError, match="option toy"):
            _Toy(**bad)


def test_get_suite_names_the_known_suites_and_what_to_install(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="known suites: reasoning_gym, bfcl, humaneval, envs"):
        get_suite("gsm8k")
    monkeypatch.setitem(base.SUITES, "ghost", "spade_rl.evaluate.no_such_module:Ghost")
    with pytest.raises(SuiteUnavailable, match="not part of this installation"):
        get_suite("ghost")
    (tmp_path / "needs_missing_dep.py").write_text("import no_such_package_for_spade_tests\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(base.SUITES, "needy", "needs_missing_dep:Needy")
    monkeypatch.setitem(base.SUITE_INSTALL, "needy", "pip install 'spade-rl[eval]'")
    with pytest.raises(SuiteUnavailable, match=r"no_such_package_for_spade_tests.*spade-rl\[eval\]"):
        get_suite("needy")
    sys.modules.pop("needs_missing_dep", None)
    monkeypatch.setitem(base.SUITES, "classless", "json:NoSuchClass")
    with pytest.raises(SuiteUnavailable, match="no class NoSuchClass"):
        get_suite("classless")


def test_registry_builds_the_core_suites_with_their_options():
    suite = get_suite("envs", episodes="3")
    assert suite.name == "envs" and suite.options["episodes"] == 3
    with pytest.raises(ValueError, match="allowed: "):
        get_suite("envs", colour="red")


def test_eval_context_is_validated():
    for bad in (
        {"limit": 0},
        {"limit": "5"},
        {"seed": -1},
        {"batch_size": 0},
        {"sampling": {"temperature": 0}},
    ):
        with pytest.raises(ValueError):
            EvalContext(**{"limit": None, "seed": 0, "sampling": GREEDY, "sandbox": None, **bad})


def test_generate_texts_batches_in_order_with_seeds_from_the_context():
    policy = FakePolicy(lambda chat: "echo " + chat[-1]["content"])
    chats = [[{"role": "user", "content": str(i)}] for i in range(7)]
    ctx = EvalContext(limit=None, seed=3, sampling=GREEDY, sandbox=None, batch_size=3)  # type: ignore[arg-type]
    texts = generate_texts(policy, chats, ctx)
    assert [t for t, _ in texts] == [f"echo {i}" for i in range(7)]
    assert [len(chats) for chats, _ in policy.calls] == [3, 3, 1]
    seeds = [settings.seed for _, settings in policy.calls]
    assert len(set(seeds)) == 3 and all(s.temperature == 0 for _, s in policy.calls)
    again = FakePolicy(lambda chat: "x")
    generate_texts(again, chats, ctx)
    assert [s.seed for _, s in again.calls] == seeds
    assert math.isclose(policy.calls[0][1].max_new_tokens, GREEDY.max_new_tokens)


@given(st.text(alphabet=st.sampled_from(list("\\boxed{}<answer/>ANSWER x1 \n")), max_size=200))
@settings(max_examples=300, deadline=None)
def test_extract_answer_never_raises_and_returns_a_piece_of_the_text(text):
    answer = extract_answer(text)
    assert answer is None or (answer and answer == answer.strip() and answer in text)
