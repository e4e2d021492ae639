"""Is there a learning signal at the default settings? The agent and the designer, measured.

    python bench/learning_signal.py                               # the defaults of `spade-rl run`
    python bench/learning_signal.py rollout.action_prefix='{}'    # the same, with any run override
    python bench/learning_signal.py --episodes 16 --designs 32 --envs guess,maze --json

For each reference game of the training pool, with the run's configuration (model, rollout settings,
constructor arguments the pool validates them with): ``--episodes`` episodes without the hint and as
many with it, in one batched rollout; the share of agent turns with a parseable action (a closed
``\\boxed{...}`` with content for games, a ``<tool_call>`` or ``<answer>`` for tool use), the win rates
without and with the hint, and the regret (mean return with the hint minus without, floored at 0).
For the designer: ``--designs`` proposals of the run's design phase (grounded in the corpus, the
memory drawn from an archive holding the pool), validated in the sandbox: the valid rate, the reasons,
and how many valid designs copy an archive environment. Prints tables (or ``--json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from spade_rl.archive import Archive
from spade_rl.corpus import Corpus
from spade_rl.designer.phase import design_environments
from spade_rl.designer.warmup import warm_up, warmup_examples
from spade_rl.envs import kits
from spade_rl.executor import make_executor
from spade_rl.loop.config import load_config
from spade_rl.loop.pool import seed_pool
from spade_rl.policy import make_policy
from spade_rl.rewards import regret
from spade_rl.rollout import EpisodeSpec, run_episodes

PARSEABLE = {
    "games": re.compile(r"\\boxed\{[^{}]*\S[^{}]*\}"),
    "tool_use": re.compile(r"<tool_call>.*?</tool_call>|<answer>.*?</answer>", re.S),
}


def parseable(action: str, setting: str) -> bool:
    return PARSEABLE.get(setting, PARSEABLE["games"]).search(action) is not None


def measure_agent(policy, executor, archive, config, names, episodes, seed) -> list[dict]:
    records = [archive.get(i) for i in archive.ids(valid=True, origin="reference", setting="games")]
    records = [r for r in records if not names or r.metadata.get("name") in names]
    rng = random.Random(seed)
    specs = [
        EpisodeSpec(
            r.source,
            seed=rng.randrange(2**31),
            hint=r.hint,
            use_hint=use_hint,
            setting=r.setting,
            env_kwargs=r.env_kwargs,
            tag=(r.env_id, use_hint),
        )
        for r in records
        for use_hint in (False, True)
        for _ in range(episodes)
    ]
    started = time.perf_counter()
    played = run_episodes(policy, executor, specs, config.rollout, seed=seed)
    seconds = time.perf_counter() - started
    rows = []
    for r in records:
        nohint = [e for e in played if e.spec.tag == (r.env_id, False)]
        hint = [e for e in played if e.spec.tag == (r.env_id, True)]
        turns = [t for e in nohint + hint for t in e.turns]
        rows.append(
            {
                "env": r.metadata.get("name", str(r.env_id)),
                "env_kwargs": r.env_kwargs,
                "turns": len(turns),
                "parseable": sum(parseable(t.action, r.setting) for t in turns) / max(1, len(turns)),
                "win": sum(e.won for e in nohint) / len(nohint),
                "win_hint": sum(e.won for e in hint) / len(hint),
                "return": sum(e.return_ for e in nohint) / len(nohint),
                "regret": regret([e.return_ for e in hint], [e.return_ for e in nohint]),
                "errors": sum(e.stop_reason == "env_error" for e in nohint + hint),
                "example": nohint[0].turns[0].action if nohint and nohint[0].turns else "",
            }
        )
    for row in rows:
        row["play_seconds_all_envs"] = seconds
    return rows


def _body(code: str) -> str:
    """A design's code without its class line and closing fence, whitespace collapsed."""
    lines = [line for line in code.replace("```", "").splitlines() if line.strip()]
    return " ".join(" ".join(lines[1:]).split())


def measure_designer(policy, corpus, archive, executor, config, designs, seed) -> dict:
    rng = random.Random(seed)
    design = dataclasses.replace(config.design_phase, n=designs)
    before = {archive.get(i).source_hash for i in archive.ids()}
    started = time.perf_counter()
    outcomes = design_environments(policy, corpus, archive, executor, design, rng, 1)
    seconds = time.perf_counter() - started
    valid = [o for o in outcomes if o.valid]
    copies = sum(o.duplicate and archive.get(o.env_id).source_hash in before for o in valid)
    # A design that is a built-in example or a warm-up design with another class name is a copy too.
    seen = {_body(code) for code in kits.EXAMPLES.values()}
    if config.warmup.enabled:
        seen |= {_body(answer) for _, answer in warmup_examples(config.warmup, design, corpus)}
    near = sum(_body(kits.design_part(archive.get(o.env_id).source) or "") in seen for o in valid)
    return {
        "designs": len(outcomes),
        "valid": len(valid),
        "valid_rate": len(valid) / len(outcomes),
        "copies_of_archive": copies,
        "copies_of_examples": near,
        "distinct_valid": len({archive.get(o.env_id).source_hash for o in valid}),
        "reasons": dict(Counter(o.reason for o in outcomes).most_common()),
        "truncated": sum(o.generation.finish_reason == "length" for o in outcomes),
        "seconds": seconds,
        "example_valid": archive.get(valid[0].env_id).source if valid else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="section.key=value, as for spade-rl run")
    parser.add_argument("--config", type=Path, default=None, help="a run configuration (TOML)")
    parser.add_argument("--episodes", type=int, default=16, help="per environment, without and with hint")
    parser.add_argument("--designs", type=int, default=32)
    parser.add_argument("--envs", default="", help="reference games to play (comma-separated; all games)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = load_config(args.config, args.overrides)
    names = [n for n in args.envs.split(",") if n]
    policy = make_policy(config.policy)
    started = time.perf_counter()
    corpus = Corpus.from_config(config.corpus)
    warmup = warm_up(policy, config.warmup, config.design, corpus)
    result_warmup = {**warmup, "seconds_here": time.perf_counter() - started} if warmup else {}
    executor = make_executor(config.executor, config.sandbox)
    executor.start()
    result: dict = {"overrides": args.overrides, "config": str(args.config or ""), "warmup": result_warmup}
    with tempfile.TemporaryDirectory() as tmp:
        archive = Archive(Path(tmp) / "archive.sqlite", config.archive)
        try:
            seed_pool(archive, executor, config.pool, config.design_phase.validation)
            if args.episodes > 0:
                result["agent"] = measure_agent(
                    policy, executor, archive, config, names, args.episodes, args.seed
                )
            if args.designs > 0:
                result["designer"] = measure_designer(
                    policy, corpus, archive, executor, config, args.designs, args.seed
                )
        finally:
            archive.close()
            executor.close()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print_tables(result, args.episodes)


def print_tables(result: dict, episodes: int) -> None:
    where = result.get("config") or "the defaults"
    print(f"configuration: {where}; overrides: {' '.join(result['overrides']) or '(none)'}")
    if result.get("warmup"):
        w = result["warmup"]
        print(
            f"warm-up: {'from the cache' if w.get('warmup/cached') else 'trained'}, "
            f"{w.get('warmup/designs', 0):.0f} designs, loss {w.get('warmup/loss_first', 0):.3f} -> "
            f"{w.get('warmup/loss_last', 0):.3f}, {w['seconds_here']:.0f} s"
        )
    if "agent" in result:
        print(f"\nagent: {episodes} episodes without and {episodes} with the hint per environment")
        print(f"{'env':<14}{'turns':>6}{'parse':>7}{'win':>6}{'win+h':>7}{'return':>8}{'regret':>8}  example")
        for row in result["agent"]:
            print(
                f"{row['env']:<14}{row['turns']:>6}{row['parseable']:>7.2f}{row['win']:>6.2f}"
                f"{row['win_hint']:>7.2f}{row['return']:>8.2f}{row['regret']:>8.2f}  "
                f"{row['example'][:40]!r}"
            )
        rows = result["agent"]
        if rows:
            turns = sum(r["turns"] for r in rows)
            share = sum(r["parseable"] * r["turns"] for r in rows) / max(1, turns)
            band = sum(0.15 <= r["win"] <= 0.85 for r in rows)
            print(
                f"all: parseable {share:.2f} of {turns} turns; {band} of {len(rows)} environments with a "
                f"no-hint win rate in [0.15, 0.85]; play {rows[0]['play_seconds_all_envs']:.0f} s"
            )
    if "designer" in result:
        d = result["designer"]
        print(
            f"\ndesigner: {d['valid']} of {d['designs']} valid ({d['valid_rate']:.2f}), "
            f"{d['distinct_valid']} distinct, {d['copies_of_archive']} copies of an archive environment, "
            f"{d.get('copies_of_examples', 0)} of a built-in example or warm-up design, "
            f"{d['truncated']} cut at the token limit, {d['seconds']:.0f} s"
        )
        for reason, count in d["reasons"].items():
            print(f"  {reason:<28}{count:>4}")
        if d["example_valid"]:
            print("first valid design:\n" + d["example_valid"])


if __name__ == "__main__":
    sys.exit(main())
