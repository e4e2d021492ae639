"""How fast does training learn? The lever table of an experiment folder, read from what its runs wrote.

    spade-rl experiment experiments/cpu-levers.toml --out runs/experiments/cpu-levers
    python bench/learning_speed.py runs/experiments/cpu-levers            # a table per arm and seed
    python bench/learning_speed.py runs/experiments/cpu-levers --json

For every arm and seed (``arms/<arm>/seed-<s>/metrics.jsonl`` and its evaluations) it prints:

- ``it``, ``train s``: iterations and seconds of training (``time/iteration_s`` summed; evaluations are
  not counted);
- ``signal rows``: agent rows of groups with reward spread that reached the update (``samples/agent``: the
  loop drops the groups whose returns are all equal), and ``row-steps``: the same counted once per
  optimiser step that trained them (``train/agent/samples``, summed over an iteration's steps: with
  ``loop.update_epochs = 2`` every row is trained twice);
- ``rows/min`` and ``row-steps/min``: the efficiency figures, per minute of training, and their ratio
  to the baseline arm's (the experiment's ``baseline``), measured in the same folder;
- ``signal``: the share of groups with reward spread (both roles' groups; a fixed pool has only the agent's);
- ``win 1st/last``: the agent's no-hint win rate in training, mean of the first and of the last third of
  the iterations (a rising curve in training);
- ``start`` / ``end``: the held-out win rate before and after training (``start/*.json``,
  ``end-eval.json``), with the in-loop evaluations in between when ``[eval] every`` is set.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spade_rl.experiment.spec import start_key_of_data


def read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def held_out(path: Path) -> float | None:
    """The envs suite's win rate of an evaluation file (None when there is none)."""
    if not path.exists():
        return None
    suites = json.loads(path.read_text(encoding="utf-8")).get("suites", {})
    suite = suites.get("envs") or next(iter(suites.values()), None)
    return None if suite is None else suite["accuracy"]


def third_means(values: list[float]) -> tuple[float | None, float | None]:
    """The means of the first and the last third of ``values`` (at least one value each)."""
    if not values:
        return None, None
    k = max(1, len(values) // 3)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def measure_run(run_dir: Path, start_file: Path | None) -> dict:
    lines = read_lines(run_dir / "metrics.jsonl")
    seconds = sum(m.get("time/iteration_s") or 0.0 for m in lines)
    rows = sum(m.get("samples/agent") or 0 for m in lines)
    row_steps = sum(m.get("train/agent/samples") or 0.0 for m in lines)
    groups = sum(m.get("groups/total") or 0 for m in lines)  # both roles' (a fixed pool has only the agent's)
    zero = sum(m.get("groups/zero_signal") or 0 for m in lines)
    wins = [m["agent/win_rate"] for m in lines if m.get("agent/win_rate") is not None]
    first, last = third_means(wins)
    minutes = seconds / 60.0
    curve = [(int(p.stem.split("-")[1]), held_out(p)) for p in sorted((run_dir / "eval").glob("iter-*.json"))]
    return {
        "iterations": len(lines),
        "train_s": seconds,
        "signal_rows": rows,
        "row_steps": row_steps,
        "rows_per_min": rows / minutes if minutes else None,
        "row_steps_per_min": row_steps / minutes if minutes else None,
        "signal_share": (groups - zero) / groups if groups else None,
        "win_first": first,
        "win_last": last,
        "start": held_out(start_file) if start_file else None,
        "curve": curve,
        "end": held_out(run_dir / "end-eval.json"),
    }


def start_file(folder: Path, experiment: dict, arm: str, seed: str) -> Path | None:
    """The start evaluation of an arm's run: arms that start from the same policy and are evaluated the
    same way share one (``spade_rl.experiment.spec.start_key``, from the stored data)."""
    key = start_key_of_data(experiment["arms"][arm][seed]["policy"], experiment["eval"])
    path = folder / "start" / f"{key}.json"
    return path if path.exists() else None


def measure(folder: Path) -> tuple[list[dict], str]:
    experiment = json.loads((folder / "experiment.json").read_text(encoding="utf-8"))
    baseline = experiment.get("baseline", "")
    rows = []
    for arm, seeds in experiment["arms"].items():
        for seed in seeds:
            run_dir = folder / "arms" / arm / f"seed-{seed}"
            if not (run_dir / "metrics.jsonl").exists():
                continue
            start = start_file(folder, experiment, arm, seed)
            rows.append({"arm": arm, "seed": int(seed), **measure_run(run_dir, start)})
    base = [r for r in rows if r["arm"] == baseline and r["rows_per_min"]]
    for row in rows:
        for key in ("rows_per_min", "row_steps_per_min"):
            ref = sum(b[key] for b in base) / len(base) if base else None
            row[f"{key}_ratio"] = row[key] / ref if ref and row[key] is not None else None
    return rows, baseline


def fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an experiment folder (spade-rl experiment --out)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if not (args.folder / "experiment.json").exists():
        print(f"{args.folder} holds no experiment (no experiment.json)", file=sys.stderr)
        return 2
    rows, baseline = measure(args.folder)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"{'arm':<14}{'seed':>5}{'it':>4}{'train s':>9}{'signal rows':>12}{'row-steps':>10}"
        f"{'rows/min':>9}{'x base':>7}{'steps/min':>10}{'x base':>7}{'signal':>7}"
        f"{'win 1st':>8}{'last':>6}{'start':>7}{'end':>6}  curve"
    )
    for r in rows:
        curve = " ".join(f"{i}:{fmt(w)}" for i, w in r["curve"])
        print(
            f"{r['arm']:<14}{r['seed']:>5}{r['iterations']:>4}{r['train_s']:>9.0f}{r['signal_rows']:>12}"
            f"{r['row_steps']:>10.0f}{fmt(r['rows_per_min'], '.1f'):>9}{fmt(r['rows_per_min_ratio']):>7}"
            f"{fmt(r['row_steps_per_min'], '.1f'):>10}{fmt(r['row_steps_per_min_ratio']):>7}"
            f"{fmt(r['signal_share']):>7}{fmt(r['win_first']):>8}{fmt(r['win_last']):>6}"
            f"{fmt(r['start']):>7}{fmt(r['end']):>6}  {curve}"
        )
    if baseline:
        print(f"(x base: against the arm {baseline!r}, measured in the same folder)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
