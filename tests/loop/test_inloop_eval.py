"""In-loop evaluation: every E iterations a held-out evaluation, in RUN_DIR/eval and in metrics.jsonl.

The tiny model plays; designer answers are scripted (as in test_selfplay.py). A resumed run must
neither evaluate a recorded iteration again nor lose the evaluation of one that runs again.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_selfplay import HANGS, PARITY, SMALL, designer_output

from fixture_envs import scripted_roles
from spade_rl.evaluate.results import EvalResult
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import tiny_random_model

EVAL = [
    "eval.suites=['envs']",
    "eval.limit=2",
    "eval.seed=7",
    "eval.max_new_tokens=8",
    "eval.options.envs.envs=['arithmetic']",
    "eval.options.envs.max_turns=1",
    "eval.options.envs.max_new_tokens=8",
    "pool.reference=['arithmetic']",
]


def roles() -> dict:
    model, tokenizer = tiny_random_model(seed=0)
    return scripted_roles(model, tokenizer, [designer_output(PARITY), designer_output(HANGS)] * 3)


def metrics_lines(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def spy_evaluations(run: SelfPlay) -> list[int]:
    evaluated: list[int] = []
    evaluate = run._evaluate_iteration
    run._evaluate_iteration = lambda i: (evaluated.append(i), evaluate(i))[1]
    return evaluated


@pytest.mark.slow
def test_every_e_iterations_writes_the_result_and_its_metrics(tmp_path):
    run_dir = tmp_path / "run"
    config = load_config(None, [*SMALL, "loop.iterations=2", "eval.every=2", *EVAL])
    with SelfPlay(config, run_dir, **roles()) as run:
        list(run.iterations())
    assert sorted(p.name for p in (run_dir / "eval").iterdir()) == ["iter-0002.json"]
    result = EvalResult.read(run_dir / "eval" / "iter-0002.json")
    suite = result.suites["envs"]
    assert suite.n == 2 and result.seed == 7 and result.limit == 2 and "after iteration 2" in result.model
    assert [item.id for item in suite.items] == ["arithmetic/seed=7", "arithmetic/seed=8"]
    first, second = metrics_lines(run_dir)
    assert not any(key.startswith("eval/") for key in first)
    assert second["eval/envs/accuracy"] == suite.accuracy
    assert (second["eval/envs/ci_low"], second["eval/envs/ci_high"]) == pytest.approx(suite.ci)
    assert second["eval/envs/n"] == 2 and second["time/eval_s"] > 0


@pytest.mark.slow
def test_resume_neither_redoes_nor_loses_an_evaluation(tmp_path):
    run_dir = tmp_path / "run"
    config = load_config(None, [*SMALL, "loop.iterations=2", "eval.every=1", *EVAL])
    with SelfPlay(config, run_dir, **roles()) as run:
        list(run.iterations())
    first = (run_dir / "eval" / "iter-0001.json").read_bytes()
    # As if killed in iteration 2 after its evaluation was written but before the iteration was
    # checkpointed (and, of an even later iteration, a stray result and half a file).
    shutil.rmtree(run_dir / "checkpoints" / "iter-0002")
    shutil.copy(run_dir / "eval" / "iter-0001.json", run_dir / "eval" / "iter-0003.json")
    (run_dir / "eval" / "iter-0003.json.tmp").write_text("{")

    resumed = load_config(run_dir / "config.json", ["loop.iterations=3"])
    with SelfPlay(resumed, run_dir, resume=True, **roles()) as run:
        assert sorted(p.name for p in (run_dir / "eval").iterdir()) == ["iter-0001.json"]
        evaluated = spy_evaluations(run)
        list(run.iterations())
    assert evaluated == [2, 3]  # iteration 1 is not evaluated again; 2 runs again with its evaluation
    assert (run_dir / "eval" / "iter-0001.json").read_bytes() == first
    names = sorted(p.name for p in (run_dir / "eval").iterdir())
    assert names == ["iter-0001.json", "iter-0002.json", "iter-0003.json"]
    assert "after iteration 3" in EvalResult.read(run_dir / "eval" / "iter-0003.json").model
    lines = metrics_lines(run_dir)
    assert [m["iteration"] for m in lines] == [1, 2, 3]
    assert all("eval/envs/accuracy" in m for m in lines)


def test_eval_settings_are_checked_before_anything_runs():
    cases = {
        "eval.every=-1": r"eval.every must be 0 \(never\) or a number of iterations",
        "eval.limit=0": r"eval.limit must be at least 1",
        "eval.suites=['mmlu']": r"eval.suites \['mmlu'\]: each once, from \['reasoning_gym', 'bfcl'",
        "eval.suites=[]": r"eval.suites must name at least one suite",
        "eval.options.reasoning_gym.math=['gcd']": r"eval.options.reasoning_gym: options for a suite",
        "eval.options.envs=3": r"eval.options.envs must be a table",
        "eval.colour=1": r"unknown key eval.colour; allowed keys of \[eval\]: batch_size, every, greedy",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, [override])
    # The suites' own options are checked when the evaluation is on.
    with pytest.raises(ConfigError, match=r"eval: unknown option\(s\) \['episode'\] for suite 'envs'"):
        load_config(None, ["eval.every=1", "eval.options.envs.episode=2"])
    with pytest.raises(ConfigError, match=r"unknown reference environment\(s\) \['chess'\]"):
        load_config(None, ["eval.every=1", "eval.options.envs.envs=['chess']"])
    assert load_config(None, ["eval.every=3"]).eval.every == 3


def test_in_loop_metrics_carry_pass_at_k_when_the_evaluation_samples():
    from types import SimpleNamespace

    from spade_rl.loop.run import eval_metrics

    sampled = SimpleNamespace(
        ci=(0.1, 0.9), accuracy=0.5, n=4, pass_at_k={1: 0.25, 2: 0.5}, sample_accuracy=0.25
    )
    greedy = SimpleNamespace(ci=(0.0, 0.6), accuracy=0.25, n=4, pass_at_k={}, sample_accuracy=None)
    metrics = eval_metrics(SimpleNamespace(suites={"envs": sampled, "bfcl": greedy}))
    assert metrics["eval/envs/pass@1"] == 0.25 and metrics["eval/envs/pass@2"] == 0.5
    assert metrics["eval/envs/sample_accuracy"] == 0.25 and metrics["eval/envs/accuracy"] == 0.5
    assert (
        not any(key.startswith("eval/bfcl/pass@") for key in metrics)
        and "eval/bfcl/sample_accuracy" not in metrics
    )
