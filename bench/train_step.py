"""Time per GRPO update: our adapter (``spade_rl.train.GRPOUpdater``) vs plain TRL ``GRPOTrainer.train()``.

    python bench/train_step.py                      # tiny random model on CPU, about a minute
    python bench/train_step.py --rounds 5 --steps 12 --completion-len 96

Both sides train a fresh tiny Llama (``tiny_random_model``, seed 0) on the same fixed batch: the same
prompts, completions (agent completions with environment tokens masked out), sampling log-probs and
advantages, in the same geometry (``num_generations`` rows per group, ``per_device_train_batch_size`` x
``gradient_accumulation_steps`` rows per step). The plain side runs TRL's normal path: a dataset of
prompts, its RepeatSampler and dataloader, its own ``train()`` loop, reward functions, and a
``rollout_func`` that returns the fixed completions in place of generation. Its time per step is the
interval between consecutive ``on_step_end`` callbacks (data loading, the accumulation passes, the
optimiser step, logging); ours is the wall time of one ``update()`` call (batch layout and checks
included). The first step of every round is a warm-up and is not counted. Rounds alternate the two sides
so that a busy machine slows both alike; the medians over all counted steps are compared. One torch thread
by default: the tiny model's matrices are too small to share, and threads waiting on each other on a busy
machine make the timings noisy.
Target: adapter / plain <= 1.15.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import random
import statistics
import sys
import tempfile
import time
import warnings

import torch
from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from spade_rl.policy import default_tokenizer, tiny_random_model
from spade_rl.rewards import centred_advantages, zscore_advantages
from spade_rl.train import GRPOUpdater, Sample, TrainConfig
from spade_rl.train.updater import agent_advantage, designer_advantage


def make_groups(args: argparse.Namespace) -> list[list[Sample]]:
    """Alternating designer and agent groups with fixed random tokens and centred advantages."""
    rng = random.Random(0)
    groups = []
    for k in range(args.groups):
        role = "designer" if k % 2 == 0 else "agent"
        rewards = [rng.random() for _ in range(args.group_size)]
        advantages = (centred_advantages if role == "designer" else zscore_advantages)(rewards).advantages
        group = []
        for advantage in advantages:
            n = args.completion_len
            mask = [1] * n if role == "designer" else [1 if (i // 8) % 2 == 0 else 0 for i in range(n)]
            group.append(
                Sample(
                    role=role,
                    prompt_ids=[rng.randrange(10, 40000) for _ in range(args.prompt_len)],
                    completion_ids=[rng.randrange(10, 40000) for _ in range(n)],
                    completion_mask=mask,
                    logprobs=[-rng.uniform(1, 10) if m else 0.0 for m in mask],
                    advantage=advantage,
                    group=k,
                )
            )
        groups.append(group)
    return groups


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def plain_round(args, tokenizer, groups, out_dir) -> list[float]:
    """Seconds per step of GRPOTrainer.train() over ``args.steps + 1`` steps (the first not counted)."""
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    by_prompt = {f"group {k}": group for k, group in enumerate(groups)}

    def rollout(prompts, trainer):
        served: dict[str, int] = {}
        rows = []
        for prompt in prompts:  # each prompt comes num_generations times: serve its group's samples in order
            index = served.get(prompt, 0)
            served[prompt] = index + 1
            rows.append(by_prompt[prompt][index])
        return {
            "prompt_ids": [list(s.prompt_ids) for s in rows],
            "completion_ids": [list(s.completion_ids) for s in rows],
            "logprobs": [list(s.logprobs) for s in rows],
            "env_mask": [list(s.completion_mask) for s in rows],
            "role": [s.role for s in rows],
            "advantage": [s.advantage for s in rows],
        }

    config = GRPOConfig(
        output_dir=out_dir,
        learning_rate=1e-4,
        max_steps=args.steps + 1,
        num_generations=args.group_size,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=args.accumulation,
        max_completion_length=args.completion_len,
        temperature=0.6,
        epsilon=0.2,
        epsilon_high=0.28,
        scale_rewards="none",
        loss_type="dapo",
        seed=0,
        bf16=False,
        use_cpu=True,
        activation_checkpointing=False,
        disable_dropout=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        shuffle_dataset=False,
        remove_unused_columns=False,
    )
    clock = StepClock()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[designer_advantage, agent_advantage],
            args=config,
            train_dataset=Dataset.from_dict({"prompt": list(by_prompt)}),
            processing_class=tokenizer,
            rollout_func=rollout,
            callbacks=[clock],
        )
        trainer.remove_callback(PrinterCallback)  # as the adapter does: no log lines on stdout
        start = time.perf_counter()
        trainer.train()
    ends = [start, *clock.ends]
    return [b - a for a, b in itertools.pairwise(ends)][1:]


def adapter_round(args, tokenizer, samples, out_dir) -> list[float]:
    """Seconds per ``GRPOUpdater.update`` over ``args.steps + 1`` updates (the first not counted)."""
    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    config = TrainConfig(
        learning_rate=1e-4,
        group_size=args.group_size,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=args.accumulation,
        max_completion_length=args.completion_len,
        output_dir=out_dir,
        bf16=False,
        gradient_checkpointing=False,
    )
    updater = GRPOUpdater(model, tokenizer, config)
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        updater.update(samples)
        times.append(time.perf_counter() - start)
    return times[1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="counted steps per round and side")
    parser.add_argument("--groups", type=int, default=4, help="groups per step (roles alternate)")
    parser.add_argument(
        "--group-size", type=int, default=4, help="samples per GRPO group (TRL's num_generations)"
    )
    parser.add_argument("--batch", type=int, default=8, help="per_device_train_batch_size")
    parser.add_argument("--accumulation", type=int, default=2, help="gradient_accumulation_steps")
    parser.add_argument("--prompt-len", type=int, default=24)
    parser.add_argument("--completion-len", type=int, default=32)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: fastest for the tiny model; 0: torch's default)",
    )
    args = parser.parse_args(argv)
    if args.groups * args.group_size != args.batch * args.accumulation:
        parser.error("groups * group-size must equal batch * accumulation (one generation batch per step)")
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    tokenizer = default_tokenizer()
    groups = make_groups(args)
    samples = [s for group in groups for s in group]
    plain: list[float] = []
    ours: list[float] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        for r in range(args.rounds):
            plain += plain_round(args, tokenizer, groups, out_dir)
            ours += adapter_round(args, tokenizer, samples, out_dir)
            print(
                f"round {r + 1}: plain {statistics.median(plain[-args.steps :]):.4f} s/step, "
                f"adapter {statistics.median(ours[-args.steps :]):.4f} s/step",
                flush=True,
            )
    p, a = statistics.median(plain), statistics.median(ours)
    rows = args.batch * args.accumulation
    print(
        f"{rows} rows/step ({args.groups} groups of {args.group_size}), prompt {args.prompt_len} + "
        f"completion {args.completion_len} tokens, {torch.get_num_threads()} threads, "
        f"{len(ours)} steps per side, {time.perf_counter() - t0:.0f} s in all"
    )
    print(f"plain GRPOTrainer.train(): median {p:.4f} s/step")
    print(f"GRPOUpdater.update():      median {a:.4f} s/step")
    print(f"ratio adapter/plain: {a / p:.3f} (target <= 1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
