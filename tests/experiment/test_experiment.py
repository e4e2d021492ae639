"""spade-rl experiment: the example files, the comparison, resume, and refusals of bad files.

The end-to-end test runs experiments/ci-tiny.toml through the command line (the tiny random model,
two arms, two iterations each) and checks the table and the figure; the comparison's numbers are
checked on result files written here, where the right answers are known.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spade_rl.evaluate.base import ItemResult, SuiteResult
from spade_rl.evaluate.results import EvalResult
from spade_rl.experiment import ExperimentError, RunRecord, load_experiment, run_experiment
from spade_rl.experiment.compare import build_comparison, to_markdown

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "spade_rl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.slow
def test_ci_tiny_experiment_writes_the_table_and_the_figure(tmp_path):
    out = tmp_path / "exp"
    done = cli("experiment", str(EXPERIMENTS / "ci-tiny.toml"), "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["baseline"] == "fixed-pool" and comparison["budget"] == "2 iterations per arm"
    for suite in ("envs", "reasoning_gym"):
        table = comparison["suites"][suite]
        assert len(table["base"]) == 1 and table["base"][0]["n"] == 2  # both arms start from one model
        assert [(r["arm"], r["seed"]) for r in table["rows"]] == [("fixed-pool", 0), ("spade", 0)]
        fixed, spade = table["rows"]
        assert fixed["vs_baseline"] is None and spade["vs_baseline"]["test"] == "mcnemar_exact"
        for row in table["rows"]:
            assert (
                row["n"] == 2
                and row["vs_base"]["comparable"]
                and row["vs_base"]["flag"]
                in (
                    "noise",
                    "better",
                    "worse",
                )
            )
    markdown = (out / "comparison.md").read_text()
    assert "## envs" in markdown and "## reasoning_gym" in markdown and "| vs fixed-pool (pp) |" in markdown
    assert "| spade | 0 |" in markdown and "| base model | - |" in markdown and "(p 1, noise)" in markdown
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "curves.png").stat().st_size > 20_000
    assert len(list((out / "start").glob("*.json"))) == 1
    for arm in ("fixed-pool", "spade"):
        run_dir = out / "arms" / arm / "seed-0"
        assert json.loads((run_dir / "done.json").read_text())["iterations"] == 2
        assert EvalResult.read(run_dir / "end-eval.json").suites["envs"].n == 2
        assert sorted(p.name for p in (run_dir / "eval").glob("iter-*.json")) == [
            "iter-0001.json",
            "iter-0002.json",
        ]
    training = {t["arm"]: t for t in comparison["training"]}
    assert (
        training["fixed-pool"]["designs_proposed"] == 0 and training["spade"]["designs_proposed"] == 8
    )  # 4 a design iteration
    assert training["fixed-pool"]["updates"] >= 1 and training["spade"]["updates"] >= 1  # the coin flip pays
    assert "comparison:" in done.stdout and "figure:" in done.stdout

    # Killed in the spade arm's second iteration: the fixed-pool arm is not run again, spade resumes.
    spade = out / "arms" / "spade" / "seed-0"
    for name in ("done.json", "end-eval.json", "eval/iter-0002.json"):
        (spade / name).unlink()
    shutil.rmtree(spade / "checkpoints" / "iter-0002")
    lines = (spade / "metrics.jsonl").read_text().splitlines()
    (spade / "metrics.jsonl").write_text(lines[0] + "\n")
    fixed_end = (out / "arms" / "fixed-pool" / "seed-0" / "end-eval.json").read_bytes()
    again = cli("experiment", str(EXPERIMENTS / "ci-tiny.toml"), "--out", str(out))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "arm fixed-pool, seed 0: finished earlier, not run again" in again.stdout
    assert "arm spade, seed 0: resuming" in again.stdout
    assert (out / "arms" / "fixed-pool" / "seed-0" / "end-eval.json").read_bytes() == fixed_end
    resumed = [json.loads(line) for line in (spade / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in resumed] == [1, 2] and json.dumps(resumed[0]) == json.dumps(
        json.loads(lines[0])
    )
    assert (spade / "end-eval.json").exists() and (spade / "eval" / "iter-0002.json").exists()


def write_experiment(folder: Path, body: str, name: str = "exp.toml") -> Path:
    path = folder / name
    path.write_text(body)
    return path


MINIMAL = """
[experiment]
iterations = 1
overrides = ["policy.model='tiny-random'"]
[eval]
suites = ["envs"]
[arms.a]
[arms.b]
overrides = ["design.memory=false"]
"""


def test_bad_experiment_files_are_refused(tmp_path):
    cases = {
        MINIMAL.replace("iterations = 1", "iterations = 1\nwall_time_s = 60"): "exactly one of",
        MINIMAL.replace(
            "iterations = 1", "iteration = 1"
        ): r"unknown key 'iteration' in \[experiment\]; allowed:",
        MINIMAL.replace("[arms.b]", "[arms.b]\nconfigs = 'x.toml'"): r"unknown key 'configs' in \[arms.b\]",
        MINIMAL.replace(
            "design.memory=false", "design.memroy=false"
        ): r"arm 'b' \(seed 0\): unknown key design.memroy",
        MINIMAL.replace("design.memory=false", "designer.source='none'\", \"pool.reference=[]"): (
            r"arm 'b' \(seed 0\): designer.source = 'none' trains on the pool alone"
        ),
        MINIMAL.replace('[arms.a]\n[arms.b]\noverrides = ["design.memory=false"]\n', ""): "no arm",
        MINIMAL.replace(
            "[experiment]", "[experiment]\nbaseline = 'c'"
        ): r"experiment.baseline 'c' is not an arm",
        MINIMAL.replace("[experiment]", "[experiment]\nseeds = [0, 0]"): "seeds must be distinct",
        MINIMAL.replace(
            "[experiment]", "[experiment]\nbase = 'missing.toml'"
        ): r"experiment.base = 'missing.toml'",
        MINIMAL.replace('suites = ["envs"]', 'suites = ["envs"]\noptions = {envs = {episode = 2}}'): (
            r"eval: unknown option\(s\) \['episode'\] for suite 'envs'"
        ),
        MINIMAL + "[extra]\n": r"unknown table \[extra\]",
        MINIMAL.replace("[arms.a]", "[arms.'a b']"): r"arm name 'a b'",
        MINIMAL.replace("[experiment]", "[experiment]\nplacement = 'cluster'"): (
            r"experiment.placement = 'cluster'; allowed: 'in-turn', 'ray'"
        ),
        MINIMAL.replace("[experiment]", "[experiment]\narm_cpus = 2"): 'arm_cpus goes with placement = "ray"',
        MINIMAL.replace("[experiment]", "[experiment]\nplacement = 'ray'\narm_gpus = -1"): (
            r"experiment.arm_gpus must be a number >= 0, got -1"
        ),
    }
    for body, message in cases.items():
        with pytest.raises(ExperimentError, match=message):
            load_experiment(write_experiment(tmp_path, body))
    spec = load_experiment(write_experiment(tmp_path, MINIMAL))
    assert [arm.name for arm in spec.arms] == ["a", "b"] and spec.baseline == ""
    assert spec.arm("b").config(0).design.memory is False
    assert spec.placement.kind == "in-turn" and spec.placement.describe() == "arms one after another"
    on_ray = load_experiment(write_experiment(tmp_path, MINIMAL.replace("[experiment]", RAY_PLACEMENT)))
    placement = on_ray.placement
    assert (placement.kind, placement.arm_cpus, placement.ray_address) == ("ray", 1, "auto")
    assert on_ray.resolved() == spec.resolved()  # where the arms run does not change their results


def test_a_folder_holding_another_experiment_is_refused(tmp_path):
    folder = tmp_path / "out"
    (folder / "experiment.json").parent.mkdir()
    other = load_experiment(write_experiment(tmp_path, MINIMAL.replace("iterations = 1", "iterations = 2")))
    (folder / "experiment.json").write_text(json.dumps(other.resolved()))
    with pytest.raises(
        ExperimentError, match=r"holds a different experiment \(it differs in arms.a.0.loop.iterations"
    ):
        run_experiment(load_experiment(write_experiment(tmp_path, MINIMAL)), folder)
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(ExperimentError, match="is not empty and holds no experiment"):
        run_experiment(load_experiment(write_experiment(tmp_path, MINIMAL)), stray)


def test_a_folder_of_an_earlier_release_is_the_same_experiment(tmp_path, caplog):
    """Keys added since (at their defaults) and keys renamed since do not make an experiment another one;
    a changed value still does."""
    from spade_rl.experiment import runner

    spec = load_experiment(write_experiment(tmp_path, MINIMAL))
    older = json.loads(json.dumps(spec.resolved()))
    for seed in older["arms"]["a"].values():
        del seed["rewards"]["progress_bonus"]  # a key this release added
        seed["archive"]["band_low"] = seed["archive"].pop("frontier_low")  # a key renamed since
    del older["eval"]["samples"]
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "experiment.json").write_text(json.dumps(older))
    with caplog.at_level("WARNING"):
        runner._claim(folder, spec)
    assert "rewards.progress_bonus" in caplog.text and "eval.samples" in caplog.text
    assert json.loads((folder / "experiment.json").read_text()) == older  # the stored file is kept
    older["arms"]["b"]["0"]["loop"]["iterations"] = 7
    (folder / "experiment.json").write_text(json.dumps(older))
    with pytest.raises(ExperimentError, match=r"differs in arms.b.0.loop.iterations"):
        runner._claim(folder, spec)


def test_a_folder_written_before_a_registered_setting_resumes_only_at_its_old_behaviour(tmp_path, caplog):
    """A stored experiment that lacks policy.transformers.batch_tokens ran without a cap (0): resumed with
    a cap it would be another experiment, refused with the override that resumes it; at 0 it resumes, and
    the warning names the other added settings with the values the resumed runs use."""
    from spade_rl.experiment import runner
    from spade_rl.experiment.spec import ADDED_SETTINGS

    assert ADDED_SETTINGS[("policy", "transformers", "batch_tokens")] == 0
    capped = load_experiment(
        write_experiment(
            tmp_path,
            MINIMAL.replace("'tiny-random'", "'tiny-random'\", \"policy.transformers.batch_tokens=4096"),
        )
    )
    older = json.loads(json.dumps(capped.resolved()))
    for seeds in older["arms"].values():
        for config in seeds.values():
            del config["policy"]["transformers"]["batch_tokens"]
            del config["rewards"]["progress_bonus"]
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "experiment.json").write_text(json.dumps(older))
    with pytest.raises(ExperimentError) as refused:
        runner._claim(folder, capped)
    message = str(refused.value)
    assert "before the setting policy.transformers.batch_tokens existed" in message
    assert "gives it 4096" in message and "'policy.transformers.batch_tokens=0'" in message
    assert json.loads((folder / "experiment.json").read_text()) == older  # nothing rewritten
    caplog.clear()
    with caplog.at_level("WARNING"):
        runner._claim(folder, capped, resuming=False)  # --compare runs nothing: a warning
    assert "before the setting policy.transformers.batch_tokens existed" in caplog.text
    for arm in ("a", "b"):  # finished runs are not run again: nothing to refuse
        (folder / "arms" / arm / "seed-0").mkdir(parents=True)
        (folder / "arms" / arm / "seed-0" / "done.json").write_text("{}")
    runner._claim(folder, capped)
    (folder / "arms" / "b" / "seed-0" / "done.json").unlink()
    with pytest.raises(ExperimentError, match="holds arm b, seed 0, written before"):
        runner._claim(folder, capped)
    (folder / "experiment.json").write_text(json.dumps(older))
    caplog.clear()
    uncapped = load_experiment(
        write_experiment(
            tmp_path,
            MINIMAL.replace("'tiny-random'", "'tiny-random'\", \"policy.transformers.batch_tokens=0"),
        )
    )
    with caplog.at_level("WARNING"):
        runner._claim(folder, uncapped)
    bonus = uncapped.resolved()["arms"]["a"]["0"]["rewards"]["progress_bonus"]
    assert f"rewards.progress_bonus = {json.dumps(bonus)}" in caplog.text
    assert "batch_tokens" not in caplog.text  # registered and at its old value: nothing to warn of


def test_example_experiments_load(monkeypatch):
    monkeypatch.chdir(ROOT)  # pool files in the examples are relative to the repository root
    tiny = load_experiment(EXPERIMENTS / "ci-tiny.toml")
    assert [a.name for a in tiny.arms] == ["fixed-pool", "spade"] and tiny.budget.iterations == 2
    cpu = load_experiment(EXPERIMENTS / "cpu-default.toml")
    assert {"fixed-pool", "spade"} <= {a.name for a in cpu.arms} and cpu.baseline == "fixed-pool"
    assert cpu.arm("fixed-pool").config(0).designer.source == "none"
    learning = load_experiment(EXPERIMENTS / "cpu-learning.toml")
    assert [a.name for a in learning.arms] == ["fixed-pool", "spade", "spade-no-designer-training"]
    assert learning.seeds == (0, 1) and learning.baseline == "fixed-pool"
    assert learning.arm("spade-no-designer-training").config(1).designer.train is False
    assert learning.arm("spade").config(0).designer.source == "policy"
    gpu = load_experiment(EXPERIMENTS / "qwen3-gpu.toml")
    names = {a.name for a in gpu.arms}
    assert {
        "fixed-pool",
        "fixed-designer",
        "spade",
        "no-memory",
        "no-grounding",
        "no-designer-training",
    } <= names
    assert gpu.arm("spade").config(0).loop.plays_per_env == 8  # the reference's: spade-paper-games.toml
    assert gpu.arm("no-memory").config(0).design.memory is False
    assert gpu.arm("fixed-designer").config(0).designer.source == "frozen"


def without_bfcl_eval(monkeypatch) -> None:
    """bfcl-eval as if it were not installed (it is where the README's test command ran)."""
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)  # import bfcl_eval: ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "spade_rl.evaluate.bfcl", raising=False)


def test_a_suite_whose_package_is_missing_is_named_and_everything_else_checked(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from spade_rl.cli import app
    from spade_rl.evaluate.base import SUITE_INSTALL

    without_bfcl_eval(monkeypatch)
    monkeypatch.chdir(ROOT)
    gpu = load_experiment(EXPERIMENTS / "qwen3-gpu.toml")  # loads: the file is right, the machine lacks it
    needs = f"suite 'bfcl' needs the package 'bfcl_eval', which is not installed: {SUITE_INSTALL['bfcl']}"
    assert gpu.unavailable == (needs,) and "bfcl-eval==2026.3.23" in needs
    assert "unavailable" not in gpu.resolved()  # the same experiment on a machine that has it
    with pytest.raises(ExperimentError, match=r"the evaluation cannot run here: suite 'bfcl' needs"):
        run_experiment(gpu, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything was written

    done = CliRunner().invoke(app, ["experiment", str(EXPERIMENTS / "qwen3-gpu.toml"), "--check"])
    said = " ".join(done.output.split())
    assert done.exit_code == 0, said
    assert f"every arm's configuration is valid; nothing run (--check) not checked: {needs}" in said

    # Everything else is still checked: another suite's bad option, an arm's bad key.
    both = MINIMAL.replace('suites = ["envs"]', 'suites = ["bfcl", "envs"]')
    assert load_experiment(write_experiment(tmp_path, both)).unavailable == (needs,)
    with pytest.raises(ExperimentError, match=r"eval: .*nope"):
        load_experiment(write_experiment(tmp_path, both + "[eval.options.envs]\nnope = 1\n"))
    with pytest.raises(ExperimentError, match=r"arm 'b' \(seed 0\): unknown key design.memroy"):
        load_experiment(write_experiment(tmp_path, both.replace("design.memory", "design.memroy")))


# --- the comparison's numbers on known results ------------------------------------------------------
def result(correct: list[bool], model: str) -> EvalResult:
    items = [ItemResult(f"q/{i}", c, float(c), "") for i, c in enumerate(correct)]
    suite = SuiteResult("envs", "v1", items)
    return EvalResult(model, "fake", 0, len(items), {"temperature": 0.0}, {"envs": suite})


def test_comparison_tests_paired_differences_and_flags_noise(tmp_path):
    spec = load_experiment(
        write_experiment(tmp_path, MINIMAL.replace("[experiment]", "[experiment]\nbaseline = 'a'"))
    )
    start = tmp_path / "start.json"
    result([True, True] + [False] * 8, "base").write(start)
    records = []
    outcomes = {"a": [True, True, True] + [False] * 7, "b": [True] * 9 + [False]}
    for arm, correct in outcomes.items():
        run_dir = tmp_path / arm
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text(
            json.dumps(
                {"iteration": 1, "agent/win_rate": 0.25, "designer/proposed": 2, "designer/valid_rate": 0.5}
            )
            + "\n"
        )
        result(correct, arm).write(run_dir / "end.json")
        records.append(RunRecord(arm, 0, run_dir, 1, 3.0, "iterations", start, run_dir / "end.json"))
    comparison = build_comparison(spec, records)
    a, b = comparison["suites"]["envs"]["rows"]
    assert comparison["suites"]["envs"]["base"][0]["accuracy"] == pytest.approx(0.2)
    # a: one item more than the base, paired: McNemar p = 1 -> noise.
    assert a["vs_base"]["diff"] == pytest.approx(0.1) and a["vs_base"]["flag"] == "noise"
    assert a["vs_base"]["p_value"] == pytest.approx(1.0) and a["vs_baseline"] is None
    # b: 7 items right that the base got wrong, none the other way: p = 2 / 2^7 -> better.
    assert b["vs_base"]["diff"] == pytest.approx(0.7) and b["vs_base"]["p_value"] == pytest.approx(2 / 2**7)
    assert b["vs_base"]["flag"] == "better"
    assert b["vs_baseline"]["diff"] == pytest.approx(0.6) and b["vs_baseline"]["p_value"] == pytest.approx(
        2 / 2**6
    )
    assert b["ci"] == pytest.approx([0.596, 0.982], abs=1e-3)  # Wilson, 9 of 10
    assert (
        comparison["training"][0]["designs_valid"] == 1 and comparison["training"][0]["designs_proposed"] == 2
    )
    markdown = to_markdown(comparison)
    assert (
        "| b | 0 | 90.0 | [59.6, 98.2] | 10 | +70.0 (p 0.016, better) | +60.0 (p 0.031, better) |" in markdown
    )
    assert "| a | 0 | 30.0 | [10.8, 60.3] | 10 | +10.0 (p 1, noise) |  |" in markdown
    assert "| base model | - | 20.0 |" in markdown


RAY_PLACEMENT = "[experiment]\nplacement = 'ray'\narm_cpus = 1"


@pytest.mark.slow
def test_wall_time_budget_stops_each_arm_and_checkpoints_it(tmp_path):
    body = MINIMAL.replace("iterations = 1", "wall_time_s = 0.001\nmax_iterations = 5").replace(
        "overrides = [\"policy.model='tiny-random'\"]",
        "overrides = [\"policy.model='tiny-random'\", 'loop.checkpoint_every=4', 'rollout.max_turns=2',"
        " 'rollout.max_new_tokens=8', 'design.max_new_tokens=32', \"pool.reference=['arithmetic']\"]",
    )
    body = body.replace(
        'suites = ["envs"]',
        'suites = ["envs"]\nlimit = 1\nmax_new_tokens = 8\n'
        "options = {envs = {envs = ['arithmetic'], max_turns = 1}}",
    )
    spec = load_experiment(write_experiment(tmp_path, body))
    outcome = run_experiment(spec, tmp_path / "out")
    for record in outcome.records:
        assert (record.iterations, record.stopped_by) == (1, "wall_time")
        assert (record.run_dir / "checkpoints" / "iter-0001" / "state.json").exists()  # though every=4
    assert outcome.figure is not None and outcome.figure.exists()
    assert "1 (wall_time)" in outcome.comparison_md.read_text()


def test_the_start_evaluated_on_its_own_is_the_warmed_up_model(tmp_path, monkeypatch):
    """An arm that trained before its start was evaluated gets the start evaluated apart: the model the
    run starts from, which is the base model after the designer's warm-up, not the bare base model."""
    import contextlib

    from spade_rl.experiment import arm_run

    calls = []

    class Policy:
        def close(self):
            calls.append("close")

    monkeypatch.setattr("spade_rl.policy.make_policy", lambda config: calls.append("make") or Policy())
    monkeypatch.setattr(
        "spade_rl.designer.warmup.warm_up",
        lambda policy, *args: calls.append(("warm_up", type(policy).__name__)),
    )
    monkeypatch.setattr(
        "spade_rl.loop.run.evaluate_policy", lambda *args: calls.append("evaluate") or "result"
    )
    monkeypatch.setattr("spade_rl.sandbox.Sandbox", lambda config: contextlib.nullcontext("sandbox"))
    spec = load_experiment(write_experiment(tmp_path, MINIMAL))
    assert arm_run.evaluate_start(spec.arms[0].config(0), spec) == "result"
    assert calls == ["make", ("warm_up", "Policy"), "evaluate", "close"]


@pytest.mark.slow
def test_an_experiment_grows_by_seeds_and_arms_and_compares_what_has_finished(tmp_path):
    """Seeds and arms added between sittings: the runs already there must be the same; the stored
    experiment grows; --compare writes the comparison of the finished runs alone, running nothing."""
    from spade_rl.experiment import compare_finished, runner
    from spade_rl.experiment.spec import start_key

    folder = tmp_path / "out"
    first = load_experiment(
        write_experiment(tmp_path, MINIMAL.replace("[experiment]", "[experiment]\nname = 'g'\nseeds = [0]"))
    )
    runner._claim(folder, first)
    grown_body = MINIMAL.replace("[experiment]", "[experiment]\nname = 'g'\nseeds = [0, 1]") + "[arms.c]\n"
    grown = load_experiment(write_experiment(tmp_path, grown_body, "grown.toml"))
    runner._claim(folder, grown)
    stored = json.loads((folder / "experiment.json").read_text())
    assert stored["seeds"] == [0, 1] and sorted(stored["arms"]) == ["a", "b", "c"]
    assert sorted(stored["arms"]["a"]) == ["0", "1"]
    runner._claim(folder, first)  # the first file again: a part of what is stored, still the same
    changed = MINIMAL.replace("[experiment]", "[experiment]\nname = 'g'\nseeds = [0, 1]").replace(
        'overrides = ["design.memory=false"]', 'overrides = ["design.grounding=false"]'
    )
    with pytest.raises(ExperimentError, match=r"differs in arms.b.0.design.grounding"):
        runner._claim(folder, load_experiment(write_experiment(tmp_path, changed, "changed.toml")))

    with pytest.raises(ExperimentError, match=r"no run of g has finished"):
        compare_finished(grown, folder)
    # Two runs finished (a/0, b/0), one interrupted (a/1: no done.json), the rest never started.
    config = grown.arm("a").config(0, grown.evaluation)
    start = folder / "start" / f"{start_key(config, grown.evaluation)}.json"
    start.parent.mkdir(parents=True)
    result([True] + [False] * 9, "base").write(start)
    for arm, seed, done in (("a", 0, True), ("b", 0, True), ("a", 1, False)):
        run_dir = folder / "arms" / arm / f"seed-{seed}"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "agent/win_rate": 0.5}) + "\n")
        result([True] * 4 + [False] * 6, arm).write(run_dir / "end-eval.json")
        if done:
            done_data = {"iterations": 1, "train_seconds": 2.0, "stopped_by": "iterations"}
            (run_dir / "done.json").write_text(json.dumps(done_data))
    outcome = compare_finished(grown, folder)
    rows = outcome.comparison["suites"]["envs"]["rows"]
    assert [(r["arm"], r["seed"]) for r in rows] == [("a", 0), ("b", 0)]
    assert outcome.comparison_md.exists() and (folder / "comparison.json").exists()
    done = cli("experiment", str(tmp_path / "grown.toml"), "--out", str(folder), "--compare")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "comparison:" in done.stdout and not (folder / "arms" / "c").exists()  # nothing was run


def test_the_start_key_keeps_its_name_for_a_setting_added_at_its_old_behaviour(tmp_path):
    """A start evaluation written before transformers.batch_tokens existed keeps its file name: the key of
    the same policy without the setting, with it at 0 (no cap, as before) and with it set to a cap."""
    import dataclasses

    from spade_rl.configdata import to_data
    from spade_rl.experiment.spec import start_key, start_key_of_data
    from spade_rl.policy import TransformersConfig

    spec = load_experiment(write_experiment(tmp_path, MINIMAL))
    config = spec.arm("a").config(0, spec.evaluation)
    config = dataclasses.replace(
        config, policy=dataclasses.replace(config.policy, transformers=TransformersConfig(batch_tokens=0))
    )
    policy, evaluation = to_data(config.policy), to_data(spec.evaluation)
    without = {k: v for k, v in policy["transformers"].items() if k != "batch_tokens"}
    older = {**policy, "transformers": without}
    assert start_key(config, spec.evaluation) == start_key_of_data(older, evaluation)
    capped = {**policy, "transformers": {**policy["transformers"], "batch_tokens": 4096}}
    assert start_key_of_data(capped, evaluation) != start_key_of_data(older, evaluation)
    assert policy["transformers"]["batch_tokens"] == 0  # the caller's data is left as it was


def test_runs_go_seed_by_seed_and_the_records_come_back_in_the_file_s_order(tmp_path, monkeypatch):
    """Every arm at seed 0 before any arm at seed 1: a sitting that ends part way leaves paired runs of
    all arms; the comparison (after each run and at the end) still lists arm by arm, seeds in order."""
    from spade_rl.experiment import runner

    body = MINIMAL.replace("[experiment]", "[experiment]\nname = 'o'\nseeds = [0, 1]")
    experiment = load_experiment(write_experiment(tmp_path, body))
    ran, written = [], []

    def fake_run_arm(experiment, arm, seed, folder, say):
        ran.append((arm.name, seed))
        return RunRecord(arm.name, seed, folder, 1, 1.0, "iterations", folder, folder)

    monkeypatch.setattr(runner, "run_arm", fake_run_arm)

    def fake_write_outcome(experiment, folder, records, say):
        written.append([(r.arm, r.seed) for r in records])

    monkeypatch.setattr(runner, "_write_outcome", fake_write_outcome)
    runner.run_experiment(experiment, tmp_path / "out")
    assert ran == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert written[0] == [("a", 0)] and written[1] == [("a", 0), ("b", 0)]
    assert written[2] == [("a", 0), ("a", 1), ("b", 0)]
    assert written[-1] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_the_curriculum_table_pools_the_new_designs_of_each_third(tmp_path):
    """Band fraction and new-design win rate of a third are over all its new designs together (weighted by
    how many were played), not a mean of per-iteration fractions; a run without such metrics (the fixed
    pool) shows dashes, and a comparison where no run has them shows no curriculum table at all."""
    spec = load_experiment(write_experiment(tmp_path, MINIMAL))
    start = tmp_path / "start.json"
    result([True] + [False] * 9, "base").write(start)
    lines = {
        "a": [{"iteration": i, "agent/win_rate": 0.2, "format/illegal": 0.5} for i in range(1, 4)],
        "b": [
            # first third: 1 design in band of 1, then 0 of 3 -> 1/4 pooled (a mean of fractions: 0.5)
            {
                "iteration": 1,
                "designer/new_played": 1,
                "designer/band_fraction": 1.0,
                "designer/new_win_rate": 0.5,
            },
            {
                "iteration": 2,
                "designer/new_played": 3,
                "designer/band_fraction": 0.0,
                "designer/new_win_rate": 0.0,
            },
            {"iteration": 3, "designer/new_played": 0, "designer/band_fraction": None},
            {
                "iteration": 4,
                "designer/new_played": 2,
                "designer/band_fraction": 0.5,
                "designer/new_win_rate": 0.25,
            },
            {
                "iteration": 5,
                "designer/new_played": 2,
                "designer/band_fraction": 1.0,
                "designer/new_win_rate": 0.5,
            },
            {
                "iteration": 6,
                "designer/new_played": 2,
                "designer/band_fraction": 0.5,
                "pool/retired_total": 3,
            },
        ],
    }
    records = []
    for arm, metrics in lines.items():
        run_dir = tmp_path / arm
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
        result([True] * 2 + [False] * 8, arm).write(run_dir / "end.json")
        records.append(
            RunRecord(arm, 0, run_dir, len(metrics), 3.0, "iterations", start, run_dir / "end.json")
        )
    comparison = build_comparison(spec, records)
    a, b = (t["curriculum"] for t in comparison["training"])
    assert a["designer/band_fraction"] == {"first": None, "last": None} and a["new_played"] is None
    assert a["format/illegal"] == {"first": 0.5, "last": 0.5}
    assert b["designer/band_fraction"]["first"] == pytest.approx(0.25)
    assert b["designer/band_fraction"]["last"] == pytest.approx(3 / 4)  # iterations 5-6: 2 + 1 of 4
    assert b["designer/new_win_rate"]["first"] == pytest.approx(0.125)
    assert b["designer/new_win_rate"]["last"] == pytest.approx(0.5)  # iteration 6 has no win rate
    assert (b["new_played"], b["new_in_band"], b["retired_total"]) == (10, 5, 3)
    markdown = to_markdown(comparison)
    assert "## Curriculum" in markdown
    assert "| b | 0 | 10 (5) | 0.25 → 0.75 | 0.12 → 0.50 | - → - | - → - | - → - | 3 |" in markdown
    assert "| a | 0 | - (-) | - → - | - → - | - → - | 0.50 → 0.50 | - → - | - |" in markdown
    for record in records:  # no curriculum metric in any run: no table
        (record.run_dir / "metrics.jsonl").write_text(
            json.dumps({"iteration": 1, "agent/win_rate": 0.2}) + "\n"
        )
    assert "## Curriculum" not in to_markdown(build_comparison(spec, records))
