"""Result files and comparisons, on hand-built results with hand-computed p-values."""

from __future__ import annotations

import json
import math

import pytest

from spade_rl.evaluate.base import ItemResult, SuiteResult
from spade_rl.evaluate.results import (
    EvalResult,
    ResultFileError,
    compare,
    mcnemar_exact,
    two_proportion_z,
)


def _items(flags: list[bool], prefix: str = "q", category: str | None = None) -> list[ItemResult]:
    detail = {"category": category} if category else {}
    return [ItemResult(f"{prefix}{i}", f, float(f), "", dict(detail)) for i, f in enumerate(flags)]


def _result(
    suites: dict[str, list[ItemResult]], seed: int = 0, limit: int | None = 10, **suite_kw
) -> EvalResult:
    return EvalResult(
        model="m",
        backend="fake",
        seed=seed,
        limit=limit,
        sampling={"temperature": 0.0, "max_new_tokens": 512},
        suites={
            name: SuiteResult(name, suite_kw.get("version", "v1"), items, config={"seed": seed})
            for name, items in suites.items()
        },
        created="2026-01-01T00:00:00+00:00",
    )


def test_mcnemar_exact_by_hand():
    # 0 vs 6 discordant pairs: p = 2 * P[Bin(6, 1/2) <= 0] = 2/64
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)
    # 1 vs 4: m = 5, p = 2 * (C(5,0) + C(5,1)) / 32 = 12/32
    assert mcnemar_exact(1, 4) == pytest.approx(0.375)
    assert mcnemar_exact(4, 1) == pytest.approx(0.375)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0


def test_two_proportion_z_by_hand():
    # 30/50 vs 20/50: pooled 0.5, variance 0.25 * 0.04 = 0.01, z = -2, p = erfc(2 / sqrt 2) = 0.0455
    assert two_proportion_z(30, 50, 20, 50) == pytest.approx(math.erfc(2 / math.sqrt(2)))
    assert two_proportion_z(30, 50, 20, 50) == pytest.approx(0.0455, abs=1e-4)
    assert two_proportion_z(0, 10, 0, 20) == 1.0 and two_proportion_z(5, 5, 7, 7) == 1.0


def test_paired_comparison_uses_mcnemar_on_matching_ids():
    a = _result({"s": _items([False] * 6 + [True] * 4)})
    b = _result({"s": _items([True] * 10)})
    [row] = compare(a, b)
    assert (row.n_a, row.n_b, row.acc_a, row.acc_b) == (10, 10, 0.4, 1.0)
    assert row.diff == pytest.approx(0.6)
    assert row.test == "mcnemar_exact" and row.p_value == pytest.approx(0.03125)
    assert row.significant and row.comparable
    assert "0 right only in A, 6 right only in B" in row.note
    # the same accuracies on different items: unpaired
    c = _result({"s": _items([True] * 10, prefix="other")})
    [row] = compare(a, c)
    assert row.test == "two_proportion_z" and "ids differ" in row.note
    assert row.p_value == pytest.approx(two_proportion_z(4, 10, 10, 10))


def test_small_differences_are_within_noise():
    a = _result({"s": _items([True, False, True, True, False, True, False, True])})
    b = _result({"s": _items([True, True, True, True, False, False, True, True])})
    [row] = compare(a, b)
    assert row.test == "mcnemar_exact" and not row.significant  # 1 vs 2 discordant: p = 1.0
    assert row.p_value == pytest.approx(1.0)


def test_categories_get_rows_of_their_own():
    a = _result({"s": _items([True, False], "x", "math") + _items([False, False], "y", "logic")})
    b = _result({"s": _items([True, True], "x", "math") + _items([False, True], "y", "logic")})
    rows = compare(a, b)
    assert [(r.suite, r.category) for r in rows] == [("s", None), ("s", "math"), ("s", "logic")]
    assert rows[1].acc_a == 0.5 and rows[1].acc_b == 1.0 and rows[1].n_a == 2
    assert rows[2].note == "paired on 2 items: 0 right only in A, 1 right only in B"


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(seed=1), "seeds differ"),
        (dict(limit=20), "limits differ"),
        (dict(version="v2"), "versions differ"),
    ],
)
def test_results_that_are_not_comparable_are_flagged_not_tested(change, reason):
    a = _result({"s": _items([False] * 10)})
    b = _result({"s": _items([True] * 10)}, **change)
    [row] = compare(a, b)
    assert not row.comparable and row.p_value is None and not row.significant
    assert reason in row.note
    assert row.acc_a == 0.0 and row.acc_b == 1.0  # still shown side by side


def test_different_sampling_or_suite_options_are_flagged():
    a = _result({"s": _items([True])})
    b = _result({"s": _items([True])})
    b.sampling = {"temperature": 0.6, "max_new_tokens": 512}
    assert "sampling differs (temperature)" in compare(a, b)[0].note
    c = _result({"s": _items([True])})
    c.suites["s"].config = {"seed": 0, "tasks": ["gcd"]}
    assert "suite options differ (tasks)" in compare(a, c)[0].note


def test_an_option_added_after_a_result_was_written_reads_as_its_default():
    """A suite option added later (envs.system_prompt) is missing from the records written before it: an
    older record is the same evaluation as a newer one at the option's default, and not beside another
    value. Where the suite is not known here, a missing option is a difference, as any other."""
    from spade_rl.evaluate.envs_suite import EnvsSuite

    def envs(config: dict) -> EvalResult:
        result = _result({"envs": _items([False, True] * 5)})
        result.suites["envs"].config = {"seed": 0, "max_turns": 8, **config}
        return result

    older, newer = envs({}), envs({"system_prompt": EnvsSuite.OPTIONS["system_prompt"]})
    for a, b in ((older, newer), (newer, older)):
        [row] = compare(a, b)
        assert row.comparable and row.p_value is not None, row.note
    [row] = compare(older, envs({"system_prompt": "Answer in \\boxed{}."}))
    assert not row.comparable and "suite options differ (system_prompt)" in row.note
    [row] = compare(envs({}), envs({"max_turns": 30}))  # a recorded value still differs from another
    assert "suite options differ (max_turns)" in row.note
    unknown_a, unknown_b = _result({"s": _items([True])}), _result({"s": _items([True])})
    unknown_b.suites["s"].config = {"seed": 0, "system_prompt": ""}
    assert "suite options differ (system_prompt)" in compare(unknown_a, unknown_b)[0].note


def test_suites_present_on_one_side_only():
    a = _result({"s": _items([True]), "t": _items([False, True])})
    b = _result({"s": _items([True]), "u": _items([True])})
    rows = {r.suite: r for r in compare(a, b)}
    assert rows["t"].note == "only in A" and rows["t"].acc_b is None and rows["t"].acc_a == 0.5
    assert rows["u"].note == "only in B" and rows["u"].acc_a is None
    assert not rows["t"].comparable


def test_write_and_read_round_trip(tmp_path):
    result = _result({"s": _items([True, False], category="c")})
    result.host = {"python": "3.11"}
    path = tmp_path / "deep" / "r.json"
    result.write(path)
    again = EvalResult.read(path)
    assert again == result
    data = json.loads(path.read_text())
    assert data["format"] == "spade-rl-eval/1" and data["suites"]["s"]["accuracy"] == 0.5


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such result file"),
        ("{not json", "is not JSON"),
        ("[]", "expected a JSON object"),
        ('{"format": "other"}', "format is 'other'"),
        ("REMOVE model", "field 'model'"),
        ("BREAK item", "lacks the field 'correct'"),
        ("RENAME suite", "holds the result of"),
    ],
)
def test_reading_bad_files_says_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "r.json"
    data = _result({"s": _items([True])}).to_dict()
    if content == "REMOVE model":
        del data["model"]
        content = json.dumps(data)
    elif content == "BREAK item":
        del data["suites"]["s"]["items"][0]["correct"]
        content = json.dumps(data)
    elif content == "RENAME suite":
        data["suites"]["other"] = data["suites"].pop("s")
        content = json.dumps(data)
    if content is not None:
        path.write_text(content)
    with pytest.raises(ResultFileError, match=message):
        EvalResult.read(path)
