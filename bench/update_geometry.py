"""Seconds per trained row of one GRPO update of the default model, by micro-batch geometry.

    python bench/update_geometry.py                       # rows per pass 1, 4, 8; 32 rows of 300 tokens
    python bench/update_geometry.py --rows-per-pass 1 8 --rows 32 --tokens 400 --repeats 2

Every geometry trains the same batch: ``--rows`` agent-like rows in groups of 8 (a 140-token prompt, then
a completion of ``--tokens`` - 140 tokens in which every fourth stretch of 6 tokens is the model's and
the rest the environment's, with centred advantages), on the run's model in the CPU default's
precision (bfloat16 autocast where the CPU has it). One update per geometry first as a warm-up, then
``--repeats`` timed ones; rows of one length per group, as the plays of one instance are. Prints the
median seconds per update and per row, and each geometry's ratio to the first one measured in the
same run (the baseline): the per-pass cost (weight casts, gradient accumulation) is paid once per
micro-batch, so wider micro-batches pay it less often, at the price of the padding up to the longest
row of each micro-batch.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from spade_rl.policy.models import load_pretrained
from spade_rl.train import Learner, Sample, TrainConfig


def batch(rows: int, tokens: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    samples = []
    for group in range(rows // 8):
        length = tokens + rng.randrange(-40, 41)  # groups differ in length, rows of a group barely
        for k in range(8):
            prompt = tuple(rng.randrange(100, 40000) for _ in range(140))
            n = max(8, length - 140 + rng.randrange(-8, 9))
            mask = tuple(1 if (i // 6) % 4 == 0 else 0 for i in range(n))
            completion = tuple(rng.randrange(100, 40000) for _ in range(n))
            logprobs = tuple(-1.0 if m else 0.0 for m in mask)
            samples.append(Sample("agent", prompt, completion, mask, logprobs, (-1.0) ** k, group))
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows-per-pass", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rows", type=int, default=32, help="rows per update (a multiple of 8)")
    parser.add_argument("--tokens", type=int, default=300, help="tokens per row, prompt included")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default=None, help="policy.model (default: the default model)")
    args = parser.parse_args(argv)
    if args.rows % 8 or any(args.rows % p for p in args.rows_per_pass):
        print("--rows must be a multiple of 8 and of every --rows-per-pass", file=sys.stderr)
        return 2
    samples = batch(args.rows, args.tokens)
    results = []
    for per_pass in args.rows_per_pass:
        model, tokenizer = load_pretrained(args.model, device="cpu", dtype="float32")
        config = TrainConfig(
            learning_rate=1e-7,
            group_size=8,
            per_device_train_batch_size=per_pass,
            gradient_accumulation_steps=args.rows // per_pass,
            bf16="auto",
            checkpoint_rows_longer_than=256,
        )
        learner = Learner(model, tokenizer, config)
        try:
            learner.step(samples)  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                learner.step(samples)
                times.append(time.perf_counter() - start)
        finally:
            learner.close()
        seconds = statistics.median(times)
        results.append((per_pass, seconds))
        base = results[0][1]
        print(
            f"rows per pass {per_pass:>2}: {seconds:7.1f} s per update of {args.rows} rows, "
            f"{seconds / args.rows:5.2f} s per row, x{seconds / base:.2f} of rows per pass "
            f"{results[0][0]}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
