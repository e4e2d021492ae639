"""bench/gpu_check.py, the GPU check, cannot rot between GPU loans: its --cpu-rehearsal runs every section
(our generation against HF generate, the sampler-vs-learner log-prob gap, one Learner step, one
``spade-rl run`` iteration) on the CPU with a tiny Qwen3-style model, through bench/gpu_check.sh as a GPU
machine runs it. And its judgements are not vacuous: a learner that scores at another temperature than the
sampler's fails the gap check.

Figures mean nothing here (a tiny random model on a shared CPU); only that each section runs and judges."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "gpu_check.py"
SECTIONS = (
    "model",
    "generation batch 1",
    "generation batch 4",
    "generation batch 8",
    "log-prob gap: mean |d|",
    "log-prob gap: ratio outside clip",
    "update: weights changed",
    "update: seconds",
    "update: peak GPU memory",
    "update: bf16 weights at lr 1e-6",
    "run: one iteration",
    "run: phase seconds",
    "run: peak GPU memory per phase",
)


@pytest.fixture(scope="module")
def gpu_check():
    return load_script(BENCH, "bench_gpu_check")


def rows(output: str) -> dict[str, str]:
    """Each printed check's status by name (the lines before the summary)."""
    found = {}
    for line in output.split("\n=== ")[0].splitlines():
        for name in SECTIONS:
            if line.startswith(name + " ") and name not in found:
                found[name] = line[34:].split()[0]
    return found


@pytest.mark.slow
def test_cpu_rehearsal_runs_every_section_and_passes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-rehearsal", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    output = done.stdout
    assert done.returncode == 0, output + done.stderr[-3000:]
    status = rows(output)
    assert set(status) == set(SECTIONS), f"missing: {set(SECTIONS) - set(status)}\n{output}"
    assert "FAIL" not in status.values()
    # Judged on the CPU too: the gap (float32 on both sides), the weights changed, the bf16 refusal, the run.
    for name in ("log-prob gap: mean |d|", "update: weights changed", "update: bf16 weights at lr 1e-6"):
        assert status[name] == "ok", output
    assert status["run: one iteration"] == status["run: phase seconds"] == "ok"
    # GPU-only thresholds: reported, not judged.
    assert "rehearsal: not judged" in output and status["generation batch 8"] == "info"
    assert "passed: " in output and (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.slow
def test_the_gap_check_fails_a_learner_that_scores_otherwise(gpu_check, tmp_path: Path, monkeypatch) -> None:
    args = argparse.Namespace(cpu_rehearsal=True, model="random-qwen3", tokenizer=None)
    report = gpu_check.Report(rehearsal=True)
    budget = gpu_check.Budget(300, report)
    try:
        setup = gpu_check.Setup(args, report, budget, "cpu", tmp_path, [1, 4], 8)
        gpu_check.build_model(setup)
        gpu_check.check_generation(setup)
        # The learner scores at temperature 1.0, the samples were drawn at 0.6: every ratio is off.
        make_learner = gpu_check.make_learner

        def other_temperature(setup, rows):
            learner = make_learner(setup, rows)
            learner.config = dataclasses.replace(learner.config, temperature=1.0)
            return learner

        monkeypatch.setattr(gpu_check, "make_learner", other_temperature)
        gpu_check.check_logprob_gap(setup)
    finally:
        budget.stop()
    status = {name: s for name, s, _, _ in report.rows}
    assert status["log-prob gap: mean |d|"] == "FAIL", report.rows
    assert report.summary(0.0) == 1


def test_no_gpu_and_no_rehearsal_exits_2(gpu_check, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the check would run")
    assert gpu_check.main([]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


def test_what_would_not_fit_the_budget_is_not_started_and_fails(gpu_check, tmp_path: Path, capsys) -> None:
    assert gpu_check.main(["--cpu-rehearsal", "--budget-s", "1", "--out", str(tmp_path)]) == 1
    output = capsys.readouterr().out
    assert "model                              FAIL  not run:" in output and "FAILED: 0 ok" in output
