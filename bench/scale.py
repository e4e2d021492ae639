"""Benchmark of the executors: validation and rollout stepping, local against Ray with 1 and 2 actors.

    python bench/scale.py [--validations 14] [--episodes 32] [--turns 8] [--batches 200] [--json]

Starts a Ray cluster on this machine's loopback (a head and two worker nodes of one CPU each) and
measures three executors in turn: ``local`` (one sandbox pool in this process tree), ``ray-1`` and
``ray-2`` (one sandbox pool in each of 1 or 2 Ray actors, one per worker node). For each:

- **validation**: the battery on ``--validations`` distinct sources (the reference environments,
  made distinct by a comment, as new designs are), in one ``validate_many``: validations per second;
- **stepping**: ``--episodes`` episodes of the reference environments opened, reset and stepped
  ``--turns`` times with scripted actions in batches (one ``call_many`` per turn for every live
  episode, as the rollout does; no model, so generation is not what is measured): steps per second;
- **rollouts**: the same episodes through ``run_episodes`` with a scripted policy (the loop's own
  path, with the driver's token bookkeeping): episodes per second;
- **fixed overhead per batch**: the median time of a batch of one trivial step, and of a batch of
  one trivial step per episode; Ray's overhead is its time minus the local one.

Prints every figure and the ratios against local. This machine has two cores: Ray's actors here add
processes, not cores, and the figures say what the indirection costs; on a cluster each actor brings
its node's cores, and the overhead per batch says how much work a batch needs to hide it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from spade_rl.design import ValidationSettings
from spade_rl.envs import reference
from spade_rl.executor import ExecutorConfig, LocalExecutor
from spade_rl.executor.ray_executor import RayExecutor
from spade_rl.policy import FakePolicy, default_tokenizer
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import SandboxConfig
from spade_rl.testing.loopback_cluster import LoopbackCluster

TRIVIAL = """
class TrivialEnv:
    def __init__(self, max_turns=1000000):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "start", {}

    def step(self, action):
        return "ok", 0.0, False, False, {}

    def solution(self):
        return ["go"]
"""
ACTIONS = ("\\boxed{50}", "\\boxed{up}", "\\boxed{1 2}", "<answer>7</answer>", "\\boxed{left}")


def validation(executor, count: int) -> dict:
    names = [reference.NAMES[i % len(reference.NAMES)] for i in range(count)]
    requests = [(f"{reference.source(name)}\n# variant {i}\n", "") for i, name in enumerate(names)]
    started = time.perf_counter()
    reports = executor.validate_many(requests, ValidationSettings())
    wall = time.perf_counter() - started
    return {"validations": count, "valid": sum(r.valid for r in reports), "validation_s": wall}


def stepping(executor, specs: list[EpisodeSpec], turns: int) -> dict:
    started = time.perf_counter()
    opened = executor.open_many([(s.source, s.env_kwargs) for s in specs])
    pairs = [(r.value, s) for r, s in zip(opened, specs, strict=True) if r.ok]
    handles = [h for h, _ in pairs]
    resets = executor.call_many([(h, "reset", {"seed": s.seed}) for h, s in pairs])
    live = [h for h, r in zip(handles, resets, strict=True) if r.ok]
    steps = 0
    for turn in range(turns):
        answers = executor.call_many([(h, "step", {"action": ACTIONS[turn % len(ACTIONS)]}) for h in live])
        steps += len(live)
        live = [h for h, a in zip(live, answers, strict=True) if a.ok and not (a.value[2] or a.value[3])]
    for handle in handles:
        handle.close()
    return {"steps": steps, "stepping_s": time.perf_counter() - started, "opened": len(handles)}


def rollouts(executor, specs: list[EpisodeSpec], turns: int, tokenizer) -> dict:
    policy = FakePolicy(lambda chat: ACTIONS[len(chat) % len(ACTIONS)], tokenizer=tokenizer)
    started = time.perf_counter()
    episodes = run_episodes(policy, executor, specs, RolloutConfig(max_turns=turns, max_new_tokens=16))
    return {
        "episodes": len(episodes),
        "rollout_s": time.perf_counter() - started,
        "env_errors": sum(e.stop_reason == "env_error" for e in episodes),
    }


def overhead(executor, episodes: int, batches: int) -> dict:
    opened = executor.open_many([(TRIVIAL, None)] * episodes)
    handles = [r.value for r in opened]
    executor.call_many([(h, "reset", {}) for h in handles])
    one, many = [], []
    for _ in range(batches):
        started = time.perf_counter()
        executor.call_many([(handles[0], "step", {"action": "x"})])
        one.append(time.perf_counter() - started)
        started = time.perf_counter()
        executor.call_many([(h, "step", {"action": "x"}) for h in handles])
        many.append(time.perf_counter() - started)
    for handle in handles:
        handle.close()
    return {"one_call_ms": statistics.median(one) * 1e3, "batch_ms": statistics.median(many) * 1e3}


def measure(executor, args, specs, tokenizer) -> dict:
    validation(executor, 2)  # warm up: workers started, code paths loaded
    result = validation(executor, args.validations)
    result |= stepping(executor, specs, args.turns)
    result |= rollouts(executor, specs, args.turns, tokenizer)
    result |= overhead(executor, args.episodes, args.batches)
    result["validations_per_s"] = result["validations"] / result["validation_s"]
    result["steps_per_s"] = result["steps"] / result["stepping_s"]
    result["episodes_per_s"] = result["episodes"] / result["rollout_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validations", type=int, default=14)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--batches", type=int, default=200, help="batches timed for the overhead")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    sandbox = SandboxConfig(pool_size=2)
    tokenizer = default_tokenizer()
    names = [reference.NAMES[i % len(reference.NAMES)] for i in range(args.episodes)]
    specs = [
        EpisodeSpec(reference.source(name), seed=i, setting=reference.SETTINGS[name])
        for i, name in enumerate(names)
    ]
    results: dict[str, dict] = {}
    with LocalExecutor(sandbox) as local:
        results["local"] = measure(local, args, specs, tokenizer)
    started = time.perf_counter()
    with LoopbackCluster(workers=2, cpus_per_node=1, object_store_mb=80):
        cluster_s = time.perf_counter() - started
        for actors in (1, 2):
            started = time.perf_counter()
            with RayExecutor(ExecutorConfig(kind="ray", num_actors=actors), sandbox) as executor:
                start_s = time.perf_counter() - started
                results[f"ray-{actors}"] = measure(executor, args, specs, tokenizer) | {"start_s": start_s}
                assert executor.stats["actors_lost"] == 0
    base = results["local"]
    summary = {
        "cluster_start_s": cluster_s,
        "results": results,
        "ratios_vs_local": {
            name: {
                key: row[key] / base[key] for key in ("validations_per_s", "steps_per_s", "episodes_per_s")
            }
            for name, row in results.items()
            if name != "local"
        },
        "ray_overhead_ms": {
            name: {
                "one_call": row["one_call_ms"] - base["one_call_ms"],
                f"{args.episodes}_calls": row["batch_ms"] - base["batch_ms"],
            }
            for name, row in results.items()
            if name != "local"
        },
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"loopback cluster (head + 2 worker nodes) started in {cluster_s:.1f} s")
    print(
        f"{'executor':<10}{'valid/s':>9}{'steps/s':>10}{'episodes/s':>12}"
        f"{'1-call ms':>11}{f'{args.episodes}-call ms':>13}{'start s':>9}"
    )
    for name, row in results.items():
        print(
            f"{name:<10}{row['validations_per_s']:>9.2f}{row['steps_per_s']:>10.0f}{row['episodes_per_s']:>12.2f}"
            f"{row['one_call_ms']:>11.3f}{row['batch_ms']:>13.3f}{row.get('start_s', 0.0):>9.1f}"
        )
    for name, ratios in summary["ratios_vs_local"].items():
        over = summary["ray_overhead_ms"][name]
        print(
            f"{name} / local: validation {ratios['validations_per_s']:.2f}x, stepping "
            f"{ratios['steps_per_s']:.2f}x, rollouts {ratios['episodes_per_s']:.2f}x; fixed overhead per "
            f"batch +{over['one_call']:.2f} ms (1 call), +{over[f'{args.episodes}_calls']:.2f} ms "
            f"({args.episodes} calls)"
        )


if __name__ == "__main__":
    main()
