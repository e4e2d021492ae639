"""`spade-rl eval` and `spade-rl eval --compare`: results, tables, and bad input (exit 2, no traceback)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import spade_rl.policy
from spade_rl import cli
from spade_rl.cli import app
from spade_rl.evaluate.base import ItemResult, SuiteResult
from spade_rl.evaluate.results import EvalResult
from spade_rl.evaluate.runner import build_suites
from spade_rl.policy import FakePolicy

runner = CliRunner()
ONE_TASK = [
    "--option",
    "reasoning_gym.math=gcd",
    "--option",
    "reasoning_gym.algorithmic=",
    "--option",
    "reasoning_gym.cognition=",
    "--option",
    "reasoning_gym.logic=",
]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Tables as a wide terminal shows them (the runner's default 80 columns wraps the cells)."""
    monkeypatch.setattr(cli.console, "width", 250)


def _clean_failure(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.fixture
def fake_model(monkeypatch, tokenizer):
    """`make_policy` answers with a FakePolicy: the CLI's own path, without loading a model."""
    made = []

    def make_policy(config):
        made.append(config)
        return FakePolicy(lambda chat: "I think \\boxed{1}", tokenizer=tokenizer)

    monkeypatch.setattr(spade_rl.policy, "make_policy", make_policy)
    return made


def test_eval_writes_a_result_and_prints_tables(fake_model, tmp_path):
    out = tmp_path / "r.json"
    args = ["eval", "--suite", "reasoning_gym", "--suite", "envs", "--limit", "2", "--seed", "3"]
    args += [*ONE_TASK, "--option", "envs.envs=guess,arithmetic", "--option", "envs.max_turns=2"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "reasoning_gym" in result.output and "envs" in result.output and "95% CI" in result.output
    saved = EvalResult.read(out)
    assert saved.model == "smollm2-135m" and saved.backend == "transformers"
    assert saved.seed == 3 and saved.limit == 2 and saved.sampling["temperature"] == 0.0
    assert saved.suites["reasoning_gym"].n == 2 and saved.suites["envs"].n == 4
    assert fake_model[0].seed == 3 and fake_model[0].model is None
    again = runner.invoke(app, ["eval", "--compare", str(out), str(out)])
    assert again.exit_code == 0, again.output
    assert "within noise" in again.output and "McNemar" in again.output


def _file(tmp_path, name: str, flags: list[bool], seed: int = 0):
    items = [ItemResult(f"q{i}", f, float(f), "", {"category": "c"}) for i, f in enumerate(flags)]
    result = EvalResult(
        model=name, backend="fake", seed=seed, limit=None, sampling={"temperature": 0.0},
        suites={"toy": SuiteResult("toy", "v1", items)}, created="now",
    )  # fmt: skip
    path = tmp_path / f"{name}.json"
    result.write(path)
    return path


def test_compare_prints_differences_and_their_verdict(tmp_path):
    a = _file(tmp_path, "before", [False] * 8)
    b = _file(tmp_path, "after", [True] * 8)
    result = runner.invoke(app, ["eval", "--compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "+100.0" in result.output and "better" in result.output
    c = _file(tmp_path, "other", [True] * 8, seed=1)
    result = runner.invoke(app, ["eval", "--compare", str(a), str(c)])
    assert result.exit_code == 0 and "not comparable" in result.output and "seeds differ" in result.output


def test_compare_bad_files(tmp_path):
    good = _file(tmp_path, "good", [True])
    _clean_failure(
        runner.invoke(app, ["eval", "--compare", str(good), str(tmp_path / "missing.json")]),
        "no such result file",
    )
    (tmp_path / "bad.json").write_text("{broken")
    _clean_failure(
        runner.invoke(app, ["eval", "--compare", str(good), str(tmp_path / "bad.json")]), "is not JSON"
    )
    (tmp_path / "wrong.json").write_text(json.dumps({"format": "spade-rl-eval/1", "model": 3}))
    _clean_failure(
        runner.invoke(app, ["eval", "--compare", str(tmp_path / "wrong.json"), str(good)]),
        "is not a spade-rl evaluation result",
    )
    _clean_failure(
        runner.invoke(app, ["eval", "--compare", str(good), str(good), "--suite", "envs"]),
        "takes no --model",
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--suite", "gsm8k"], "unknown suite 'gsm8k'; known suites: reasoning_gym"),
        (["--suite", "envs", "--option", "envs.colour=red"], "allowed: "),
        (["--suite", "envs", "--option", "episodes=4"], "write suite.key=value"),
        (["--suite", "envs", "--option", "envs.episodes=many"], "must be an integer"),
        (["--suite", "envs", "--option", "reasoning_gym.math=gcd"], "which are not run"),
        (["--suite", "envs", "--suite", "envs"], "more than once"),
        (["--suite", "envs", "--option", "envs.source=/no/such/run"], "neither 'reference' nor"),
        (["--suite", "reasoning_gym", "--option", "reasoning_gym.math=nope"], "unknown Reasoning Gym task"),
        (["--suite", "envs", "--backend", "llamacpp"], "policy backend 'llamacpp' is not allowed"),
    ],
)
def test_bad_input_is_a_clean_error(fake_model, args, message):
    _clean_failure(runner.invoke(app, ["eval", *args]), message)
    assert not fake_model  # refused before any model was loaded


def test_build_suites_checks_everything_before_running():
    suites = build_suites(["envs"], {"envs": {"episodes": "2"}})
    assert suites[0].options["episodes"] == 2
    with pytest.raises(ValueError, match="no suite to run"):
        build_suites([], {})


@pytest.fixture
def gem_missing(monkeypatch):
    """A registry of envs and gem, with gem's package reported missing (as on an installation without it).
    The registry is restored whole and in its order (its order is the order suites run and are listed)."""
    from spade_rl.envs import external
    from spade_rl.evaluate import base

    saved = dict(base.SUITES)
    base.SUITES.clear()
    base.SUITES.update({name: saved[name] for name in ("envs", "gem")})
    monkeypatch.setattr(external, "installed", lambda package: False)
    yield
    base.SUITES.clear()
    base.SUITES.update(saved)


def test_gem_without_its_package_is_unavailable(gem_missing):
    from spade_rl.evaluate.base import SUITE_INSTALL, SuiteUnavailable, get_suite

    with pytest.raises(SuiteUnavailable, match="suite 'gem' needs the package 'gem', which is not installed"):
        get_suite("gem")
    with pytest.raises(SuiteUnavailable, match=r"gem-llm==0\.1\.0"):
        get_suite("gem", games="game:Sudoku-v0-easy")
    assert "gem-llm" in SUITE_INSTALL["gem"]


def test_eval_without_suite_skips_what_is_not_installed_in_one_line(fake_model, gem_missing, tmp_path):
    out = tmp_path / "r.json"
    args = ["eval", "--limit", "1", "--option", "envs.envs=guess", "--option", "envs.max_turns=1"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "skipped" in line]
    assert lines == [
        "skipped suites whose packages are not installed: gem (pip install 'spade-rl[gem]' && pip install "
        "--no-deps gem-llm==0.1.0)"
    ]
    assert "running suite envs" in result.output and "envs: 0/1 correct, 0 errors" in result.output
    assert list(EvalResult.read(out).suites) == ["envs"]


def test_a_suite_that_cannot_run_fails_when_asked_for(fake_model, gem_missing):
    _clean_failure(
        runner.invoke(app, ["eval", "--suite", "gem"]),
        "suite 'gem' needs the package 'gem', which is not installed: pip install 'spade-rl[gem]'",
    )
    _clean_failure(
        runner.invoke(app, ["eval", "--option", "gem.episodes=2"]),
        "options given for suite(s) ['gem'], which cannot run: suite 'gem' needs the package 'gem'",
    )
    _clean_failure(runner.invoke(app, ["eval", "--option", "chess.depth=2"]), "unknown suite(s) ['chess']")
    assert not fake_model  # refused before any model was loaded


def test_no_installed_suite_is_a_clean_error(fake_model, gem_missing):
    from spade_rl.evaluate import base

    del base.SUITES["envs"]  # gem_missing restores the registry
    _clean_failure(runner.invoke(app, ["eval"]), "no suite can run, every one lacks a package: suite 'gem'")
    assert not fake_model
