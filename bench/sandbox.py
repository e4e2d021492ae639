"""Benchmark of the sandbox: a persistent hardened pool against two baselines, measured in one run.

    python bench/sandbox.py [--seconds 3] [--json]

Measures, for a trivial environment:
- per-call latency of ``step`` through the pool (median and p90, microseconds) and calls per second;
- episodes per second for 1-step and 20-step episodes (open, reset, steps, close) with
  1. the pool (persistent workers, all default layers),
  2. a fresh sandboxed process per episode (the same hardened worker, recycled after every episode),
  3. plain in-process ``exec`` (the reference implementation's way: no isolation at all);
and prints the ratios. Figures depend on the machine and its load; compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from spade_rl.envs import load_env_class
from spade_rl.sandbox import Sandbox, SandboxConfig

TRIVIAL = """
class TrivialEnv:
    def __init__(self, max_turns=20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "start", {}

    def step(self, action):
        self.turn += 1
        done = self.turn >= self.max_turns
        return "ok", 1.0 if done else 0.0, done, False, {}

    def solution(self):
        return ["go"] * self.max_turns
"""


def per_call(pool: Sandbox, seconds: float) -> dict:
    env = pool.open(TRIVIAL, kwargs={"max_turns": 10**9}).value
    env.reset(0)
    for _ in range(200):  # warm up
        env.step("go")
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        env.step("go")
        samples.append(time.perf_counter() - t)
    env.close()
    samples.sort()
    return {
        "median_us": statistics.median(samples) * 1e6,
        "p90_us": samples[int(len(samples) * 0.9)] * 1e6,
        "calls_per_s": len(samples) / sum(samples),
    }


def pool_episodes(pool: Sandbox, turns: int, seconds: float, min_episodes: int = 3) -> float:
    done = 0
    start = time.perf_counter()
    while done < min_episodes or time.perf_counter() - start < seconds:
        env = pool.open(TRIVIAL, kwargs={"max_turns": turns}).value
        env.reset(done)
        for _ in range(turns):
            env.step("go")
        env.close()
        done += 1
    return done / (time.perf_counter() - start)


def exec_episodes(turns: int, seconds: float) -> float:
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        env = load_env_class(TRIVIAL)(max_turns=turns)  # exec of the source each episode, no isolation
        env.reset(done)
        for _ in range(turns):
            env.step("go")
        done += 1
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    results: dict = {}
    with Sandbox(SandboxConfig(pool_size=1)) as pool:
        results["layers"] = {r["name"]: r["active"] or r["not_needed"] for r in pool.layer_reports()}
        results["call"] = per_call(pool, args.seconds)
        for turns in (1, 20):
            results[f"pool_eps_{turns}"] = pool_episodes(pool, turns, args.seconds)
    with Sandbox(SandboxConfig(pool_size=1, episodes_per_worker=1)) as fresh:
        for turns in (1, 20):
            results[f"fresh_eps_{turns}"] = pool_episodes(fresh, turns, args.seconds)
    for turns in (1, 20):
        results[f"exec_eps_{turns}"] = exec_episodes(turns, args.seconds)
    for turns in (1, 20):
        results[f"pool_vs_fresh_{turns}"] = results[f"pool_eps_{turns}"] / results[f"fresh_eps_{turns}"]
        results[f"exec_vs_pool_{turns}"] = results[f"exec_eps_{turns}"] / results[f"pool_eps_{turns}"]

    if args.json:
        print(json.dumps(results, indent=2))
        return
    call = results["call"]
    print(f"layers active: {', '.join(n for n, on in results['layers'].items() if on)}")
    print(f"trivial step through the pool: median {call['median_us']:.1f} us, p90 {call['p90_us']:.1f} us, "
          f"{call['calls_per_s']:.0f} calls/s")  # fmt: skip
    print(f"{'episodes/s':<28}{'1 step':>12}{'20 steps':>12}")
    for label, key in (
        ("pool (persistent)", "pool"),
        ("fresh process/episode", "fresh"),
        ("in-process exec", "exec"),
    ):
        print(f"{label:<28}{results[f'{key}_eps_1']:>12.1f}{results[f'{key}_eps_20']:>12.1f}")
    for label, key in (
        ("pool / fresh process", "pool_vs_fresh"),
        ("exec / pool (isolation cost)", "exec_vs_pool"),
    ):
        print(f"{label:<28}{results[key + '_1']:>11.1f}x{results[key + '_20']:>11.1f}x")


if __name__ == "__main__":
    main()
