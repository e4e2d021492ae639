"""One optimiser step of the default model: the learner against the TRL-driven updater it replaced.

    python bench/learner_step.py                          # baseline: the updater at 593971e (git worktree)
    python bench/learner_step.py --baseline-rev 593971e --repeats 3

Both sides get the same rows, in the CPU default's training settings (``configs/cpu-default.toml``'s
[train]: two rows per pass, bfloat16 autocast where the CPU has it, activation checkpointing of passes
wider than 256 tokens), each in a fresh process, one after the other (never two torch processes at once on
this machine): the baseline is the package at ``--baseline-rev``, checked out into a temporary git worktree
and imported from there (its trl / transformers pins must be installed: they are the dev extra's); the
learner is this checkout's. Two steps of what a default iteration hands the update:

- ``full``: a designer group (8 rows of about 600 trained tokens) and an agent group (8 multi-turn rows of
  about 500 tokens, a quarter of the completion the model's);
- ``one group``: the agent group alone (the updater lays it out as 16 rows, 8 of them filler).

First both sides take the same first step on the ``full`` rows from the same weights: the parent compares
the two weight changes (``||learner - updater|| / ||updater||``: the same update up to float rounding, or
not). Then each step runs once as a warm-up, then ``--repeats`` timed times. Prints the median seconds
per step and per signal-carrying row (rows with a trained token and a non-zero advantage), each side's
peak resident memory (the process's ru_maxrss, model load included), and the learner's ratios to the
baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each side runs, in its own process: the side's package is first on sys.path.
DRIVER = r"""
import json, resource, statistics, sys, time
import torch
from spade_rl.policy.models import load_pretrained
from spade_rl.train import Sample, TrainConfig
import spade_rl.train as train

args = json.loads(sys.argv[1])
steps = {name: [Sample(**s) for s in rows] for name, rows in json.load(open(args["rows"])).items()}
model, tokenizer = load_pretrained(None, device="cpu", dtype="float32")
config = TrainConfig(
    learning_rate=1e-7, group_size=8, per_device_train_batch_size=2, gradient_accumulation_steps=8,
    bf16="auto", checkpoint_rows_longer_than=256,
)
if hasattr(train, "Learner"):
    learner = train.Learner(model, tokenizer, config); call = learner.step
else:
    learner = train.GRPOUpdater(model, tokenizer, config); call = learner.update
out = {}
# The same first step on both sides: the weights after it, for the parent to compare.
before = {k: v.detach().clone() for k, v in model.state_dict().items()}
first = call(steps["full"])
out["first_loss"], out["first_grad_norm"] = first["train/loss"], first["train/grad_norm"]
torch.save({k: (v.detach() - before[k]) for k, v in model.state_dict().items()}, args["delta"])
del before
for name, samples in steps.items():
    call(samples)  # warm-up
    times = []
    for _ in range(args["repeats"]):
        start = time.perf_counter(); call(samples); times.append(time.perf_counter() - start)
    out[name] = statistics.median(times)
out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["package"] = train.__file__
print("RESULT " + json.dumps(out))
"""


def rows(seed: int = 0) -> dict[str, list[dict]]:
    """The two steps' samples as plain records (see the module docstring)."""
    rng = random.Random(seed)

    def ids(n: int) -> list[int]:
        return [rng.randrange(100, 40000) for _ in range(n)]

    designer, agent = [], []
    for k in range(8):
        n = 560 + rng.randrange(0, 80)
        advantage = (-1.0) ** k * 0.5
        designer.append(
            dict(role="designer", prompt_ids=ids(420), completion_ids=ids(n), completion_mask=[1] * n,
                 logprobs=[-1.0] * n, advantage=advantage, group=0)
        )  # fmt: skip
        n = 360 + rng.randrange(0, 40)
        mask = [1 if (i // 12) % 4 == 0 else 0 for i in range(n)]
        agent.append(
            dict(role="agent", prompt_ids=ids(140), completion_ids=ids(n), completion_mask=mask,
                 logprobs=[-1.0 if m else 0.0 for m in mask], advantage=(-1.0) ** k, group=1)
        )  # fmt: skip
    return {"full": designer + agent, "one group": agent}


def signal_rows(samples: list[dict]) -> int:
    return sum(1 for s in samples if s["advantage"] != 0 and any(s["completion_mask"]))


def run_side(source: Path, rows_file: Path, repeats: int, delta: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source / "src"), "TOKENIZERS_PARALLELISM": "false"}
    arguments = json.dumps({"rows": str(rows_file), "repeats": repeats, "delta": str(delta)})
    done = subprocess.run([sys.executable, "-c", DRIVER, arguments], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"the run from {source} failed:\n{done.stderr[-3000:]}")
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def step_difference(before: Path, after: Path) -> float:
    """How far the learner's first step is from the updater's, relative to the updater's."""
    import torch

    one, two = torch.load(before), torch.load(after)
    diff = sum(float((two[k] - one[k]).double().pow(2).sum()) for k in one)
    size = sum(float(one[k].double().pow(2).sum()) for k in one)
    return (diff / size) ** 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-rev", default="593971e", help="the commit whose updater is the baseline")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    steps = rows()
    with tempfile.TemporaryDirectory(prefix="spade-bench-") as scratch:
        rows_file = Path(scratch) / "rows.json"
        rows_file.write_text(json.dumps(steps))
        baseline = Path(scratch) / "baseline"
        git = ["git", "-C", str(ROOT), "worktree"]
        add = [*git, "add", "--detach", str(baseline), args.baseline_rev]
        subprocess.run(add, check=True, capture_output=True)
        try:
            before = run_side(baseline, rows_file, args.repeats, Path(scratch) / "delta-before.pt")
        finally:
            subprocess.run([*git, "remove", "--force", str(baseline)], check=False)
        after = run_side(ROOT, rows_file, args.repeats, Path(scratch) / "delta-after.pt")
        difference = step_difference(Path(scratch) / "delta-before.pt", Path(scratch) / "delta-after.pt")
    print(f"baseline: the updater at {args.baseline_rev}; learner: this checkout; median of {args.repeats}")
    print(f"  (imported from {before['package']} and {after['package']})")
    for name, samples in steps.items():
        n = signal_rows(samples)
        b, a = before[name], after[name]
        print(
            f"{name:<10} {n:>2} signal rows: updater {b:6.1f} s ({b / n:5.2f} s/row), "
            f"learner {a:6.1f} s ({a / n:5.2f} s/row), learner / updater x{a / b:.2f}"
        )
    print(
        f"the first step: loss updater {before['first_loss']:.6g}, learner {after['first_loss']:.6g}; "
        f"grad norm updater {before['first_grad_norm']:.6g}, learner {after['first_grad_norm']:.6g}"
    )
    print(
        f"the first step's weight change: ||learner - updater|| / ||updater|| = {difference:.2e} "
        "(float rounding: about 1e-3 or less; a lost row or a changed normaliser: of order 1)"
    )
    b, a = before["peak_mib"], after["peak_mib"]
    print(f"peak RSS: updater {b:.0f} MiB, learner {a:.0f} MiB, learner / updater x{a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
