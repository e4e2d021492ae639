"""One optimiser step of the default model: the learner against the TRL-driven updater it replaced.

    python bench/learner_step.py                          # baseline: the updater at 593971e (git worktree)
    python bench/learner_step.py --baseline-rev 593971e --repeats 3 --rounds 3
    python bench/learner_step.py --bf16 false --repeats 0 --rounds 1   # the first step in float32 only

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
the two gradients, read just before the optimiser applies them, and the two weight changes (relative
distance and cosine: the same update up to float rounding, or not; ``--bf16 false`` takes the step in
float32, where rounding is about 1e-5). Then each step runs once as a warm-up, then ``--repeats`` timed
times (``--repeats 0``: the first step only). The sides run ``--rounds`` processes each, alternated
(updater, learner, updater, ...), so that a busy spell of a shared machine falls on both. Prints the median
seconds per step and per signal-carrying row (rows with a trained token and a non-zero advantage) and each
round's, each side's peak resident memory (the process's ru_maxrss, model load included), and the
learner's ratios to the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
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
    bf16={"auto": "auto", "false": False}[args["bf16"]], checkpoint_rows_longer_than=256,
)
# The first step's gradients, read just before the optimiser applies them (after any clipping).
names = {id(p): n for n, p in model.named_parameters()}
grads = {}
def keep_gradients(optimizer, *_):
    if not grads:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None and id(p) in names:
                    grads[names[id(p)]] = p.grad.detach().clone()
from torch.optim.optimizer import register_optimizer_step_pre_hook
hook = register_optimizer_step_pre_hook(keep_gradients)
if hasattr(train, "Learner"):
    learner = train.Learner(model, tokenizer, config); call = learner.step
else:
    learner = train.GRPOUpdater(model, tokenizer, config); call = learner.update
out = {}
# The same first step on both sides: the weights after it, for the parent to compare.
before = {k: v.detach().clone() for k, v in model.state_dict().items()}
first = call(steps["full"])
out["first_loss"], out["first_grad_norm"] = first["train/loss"], first["train/grad_norm"]
hook.remove()
delta = {k: (v.detach() - before[k]) for k, v in model.state_dict().items()}
torch.save({"delta": delta, "grads": grads}, args["delta"])
del before, delta, grads
for name, samples in (steps.items() if args["repeats"] else ()):
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


def run_side(source: Path, rows_file: Path, repeats: int, delta: Path, bf16: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source / "src"), "TOKENIZERS_PARALLELISM": "false"}
    arguments = json.dumps({"rows": str(rows_file), "repeats": repeats, "delta": str(delta), "bf16": bf16})
    done = subprocess.run([sys.executable, "-c", DRIVER, arguments], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"the run from {source} failed:\n{done.stderr[-3000:]}")
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def first_step_agreement(before: Path, after: Path) -> dict[str, float]:
    """How far the learner's first step is from the updater's: its gradients (relative distance and
    cosine) and its weight change (relative distance, and the share of weights moved the other way or not
    at all on one side only). AdamW's first step moves each weight by about ``lr * sign(gradient)``, so a
    gradient element within rounding of zero can flip its weight's move: the weight change can differ by a
    few percent while the gradients agree to rounding."""
    import torch

    one, two = torch.load(before), torch.load(after)

    def compare(a: dict, b: dict) -> tuple[float, float]:
        keys = [k for k in a if k in b]
        diff = sum(float((b[k] - a[k]).double().pow(2).sum()) for k in keys)
        size_a = sum(float(a[k].double().pow(2).sum()) for k in keys)
        size_b = sum(float(b[k].double().pow(2).sum()) for k in keys)
        dot = sum(float((a[k].double() * b[k].double()).sum()) for k in keys)
        return (diff / max(size_a, 1e-300)) ** 0.5, dot / max((size_a * size_b) ** 0.5, 1e-300)

    grad_distance, grad_cosine = compare(one["grads"], two["grads"])
    weight_distance, weight_cosine = compare(one["delta"], two["delta"])
    keys = [k for k in one["delta"] if k in two["delta"]]
    moved_apart = sum(int((one["delta"][k].sign() != two["delta"][k].sign()).sum()) for k in keys)
    total = sum(one["delta"][k].numel() for k in keys)
    return {
        "grad_distance": grad_distance,
        "grad_cosine": grad_cosine,
        "grad_tensors": float(len(set(one["grads"]) & set(two["grads"]))),
        "weight_distance": weight_distance,
        "weight_cosine": weight_cosine,
        "moved_apart": moved_apart / max(total, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-rev", default="593971e", help="the commit whose updater is the baseline")
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per process (0: first step only)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per side, the sides alternated")
    parser.add_argument(
        "--bf16", choices=["auto", "false"], default="auto",
        help="auto: the CPU default's bfloat16 autocast; false: float32 throughout",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 0:
        parser.error("--rounds must be at least 1 and --repeats at least 0")
    steps = rows()
    sides: dict[str, list[dict]] = {"updater": [], "learner": []}
    with tempfile.TemporaryDirectory(prefix="spade-bench-") as scratch:
        rows_file = Path(scratch) / "rows.json"
        rows_file.write_text(json.dumps(steps))
        baseline = Path(scratch) / "baseline"
        git = ["git", "-C", str(ROOT), "worktree"]
        add = [*git, "add", "--detach", str(baseline), args.baseline_rev]
        subprocess.run(add, check=True, capture_output=True)
        try:
            for _ in range(args.rounds):  # alternated, so that a busy spell of the machine hits both sides
                for side, source in (("updater", baseline), ("learner", ROOT)):
                    delta = Path(scratch) / f"first-{side}.pt"
                    sides[side].append(run_side(source, rows_file, args.repeats, delta, args.bf16))
        finally:
            subprocess.run([*git, "remove", "--force", str(baseline)], check=False)
        first = [Path(scratch) / f"first-{side}.pt" for side in sides]
        agreement = first_step_agreement(*first)
    before, after = sides["updater"][0], sides["learner"][0]
    print(
        f"baseline: the updater at {args.baseline_rev}; learner: this checkout; bf16 {args.bf16}; "
        f"{args.rounds} alternated processes per side, median of {args.repeats} steps in each"
    )
    print(f"  (imported from {before['package']} and {after['package']})")
    for name, samples in steps.items() if args.repeats else ():
        n = signal_rows(samples)
        b = statistics.median(r[name] for r in sides["updater"])
        a = statistics.median(r[name] for r in sides["learner"])
        pairs = zip(sides["updater"], sides["learner"], strict=True)
        each = ", ".join(f"{u[name]:.1f}/{v[name]:.1f}" for u, v in pairs)
        print(
            f"{name:<10} {n:>2} signal rows: updater {b:6.1f} s ({b / n:5.2f} s/row), "
            f"learner {a:6.1f} s ({a / n:5.2f} s/row), learner / updater x{a / b:.2f}  (rounds: {each})"
        )
    print(
        f"the first step: loss updater {before['first_loss']:.6g}, learner {after['first_loss']:.6g}; "
        f"grad norm updater {before['first_grad_norm']:.6g}, learner {after['first_grad_norm']:.6g}"
    )
    g, w = agreement, agreement
    print(
        f"the first step's gradients ({g['grad_tensors']:.0f} tensors): ||learner - updater|| / ||updater||"
        f" = {g['grad_distance']:.2e}, cosine {g['grad_cosine']:.6f} (rounding: under bf16 autocast about"
        " 1e-2 or less, in float32 about 1e-5 or less; a lost row or a changed normaliser: of order 1)"
    )
    print(
        f"the first step's weight change: ||learner - updater|| / ||updater|| = {w['weight_distance']:.2e}, "
        f"cosine {w['weight_cosine']:.6f}; weights moved in a different direction: {w['moved_apart']:.2e} of "
        "all (AdamW's first step is about lr * sign(gradient): a gradient within rounding of zero flips)"
    )
    b = statistics.median(r["peak_mib"] for r in sides["updater"])
    a = statistics.median(r["peak_mib"] for r in sides["learner"])
    print(f"peak RSS: updater {b:.0f} MiB, learner {a:.0f} MiB, learner / updater x{a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
