"""bench/iteration.py runs against the loop as it is: its phase timers find what they wrap (a renamed hook
made the whole bench raise before), and its generation comparison gives both sides the same work.

The tiny random model stands in for the default one: the figures mean nothing here, only that every phase
is timed and every number is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import load_script

BENCH = Path(__file__).resolve().parents[1] / "bench" / "iteration.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH, "bench_iteration")


@pytest.mark.slow
def test_one_iteration_times_every_phase(bench, tiny_dir: Path) -> None:
    overrides = [
        f"policy.model='{tiny_dir}'",
        "warmup.designs=0",
        "loop.designs_per_iteration=4",
        "design.max_new_tokens=16",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=4",
        "loop.drop_zero_signal_groups=false",  # the random model's groups still update
    ]
    result = bench.one_iteration(None, overrides)
    phases = result["phases_s"]
    assert phases["design: generation"] > 0 and phases["play: generation"] > 0
    assert phases["update"] > 0 and phases["checkpoint"] > 0  # the checkpoint is found and timed
    assert result["updated"] and result["update_rows"] > 0 and result["update_tokens"] > 0
    assert result["generation_tokens"]["play/rows"] > 0 and result["designs"] == 4
    assert result["iteration_s"] >= sum(v for k, v in phases.items() if k != "transcripts and metrics") * 0.99


@pytest.mark.slow
def test_generation_gives_both_sides_the_same_work(bench, tiny_dir: Path) -> None:
    result = bench.generation([1, 3], 5, None, [f"policy.model='{tiny_dir}'"])
    assert [r["batch"] for r in result["rows"]] == [1, 3]
    for row in result["rows"]:
        assert row["ours_tokens"] == row["library_tokens"] == row["batch"] * 5
        assert row["ours_tok_s"] > 0 and row["library_tok_s"] > 0
    assert result["ceiling_tok_s"] > 0
