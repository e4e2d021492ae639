"""bench/serve_load.py runs against the server as it is: tiny loads on a real ``spade-rl envs serve``, every
figure there, the baseline playing the same episodes, and no server process left after its stop."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("requests")

from scripts import load_script

BENCH = Path(__file__).resolve().parents[1] / "bench" / "serve_load.py"


@pytest.mark.slow
def test_the_load_benchmark_measures_both_loads_and_the_baseline():
    bench = load_script(BENCH, "bench_serve_load")
    moves = bench.solutions()
    direct = bench.direct(6, 2, moves)
    assert direct["won"] == 6 and direct["episodes_per_s"] > 0
    fits = bench.over_http(6, 2, 2, moves, retry_s=0.05, give_up_s=30)
    assert (fits["won"], fits["refused_503"], fits["other_errors"], fits["given_up"]) == (6, 0, 0, 0)
    assert fits["peak_workers"] <= 2 and fits["peak_memory_mib"] > 0
    assert fits["processes_left_after_stop"] == 0
    crowded = bench.over_http(8, 4, 2, moves, retry_s=0.05, give_up_s=30)
    assert crowded["won"] == 8 and crowded["other_errors"] == 0 and crowded["peak_workers"] <= 2
