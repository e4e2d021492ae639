"""Which of a run's designs validation's caps would have refused: an offline check of the remedies.

    python experiments/revalidate.py RUN_DIR [RUN_DIR ...] [--common 0.15] [--copy 0.75] [--undetermined]
        [--seed 0]

A run directory holds the run's config.json and archive.sqlite (experiments/results/*/arms/*/seed-*). Every
design that the run's validation passed is validated again as that run validated it (its design.validation,
rollout.max_turns and the question kit's arguments, in a sandbox of its sandbox settings), with
``max_common_answer_win_rate`` and ``max_copy_win_rate`` set (and, with ``--undetermined``,
``refuse_undetermined_answers``), at fixed seeds (``--seed``, then one more for each design) so that the
figures repeat. Each design is counted by whether the run's agent ever won it without the hint (a win rate
above 0 in any iteration's statistics) and by its new verdict: still valid, refused by one of the caps (the
message names the setting), or refused by another check (validation draws its seeds: at other seeds than the
run's, a design near a limit can fall on the other side of it). Training plays nothing: no model is loaded,
only the sandbox.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
from collections import Counter
from pathlib import Path

from spade_rl.design.validate import validate_source
from spade_rl.loop.config import load_config
from spade_rl.sandbox import Sandbox

CAPS = {
    "max_common_answer_win_rate": "common-answer cap",
    "max_copy_win_rate": "copy cap",
    "refuse_undetermined_answers": "undetermined answer",
}


def designs(archive: Path) -> list[dict]:
    """The archive's valid designs (not the seed pool's: iteration > 0), each with its hint and its best
    no-hint win rate."""
    # immutable: a finished archive read without the -wal/-shm files a read-only WAL connection leaves
    db = sqlite3.connect(f"{archive.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        rows = db.execute(
            "SELECT e.id, e.source, e.hint, MAX(COALESCE(s.win_rate_nohint, 0)) "
            "FROM environments e LEFT JOIN stats s ON s.env_id = e.id "
            "WHERE e.valid = 1 AND e.iteration > 0 GROUP BY e.id ORDER BY e.id"
        ).fetchall()
    finally:
        db.close()
    return [{"id": r[0], "source": r[1], "hint": r[2] or "", "best": r[3]} for r in rows]


def verdict(reason: str, message: str) -> str:
    if reason == "ok":
        return "valid"
    for setting, name in CAPS.items():
        if setting in message:
            return name
    return f"other ({reason})"


def revalidate(
    run: Path, common: float | None, copy: float | None, seed: int, undetermined: bool = False
) -> dict:
    config = load_config(run / "config.json")
    settings = config.design_phase.question_validation
    settings = dataclasses.replace(
        settings,
        max_common_answer_win_rate=common,
        max_copy_win_rate=copy,
        refuse_undetermined_answers=undetermined,
    )
    rows = designs(run / "archive.sqlite")
    counts: dict[str, Counter] = {"won": Counter(), "never won": Counter()}
    refused: list[dict] = []
    with Sandbox(config.sandbox) as sandbox:
        for i, row in enumerate(rows):
            report = validate_source(
                sandbox, row["source"], dataclasses.replace(settings, seed=seed + i), hint=row["hint"]
            )
            said = verdict(report.reason, report.message)
            counts["won" if row["best"] > 0 else "never won"][said] += 1
            if said != "valid":
                refused.append({"id": row["id"], "best": round(row["best"], 3), "verdict": said})
    return {
        "run": str(run),
        "designs": len(rows),
        "counts": {k: dict(v) for k, v in counts.items()},
        "refused": refused,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (config.json, archive.sqlite)")
    parser.add_argument("--common", type=float, default=0.15, help="max_common_answer_win_rate (<0: off)")
    parser.add_argument("--copy", type=float, default=0.75, help="max_copy_win_rate (<0: off)")
    parser.add_argument(
        "--undetermined", action="store_true", help="turn refuse_undetermined_answers on (default: off)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the first design's validation seed")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    common = None if args.common < 0 else args.common
    copy = None if args.copy < 0 else args.copy
    for run in args.runs:  # every folder checked before any is validated
        for name in ("config.json", "archive.sqlite"):
            if not (run / name).is_file():
                parser.error(
                    f"{run} has no {name}: give run directories (experiments/results/*/arms/*/seed-N)"
                )
    results = []
    for run in args.runs:
        results.append(revalidate(run, common, copy, args.seed, args.undetermined))
        if not args.json:
            r = results[-1]
            print(f"{r['run']}: {r['designs']} valid designs")
            for group, said in r["counts"].items():
                print(f"    {group:9s} " + ", ".join(f"{k} {v}" for k, v in sorted(said.items())))
            for item in r["refused"]:
                best, said = item["best"], item["verdict"]
                print(f"    refused: id {item['id']} (best no-hint win rate {best}): {said}")
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
