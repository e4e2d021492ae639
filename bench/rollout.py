"""Benchmark of rollouts with the default model on CPU: batched turns against one episode at a time.

    python bench/rollout.py [--envs 8] [--episodes 4] [--sequential 8] [--max-turns 4] [--max-new-tokens 32]

Plays ``envs x episodes`` episodes of the reference environments as ``spade_rl.rollout`` does (one
batched generation per turn for every live episode, then one batched sandbox step), and the first
``sequential`` of the same episodes one at a time, in the same run. Prints episodes per minute and
generated tokens per second for both, their ratio, and the share of wall time spent outside
generation (sandbox, parsing, bookkeeping) in the batched run.
"""

from __future__ import annotations

import argparse
import json
import time

from spade_rl.envs import reference
from spade_rl.policy import PolicyConfig, make_policy
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import Sandbox, SandboxConfig


class TimedPolicy:
    """Wraps a policy and adds up the wall time of its generation calls."""

    def __init__(self, policy):
        self.policy = policy
        self.seconds = 0.0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def generate_tokens(self, prompts, settings, *, budgets=None):
        start = time.perf_counter()
        try:
            return self.policy.generate_tokens(prompts, settings, budgets=budgets)
        finally:
            self.seconds += time.perf_counter() - start


def measure(
    policy: TimedPolicy, pool: Sandbox, specs: list[EpisodeSpec], config: RolloutConfig, batched: bool
):
    policy.seconds = 0.0
    start = time.perf_counter()
    if batched:
        episodes = run_episodes(policy, pool, specs, config, seed=0)
    else:
        episodes = [run_episodes(policy, pool, [spec], config, seed=0)[0] for spec in specs]
    wall = time.perf_counter() - start
    tokens = sum(sum(e.mask) for e in episodes)
    return {
        "episodes": len(episodes),
        "wall_s": wall,
        "generate_s": policy.seconds,
        "episodes_per_min": len(episodes) / wall * 60,
        "tokens_per_s": tokens / wall,
        "outside_generation": 1 - policy.seconds / wall,
        "turns": sum(len(e.turns) for e in episodes),
        "wins": sum(e.won for e in episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--sequential", type=int, default=8, help="episodes played one at a time")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    names = [reference.NAMES[i % len(reference.NAMES)] for i in range(args.envs)]
    specs = [
        EpisodeSpec(reference.source(name), seed=env * 100 + k, setting=reference.SETTINGS[name])
        for k in range(args.episodes)
        for env, name in enumerate(names)
    ]
    config = RolloutConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens)
    policy = TimedPolicy(make_policy(PolicyConfig(seed=0)))
    with Sandbox(SandboxConfig(pool_size=2)) as pool:
        run_episodes(policy, pool, specs[:2], RolloutConfig(max_turns=1, max_new_tokens=4))  # warm up
        batched = measure(policy, pool, specs, config, batched=True)
        sequential = measure(policy, pool, specs[: args.sequential], config, batched=False)
    result = {
        "batched": batched,
        "sequential": sequential,
        "speedup_episodes": batched["episodes_per_min"] / sequential["episodes_per_min"],
        "speedup_tokens": batched["tokens_per_s"] / sequential["tokens_per_s"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'':<24}{'episodes':>9}{'wall s':>9}{'eps/min':>9}{'tok/s':>8}{'outside gen':>13}")
    for label, row in (("batched", batched), ("one at a time", sequential)):
        print(
            f"{label:<24}{row['episodes']:>9}{row['wall_s']:>9.1f}{row['episodes_per_min']:>9.1f}"
            f"{row['tokens_per_s']:>8.1f}{row['outside_generation']:>12.1%}"
        )
    print(
        f"batched / one at a time: {result['speedup_episodes']:.2f}x episodes per minute, "
        f"{result['speedup_tokens']:.2f}x tokens per second"
    )


if __name__ == "__main__":
    main()
