"""What the LLM validator says about a run's designs, judged by a given model (issue 56, item 5).

    python experiments/judge.py RUN_DIR [RUN_DIR ...] [--model NAME] [--limit N] [--batch 16] [--json OUT]

For each valid design of each run (experiments/results/*/arms/*/seed-*: config.json and archive.sqlite), two
verdicts side by side:

- the gates': the design validated again with today's defaults (every gate on: ``load_config(None)``'s
  question validation, the CPU default's form), "refused" with the check that refused it, or "valid";
- the judge's: the reference's LLM validator (``spade_rl.design.llm_validator``: the question against its
  checking logic, ``validator_chat`` as the design phase builds it for the question kit) answered by
  ``--model`` (default: the default model, SmolLM2-135M-Instruct) at ``llm_validator``'s default
  temperature and length, read by ``parse_verdict``: yes, no, or no verdict.

It prints, per run and pooled, how the judge's verdicts split over the designs the gates refuse and the ones
they keep, and over the designs the run's agent won (a no-hint win rate above 0 in any iteration) or not,
with the judge's cost: generated tokens and seconds per verdict (wall time of each batch, shared by its
designs; nothing else should run on the machine meanwhile).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from revalidate import designs

from spade_rl.design.llm_validator import LLMValidatorSettings, parse_verdict, validator_chat
from spade_rl.design.validate import validate_source
from spade_rl.envs import kits
from spade_rl.loop.config import load_config
from spade_rl.policy import SamplingSettings
from spade_rl.sandbox import Sandbox


def gate_verdicts(rows: list[dict], seed: int) -> list[str]:
    """Each design's verdict under today's validation defaults (every gate on)."""
    settings = load_config(None).design_phase.question_validation
    out = []
    with Sandbox() as sandbox:
        for i, row in enumerate(rows):
            report = validate_source(
                sandbox, row["source"], dataclasses.replace(settings, seed=seed + i), hint=row["hint"]
            )
            out.append("valid" if report.valid else f"refused ({report.reason})")
    return out


def judge(policy, rows: list[dict], batch: int, seed: int) -> list[dict]:
    """The LLM validator's verdict on each design, with its tokens and its share of the batch's seconds."""
    settings = LLMValidatorSettings()
    rng = random.Random(seed)
    out = []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        chats = []
        for row in chunk:
            part = kits.design_part(row["source"], "question")
            chats.append(
                validator_chat(part or row["source"], "games", settings, "question" if part else None)
            )
        sampling = SamplingSettings(
            max_new_tokens=settings.max_new_tokens,
            temperature=settings.temperature,
            seed=rng.randrange(2**31),
        )
        began = time.perf_counter()
        generations = policy.generate(chats, sampling)
        seconds = (time.perf_counter() - began) / len(chunk)
        for generation in generations:
            verdict = parse_verdict(generation.text)
            said = {True: "yes", False: "no", None: "no verdict"}[verdict.accepted]
            out.append(
                {
                    "verdict": said,
                    "tokens": len(generation.completion_token_ids or ()),
                    "seconds": seconds,
                    "answer": " ".join(generation.text.split())[-160:],
                }
            )
        print(f"  judged {start + len(chunk)}/{len(rows)}", file=sys.stderr, flush=True)
    return out


def table(records: list[dict]) -> dict:
    by_gate: dict[str, Counter] = {"gates refuse": Counter(), "gates keep": Counter()}
    by_won: dict[str, Counter] = {"agent won": Counter(), "never won": Counter()}
    for r in records:
        by_gate["gates keep" if r["gate"] == "valid" else "gates refuse"][r["verdict"]] += 1
        by_won["agent won" if r["best"] > 0 else "never won"][r["verdict"]] += 1
    tokens = [r["tokens"] for r in records]
    seconds = [r["seconds"] for r in records]
    return {
        "designs": len(records),
        "by_gate": {k: dict(v) for k, v in by_gate.items()},
        "by_won": {k: dict(v) for k, v in by_won.items()},
        "tokens_per_verdict": sum(tokens) / len(tokens) if tokens else None,
        "seconds_per_verdict": sum(seconds) / len(seconds) if seconds else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (config.json, archive.sqlite)")
    parser.add_argument("--model", default=None, help="the judge (default: the default model)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many designs per run")
    parser.add_argument("--batch", type=int, default=16, help="verdicts generated at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write every verdict and the tables here")
    args = parser.parse_args()

    from spade_rl.policy import make_policy

    config = load_config(None, [f"policy.model={json.dumps(args.model)}"] if args.model else [])
    policy = make_policy(config.policy)
    runs, pooled = [], []
    for run in args.runs:
        rows = designs(run / "archive.sqlite")[: args.limit]
        gates = gate_verdicts(rows, args.seed)
        verdicts = judge(policy, rows, args.batch, args.seed)
        records = [
            {"run": str(run), "id": row["id"], "best": row["best"], "gate": gate, **verdict}
            for row, gate, verdict in zip(rows, gates, verdicts, strict=True)
        ]
        pooled += records
        runs.append({"run": str(run), **table(records)})
        print(json.dumps(runs[-1]), flush=True)
    result = {"model": args.model or "default", "runs": runs, "pooled": table(pooled)}
    print(json.dumps(result["pooled"], indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "records": pooled}, indent=1) + "\n")


if __name__ == "__main__":
    main()
