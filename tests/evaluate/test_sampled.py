"""Sampled evaluation: the unbiased pass@k by hand, the options, the merge of runs, files and comparisons."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from fractions import Fraction
from typing import Any, ClassVar

import pytest
from rich.console import Console
from typer.testing import CliRunner

import spade_rl.policy
from spade_rl.cli import app
from spade_rl.configdata import ConfigError, build
from spade_rl.evaluate.base import GREEDY, EvalContext, ItemResult, Suite, SuiteResult, generate_texts
from spade_rl.evaluate.config import EvalConfig
from spade_rl.evaluate.results import EvalResult, compare
from spade_rl.evaluate.runner import run_eval
from spade_rl.evaluate.sampled import check_samples, ks_for, merge_samples, pass_at_k, pass_at_k_of
from spade_rl.evaluate.tables import categories_table, compare_table, results_table
from spade_rl.experiment.compare import to_markdown
from spade_rl.policy import FakePolicy


# --- the estimator --------------------------------------------------------------------------------------
def test_pass_at_k_by_hand():
    # n = 4, c = 1: pass@k = 1 - C(3, k) / C(4, k): k=1: 1 - 3/4; k=2: 1 - 3/6; k=3: 1 - 1/4; k=4: C(3,4)=0.
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 3) == pytest.approx(0.75)
    assert pass_at_k(4, 1, 4) == 1.0
    # n = 5, c = 2, k = 2: 1 - C(3, 2) / C(5, 2) = 1 - 3/10.
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert all(pass_at_k(5, 0, k) == 0.0 for k in range(1, 6))  # none right: 0 at every k
    assert all(pass_at_k(5, 5, k) == 1.0 for k in range(1, 6))  # all right: 1 at every k
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0


def test_pass_at_k_is_stable_where_the_binomials_are_huge():
    # C(1000, 500) has about 300 digits; the product form agrees with the exact rational value.
    n, c, k = 1000, 37, 500
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5), (4.0, 1, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_ks_are_the_powers_of_two_and_n():
    assert ks_for(1) == [1]
    assert ks_for(2) == [1, 2]
    assert ks_for(6) == [1, 2, 4, 6]
    assert ks_for(8) == [1, 2, 4, 8]
    assert ks_for(64) == [1, 2, 4, 8, 16, 32, 64]


def test_pass_at_k_of_items_averages_over_items():
    items = [
        ItemResult("a", True, 1.0, "", samples=[(True, 1.0), (False, 0.0), (False, 0.0), (False, 0.0)]),
        ItemResult("b", False, 0.0, "", samples=[(False, 0.0)] * 4),
        ItemResult("c", True, 1.0, "", samples=[(True, 1.0)] * 4),
    ]
    # per item pass@1: 0.25, 0, 1; pass@2: 0.5, 0, 1; pass@4: 1, 0, 1.
    assert pass_at_k_of(items) == pytest.approx({1: 1.25 / 3, 2: 1.5 / 3, 4: 2 / 3})
    assert pass_at_k_of([ItemResult("x", True, 1.0, "")]) == {}
    suite = SuiteResult("s", "v", items)
    assert suite.samples == 4 and suite.sample_accuracy == pytest.approx(5 / 12)  # 5 of 12 samples right
    assert suite.pass_at_k[1] == pytest.approx(suite.sample_accuracy)  # pass@1 is the mean over samples


# --- the options ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "samples, temperature, message",
    [
        (0, 0.6, "eval.samples must be an integer from 1"),
        (True, 0.6, "eval.samples must be an integer from 1"),
        ("8", 0.6, "eval.samples must be an integer from 1"),
        (5000, 0.6, "to 1024"),
        (2, -0.1, "eval.temperature must be a finite number >= 0"),
        (2, math.nan, "eval.temperature must be a finite number >= 0"),
        (8, 0.0, "eval.samples = 8 needs eval.temperature > 0"),
    ],
)
def test_bad_samples_and_temperatures_are_refused_naming_the_key(samples, temperature, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_samples(samples, temperature, "eval")
    with pytest.raises(ConfigError, match=re.escape(message)):
        EvalConfig(samples=samples, temperature=temperature)


def test_good_values_pass_and_reach_the_context(pool):
    check_samples(1, 0.0, "eval")  # the default: one greedy answer
    check_samples(1, 0.7, "eval")  # one sampled answer, as --temperature always allowed
    config = build(
        EvalConfig, {"samples": 8, "temperature": 0.6, "greedy": False, "max_new_tokens": 64}, "eval"
    )
    ctx = config.context(pool)
    assert (ctx.samples, ctx.greedy, ctx.sampling.temperature, ctx.sampling.max_new_tokens) == (
        8,
        False,
        0.6,
        64,
    )
    default = EvalConfig().context(pool)
    assert (default.samples, default.sampling.temperature) == (1, 0.0)
    with pytest.raises(ConfigError, match=re.escape("eval.greedy must be true or false")):
        build(EvalConfig, {"greedy": "yes"}, "eval")
    with pytest.raises(ValueError, match=re.escape("ctx.samples = 2 needs ctx.temperature > 0")):
        EvalContext(limit=1, seed=0, sampling=GREEDY, sandbox=pool, samples=2)


def test_the_command_line_refuses_samples_without_temperature(monkeypatch):
    made = []
    monkeypatch.setattr(spade_rl.policy, "make_policy", lambda config: made.append(config))
    result = CliRunner().invoke(app, ["eval", "--suite", "envs", "--samples", "4"])
    assert result.exit_code == 2 and "--samples = 4 needs --temperature > 0" in result.output
    result = CliRunner().invoke(app, ["eval", "--suite", "envs", "--samples", "0", "--temperature", "1"])
    assert result.exit_code == 2 and "--samples must be an integer from 1" in result.output
    assert not made  # refused before any model was loaded


# --- running and merging --------------------------------------------------------------------------------
class _YesSuite(Suite):
    """Two questions; an answer "yes" is right."""

    name: ClassVar[str] = "yes"
    OPTIONS: ClassVar[dict[str, Any]] = {}

    def version(self) -> str:
        return "yes 1"

    def run(self, policy, ctx: EvalContext) -> SuiteResult:
        chats = [[{"role": "user", "content": f"question {i}"}] for i in range(2)]
        texts = generate_texts(policy, chats, ctx)
        items = [
            ItemResult(f"q{i}", text == "yes", float(text == "yes"), text, {"category": "c" if i else "d"})
            for i, (text, _) in enumerate(texts)
        ]
        return SuiteResult(self.name, self.version(), items, config={"seed": ctx.seed}, seconds=1.0)


def _ctx(pool, **kw) -> EvalContext:
    return EvalContext(
        limit=None, seed=3, sampling=replace(GREEDY, temperature=kw.pop("t", 0.0)), sandbox=pool, **kw
    )


def test_one_sample_is_one_run_as_before(pool):
    policy = FakePolicy(["yes", "no"])
    result = run_eval(policy, [_YesSuite()], _ctx(pool, t=0.7))
    suite = result.suites["yes"]
    assert [i.correct for i in suite.items] == [True, False] and suite.samples == 0 and suite.pass_at_k == {}
    assert result.samples is None and result.sampling["temperature"] == 0.7
    assert len(policy.calls) == 1 and policy.calls[0][1].seed == (3 * 1_000_003) % 2**31
    data = result.to_dict()
    assert "samples" not in data and "samples" not in data["suites"]["yes"]
    assert all("samples" not in item for item in data["suites"]["yes"]["items"])


def test_samples_beside_greedy(pool):
    # calls in turn: greedy (q0, q1), then draws 0, 1, 2 (q0, q1 each).
    policy = FakePolicy(["yes", "no", "yes", "no", "no", "no", "no", "yes"])
    result = run_eval(policy, [_YesSuite()], _ctx(pool, t=0.6, samples=3))
    suite = result.suites["yes"]
    assert [i.correct for i in suite.items] == [True, False]  # the greedy answers
    assert suite.items[0].samples == [(True, 1.0), (False, 0.0), (False, 0.0)]
    assert suite.items[1].samples == [(False, 0.0), (False, 0.0), (True, 1.0)]
    # each item 1 of 3: pass@1 = 1/3, pass@2 = 1 - C(2,2)/C(3,2) = 2/3, pass@3 = 1.
    assert suite.pass_at_k == pytest.approx({1: 1 / 3, 2: 2 / 3, 3: 1.0})
    assert suite.sample_accuracy == pytest.approx(1 / 3) and suite.seconds == 4.0
    temperatures = [settings.temperature for _, settings in policy.calls]
    seeds = [settings.seed for _, settings in policy.calls]
    assert temperatures == [0.0, 0.6, 0.6, 0.6]
    assert seeds[1] == (3 * 1_000_003) % 2**31 and len(set(seeds[1:])) == 3  # draw 0 as a single run
    assert result.sampling["temperature"] == 0.0  # the items' own results are greedy
    assert result.samples["n"] == 3 and result.samples["temperature"] == 0.6 and result.samples["greedy"]


def test_samples_without_greedy_keep_the_first_sample(pool):
    policy = FakePolicy(["no", "yes", "yes", "yes"])
    result = run_eval(policy, [_YesSuite()], _ctx(pool, t=1.0, samples=2, greedy=False))
    suite = result.suites["yes"]
    assert [i.correct for i in suite.items] == [False, True] and len(policy.calls) == 2
    assert suite.pass_at_k == pytest.approx({1: 0.75, 2: 1.0})
    assert result.sampling["temperature"] == 1.0 and result.samples["greedy"] is False


def test_runs_of_other_items_are_not_merged():
    a = SuiteResult("s", "v", [ItemResult("q0", True, 1.0, "")])
    b = SuiteResult("s", "v", [ItemResult("q1", True, 1.0, "")])
    with pytest.raises(ValueError, match="holds other items than the greedy run"):
        merge_samples(a, [a, b])


# --- files, comparisons, tables -------------------------------------------------------------------------
def _sampled(flags: list[list[bool]], temperature: float = 0.6, greedy=(True, False)) -> EvalResult:
    items = [
        ItemResult(f"q{i}", greedy[i], float(greedy[i]), "", {"category": "c"}, [(f, float(f)) for f in row])
        for i, row in enumerate(flags)
    ]
    return EvalResult(
        model="m",
        backend="fake",
        seed=0,
        limit=2,
        sampling={"temperature": 0.0, "max_new_tokens": 16},
        suites={"s": SuiteResult("s", "v", items, config={"seed": 0})},
        samples={"n": len(flags[0]), "greedy": True, "temperature": temperature, "max_new_tokens": 16},
    )


def test_round_trip_with_and_without_samples(tmp_path):
    sampled = _sampled([[True, False, False, False], [False, False, False, False]])
    sampled.write(tmp_path / "s.json")
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["samples"]["n"] == 4 and data["suites"]["s"]["samples"] == 4
    assert data["suites"]["s"]["pass_at_k"] == {"1": 0.125, "2": 0.25, "4": 0.5}
    assert data["suites"]["s"]["items"][0]["samples"] == [
        [True, 1.0],
        [False, 0.0],
        [False, 0.0],
        [False, 0.0],
    ]
    again = EvalResult.read(tmp_path / "s.json")
    assert again.samples == sampled.samples and again.suites["s"].items == sampled.suites["s"].items
    assert again.suites["s"].pass_at_k == {1: 0.125, 2: 0.25, 4: 0.5}
    # A file written before sampled evaluation (no samples anywhere) reads as before.
    old = sampled.to_dict()
    del old["samples"]
    for key in ("samples", "pass_at_k", "sample_accuracy", "sample_mean_score"):
        del old["suites"]["s"][key]
    for item in old["suites"]["s"]["items"]:
        del item["samples"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    read = EvalResult.read(tmp_path / "old.json")
    assert read.samples is None and read.suites["s"].samples == 0 and read.suites["s"].pass_at_k == {}
    assert read.suites["s"].accuracy == 0.5
    # A broken samples field says what is wrong.
    old["suites"]["s"]["items"][0]["samples"] = [[1, 0.0]]
    (tmp_path / "bad.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="samples must be a list of \\[correct, score\\] pairs"):
        EvalResult.read(tmp_path / "bad.json")


def _text(renderable) -> str:
    console = Console(width=300, record=True)
    console.print(renderable)
    return console.export_text()


def test_compare_and_tables_show_pass_at_k():
    a = _sampled([[True, False, False, False], [False, False, False, False]])
    b = _sampled([[True, True, False, False], [True, False, False, False]])
    rows = compare(a, b)
    assert [(r.suite, r.category) for r in rows] == [("s", None), ("s", "c")]
    assert rows[0].comparable and rows[0].pass_note == ""  # the greedy items are the same: paired
    assert rows[0].pass_a == pytest.approx({1: 0.125, 2: 0.25, 4: 0.5})
    # B: item 0 two of four: 0.5, 1 - C(2,2)/C(4,2) = 5/6, 1; item 1 one of four: 0.25, 0.5, 1.
    assert rows[0].pass_b == pytest.approx({1: 0.375, 2: (5 / 6 + 0.5) / 2, 4: 1.0})
    shown = _text(compare_table(rows, a, b))
    assert "pass@1 12.5 -> 37.5 (+25.0)" in shown and "pass@4 50.0 -> 100.0" in shown
    hotter = compare(a, _sampled([[True] * 4, [True] * 4], temperature=1.0))
    assert "samples' settings differ (temperature)" in hotter[0].pass_note
    assert "not comparable" in _text(compare_table(hotter, a, b))
    plain = replace(
        a,
        samples=None,
        suites={
            "s": SuiteResult(
                "s", "v", [replace(i, samples=[]) for i in a.suites["s"].items], config={"seed": 0}
            )
        },
    )
    one_sided = compare(plain, b)
    assert one_sided[0].comparable and one_sided[0].pass_a is None and one_sided[0].pass_b
    assert "B only: pass@1 37.5" in _text(compare_table(one_sided, plain, b))
    assert not any(r.pass_a or r.pass_b for r in compare(plain, plain))
    table = _text(results_table(b))
    assert "greedy accuracy %" in table and "pass@1 37.5, pass@2 66.7, pass@4 100.0" in table
    assert "4 samples at temperature 0.6" in table
    assert "pass@1 37.5" in _text(categories_table(b))
    assert "pass@k" not in _text(results_table(plain))


def test_experiment_tables_show_pass_at_k():
    from spade_rl.experiment.compare import _score

    sampled = _score(_sampled([[True, False, False, False], [False] * 4]).suites["s"])
    assert sampled["pass_at_k"] == {"1": 0.125, "2": 0.25, "4": 0.5} and sampled["sample_accuracy"] == 0.125
    plain = _score(SuiteResult("s", "v", [ItemResult("q", True, 1.0, "")]))
    assert "pass_at_k" not in plain
    comparison = {
        "name": "x",
        "seeds": [0],
        "budget": "1 iteration",
        "baseline": "",
        "alpha": 0.05,
        "eval": {
            "suites": ["s"],
            "limit": 2,
            "seed": 0,
            "max_new_tokens": 16,
            "samples": 4,
            "temperature": 0.6,
        },
        "suites": {
            "s": {
                "base": [{"start": "a", "arms": ["arm"], **sampled}],
                "rows": [{"arm": "arm", "seed": 0, "vs_base": None, **plain}],
                "means": [],
            }
        },
        "training": [],
    }
    text = to_markdown(comparison)
    assert "4 samples per item at temperature 0.6, scores greedy" in text
    assert "| sample accuracy % | pass@k % |" in text and "pass@1 12.5, pass@2 25.0, pass@4 50.0" in text
    old = dict(
        comparison, eval={k: v for k, v in comparison["eval"].items() if k not in ("samples", "temperature")}
    )
    old["suites"] = {
        "s": {"base": [], "rows": [{"arm": "arm", "seed": 0, "vs_base": None, **plain}], "means": []}
    }
    text = to_markdown(old)
    assert "Evaluation (greedy," in text and "pass@k" not in text


@pytest.mark.slow
def test_the_command_line_writes_a_sampled_result(monkeypatch, tokenizer, tmp_path):
    from spade_rl import cli

    monkeypatch.setattr(cli.console, "width", 250)
    answers = iter(["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"] * 4)
    policy = FakePolicy(lambda chat: next(answers), tokenizer=tokenizer)
    monkeypatch.setattr(spade_rl.policy, "make_policy", lambda config: policy)
    out = tmp_path / "sampled.json"
    args = ["eval", "--suite", "reasoning_gym", "--limit", "1", "--samples", "2", "--temperature", "0.5"]
    args += ["--option", "reasoning_gym.math=leg_counting", "--option", "reasoning_gym.algorithmic="]
    args += ["--option", "reasoning_gym.cognition=", "--option", "reasoning_gym.logic=", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = EvalResult.read(out)
    assert saved.samples["n"] == 2 and saved.samples["temperature"] == 0.5
    assert [settings.temperature for _, settings in policy.calls] == [0.0, 0.5, 0.5]
    suite = saved.suites["reasoning_gym"]
    assert suite.samples == 2 and sorted(suite.pass_at_k) == [1, 2]
    assert "pass@1" in result.output and "greedy accuracy %" in result.output
