"""Peak memory and seconds of the designer's warm-up, by ``warmup.activation_tokens``.

    python bench/warmup_memory.py                              # 0 (the baseline), 448, 320; 8 steps
    python bench/warmup_memory.py --activation-tokens 0 448 --steps 24

Each setting trains the run's default model (the CPU default's warm-up: its 48 designs, learning rate,
batch size) in a process of its own, so that each peak is that process's maximum resident size
(``ru_maxrss``, what ``/usr/bin/time -v`` reports) from a fresh start. The ``--steps`` optimiser steps are
the longest rows first: the rows whose activations set the peak, and the ones that recompute the most.
Prints each setting's warm-up seconds, peak resident size during it and the process's peak, with the
ratios to the first setting measured in the same run (the baseline), and how far the weights moved apart
(recomputed activations give the same warm-up up to float rounding).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def one(activation_tokens: int, steps: int) -> dict:
    """One setting, in this process: the warm-up's first ``steps`` steps on its longest rows."""
    import dataclasses

    import torch

    from spade_rl.corpus import Corpus
    from spade_rl.designer.warmup import _train, warmup_examples
    from spade_rl.loop.config import load_config
    from spade_rl.memory import PhasePeak, peak_resident_mib, release_unused_memory
    from spade_rl.policy import make_policy

    config = load_config(processes=1)  # spade-rl run's: the CPU profile
    policy = make_policy(config.policy)
    release_unused_memory()
    warmup = dataclasses.replace(config.warmup, epochs=1, activation_tokens=activation_tokens)
    examples = warmup_examples(warmup, config.design, Corpus.from_config(config.corpus))
    tokenizer = policy.tokenizer

    def length(example):
        chat, answer = example
        return len(policy.render(chat, add_generation_prompt=True)) + len(tokenizer(answer)["input_ids"])

    longest = sorted(examples, key=length, reverse=True)[: steps * warmup.batch_size]
    # _train shuffles: with batch_size rows per step and one epoch, the steps hold exactly these rows
    started = time.perf_counter()
    with PhasePeak(interval=0.05) as peak:
        losses = _train(policy, longest, warmup)
    seconds = time.perf_counter() - started
    head = torch.cat([p.detach().flatten()[:4096] for p in policy.model.parameters()])
    return {
        "activation_tokens": activation_tokens,
        "rows": [length(e) for e in longest],
        "seconds": seconds,
        "peak_mib": peak.peak_mib,
        "process_peak_mib": peak_resident_mib(),
        "loss_last": losses[-1],
        "weights": head.tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--activation-tokens", type=int, nargs="+", default=[0, 448, 320])
    parser.add_argument(
        "--steps", type=int, default=8, help="optimiser steps (4 rows each), longest rows first"
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process: one setting
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.steps)))
        return
    results = []
    for tokens in args.activation_tokens:
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        command = [sys.executable, __file__, "--one", str(tokens), "--steps", str(args.steps)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            sys.exit(f"activation_tokens {tokens} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = results[0]
    rows = base["rows"]
    print(f"{args.steps} steps, {len(rows)} rows of {min(rows)}-{max(rows)} tokens (longest first)")
    print("activation_tokens  seconds  ratio  warm-up peak MiB  ratio  process peak MiB  max |dw|")
    for r in results:
        drift = max(abs(a - b) for a, b in zip(r["weights"], base["weights"], strict=True))
        print(
            f"{r['activation_tokens']:>17}  {r['seconds']:7.1f}  {r['seconds'] / base['seconds']:5.2f}"
            f"  {r['peak_mib']:16.0f}  {r['peak_mib'] / base['peak_mib']:5.2f}"
            f"  {r['process_peak_mib']:16.0f}  {drift:8.1e}"
        )


if __name__ == "__main__":
    main()
