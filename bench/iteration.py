"""Where does a default iteration's time go, and how fast is generation against the library and the machine?

    python bench/iteration.py                  # one iteration of `spade-rl run`'s defaults, then generation
    python bench/iteration.py --no-generation        # only the iteration
    python bench/iteration.py --no-iteration --batches 1,8 --new-tokens 32
    python bench/iteration.py loop.designs_per_iteration=2     # any run override

Part 1, one iteration of the run's configuration (the warm-up, cached, runs first and is not counted):
seconds and share of the iteration for design generation, validation, the rest of the design phase,
play generation, the sandbox during play, the rest of play, rewards and statistics, the update, and
the checkpoint; peak resident memory of this process (after the warm-up and after the iteration) and
of the largest of its finished children. The phases are timed by wrapping the policy, the executor, the
learner and the checkpoint of a real ``SelfPlay`` run; nothing of the loop is changed.

Part 2, generation: the same chats (first observations of the reference games) at each batch size,
exactly ``--new-tokens`` tokens per row (an end-of-sequence token stops neither side: the same work on
both) sampled at temperature 0.6, through ``TransformersPolicy.generate`` (its prefix
cache emptied before each call) and through ``model.generate`` of transformers; tokens per second of
each, their ratio, and the share of the machine's matmul ceiling (fp32 matrix products measured here,
divided by 2 FLOP per parameter and token). Everything is measured in the same run: compare ratios,
not seconds, across machines.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from spade_rl.envs import reference
from spade_rl.loop import run as run_module
from spade_rl.loop.config import load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import SamplingSettings
from spade_rl.rollout import SYSTEM_PROMPTS


def peak_rss_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # kilobytes on Linux


class Timers:
    """Seconds per label; ``phase`` names what the loop is doing (design, play, ...)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.phase = "other"

    def wrap(self, owner: object, name: str, label: str | None = None) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[label or f"{self.phase}/{name}"] += time.perf_counter() - started

        setattr(owner, name, timed)

    def during(self, phase: str, function):
        def marked(*args, **kwargs):
            before, self.phase = self.phase, phase
            try:
                return function(*args, **kwargs)
            finally:
                self.phase = before

        return marked


def one_iteration(config_path: str | None, overrides: list[str]) -> dict:
    config = load_config(config_path, [*overrides, "loop.iterations=1"])
    timers = Timers()
    with tempfile.TemporaryDirectory(prefix="spade-bench-iteration-") as scratch:
        started = time.perf_counter()
        run = SelfPlay(config, Path(scratch) / "run")
        setup_s = time.perf_counter() - started
        rss_setup = peak_rss_mib()
        with run:
            policies = {id(run.policy): run.policy}
            if run.designer_policy is not None:
                policies[id(run.designer_policy)] = run.designer_policy
            for policy in policies.values():
                for name in ("generate", "generate_tokens"):
                    timers.wrap(policy, name, None)
            for name in ("open_many", "call_many", "close_env"):
                timers.wrap(run.executor, name, None)
            timers.wrap(run.executor, "validate_many", "validate")
            timers.wrap(run.learner, "step", "update")
            update_tokens = count_update_tokens(run.learner)
            cache = getattr(run.policy, "prefix_cache", None)
            cache_before = dict(cache.stats) if cache is not None else {}
            generated = count_generated_tokens(policies.values(), timers)
            # The checkpoint: the run directory's since the redesign, SelfPlay's own before it (the bench
            # also measures earlier commits, with PYTHONPATH=their/src).
            if hasattr(run, "_checkpoint"):
                timers.wrap(run, "_checkpoint", "checkpoint")
            else:
                timers.wrap(run.files, "checkpoint", "checkpoint")
            run._play = timers.during("play", run._play)
            design = run_module.design_environments
            run_module.design_environments = timers.during("design", design)
            try:
                started = time.perf_counter()
                [metrics] = list(run.iterations())
                total_s = time.perf_counter() - started
            finally:
                run_module.design_environments = design
    s = timers.seconds
    design_s = metrics.get("time/design_s", 0.0)
    play_s = metrics["time/play_s"]
    update_s = metrics["time/update_s"]
    design_gen = s["design/generate"] + s["design/generate_tokens"]
    play_gen = s["play/generate"] + s["play/generate_tokens"]
    sandbox = s["play/open_many"] + s["play/call_many"] + s["play/close_env"]
    phases = {
        "design: generation": design_gen,
        "design: validation": s["validate"],
        "design: the rest": design_s - design_gen - s["validate"],
        "play: generation": play_gen,
        "play: sandbox": sandbox,
        "play: the rest": play_s - play_gen - sandbox,
        "rewards and statistics": metrics["time/iteration_s"] - design_s - play_s - update_s,
        "update": update_s,
        "checkpoint": s["checkpoint"],
    }
    phases["transcripts and metrics"] = max(0.0, total_s - sum(phases.values()))
    return {
        "setup_s": setup_s,  # the warm-up, the model, the pool: before the iteration, not counted
        "iteration_s": total_s,
        "phases_s": phases,
        "peak_rss_mib_after_setup": rss_setup,
        "peak_rss_mib": peak_rss_mib(),
        "peak_rss_mib_children": peak_rss_mib(resource.RUSAGE_CHILDREN),  # the largest finished child
        "prefix_cache": {k: v - cache_before[k] for k, v in cache.stats.items()} if cache is not None else {},
        "update_rows": update_tokens["rows"],
        "update_tokens": update_tokens["tokens"],
        "update_trained_tokens": update_tokens["trained"],
        "generation_tokens": dict(generated),
        "parameters": sum(p.numel() for p in run.policy.model.parameters()),
        "designs": metrics.get("designer/proposed", 0),
        "valid_rate": metrics.get("designer/valid_rate"),
        "updated": "train/skipped" not in metrics,
    }


def count_update_tokens(learner) -> dict:
    """Counts, filled by each ``step``: rows, their tokens (prompt + completion), trained tokens."""
    counts = {"rows": 0, "tokens": 0, "trained": 0}
    inner = learner.step

    def counted(samples, *args, **kwargs):
        counts["rows"] += len(samples)
        counts["tokens"] += sum(len(x.prompt_ids) + len(x.completion_ids) for x in samples)
        counts["trained"] += sum(sum(x.completion_mask) for x in samples)
        return inner(samples, *args, **kwargs)

    learner.step = counted
    return counts


def count_generated_tokens(policies, timers: Timers) -> dict:
    """Per phase: rows, prompt tokens and new tokens of every generation call (wraps the wrapped calls)."""
    counts: dict = defaultdict(int)
    for policy in policies:
        for name in ("generate", "generate_tokens"):
            inner = getattr(policy, name)

            def counted(*args, _inner=inner, **kwargs):
                generations = _inner(*args, **kwargs)
                counts[f"{timers.phase}/rows"] += len(generations)
                counts[f"{timers.phase}/prompt_tokens"] += sum(len(g.prompt_token_ids) for g in generations)
                counts[f"{timers.phase}/new_tokens"] += sum(len(g.completion_token_ids) for g in generations)
                return generations

            setattr(policy, name, counted)
    return counts


def matmul_gflops(size: int = 1024, repeats: int = 20) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    started = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e9


def chats(n: int) -> list[list[dict]]:
    firsts = []
    for name in reference.NAMES:
        source = reference.source(name)
        namespace: dict = {}
        exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102 - our own reference games
        env = next(v for k, v in namespace.items() if k.endswith("Env") and isinstance(v, type))()
        firsts.append((reference.SETTINGS[name], env.reset(0)[0]))
    return [
        [{"role": "system", "content": SYSTEM_PROMPTS[s]}, {"role": "user", "content": o}]
        for s, o in (firsts[i % len(firsts)] for i in range(n))
    ]


def generation(batches: list[int], new_tokens: int, config_path: str | None, overrides: list[str]) -> dict:
    from spade_rl.policy import make_policy

    config = load_config(config_path, overrides)
    policy = make_policy(config.policy)
    model, tokenizer = policy.model, policy.tokenizer
    params = sum(p.numel() for p in model.parameters())
    gflops = matmul_gflops()
    ceiling = gflops * 1e9 / (2 * params)
    rows = []
    for batch in batches:
        batch_chats = chats(batch)
        settings = SamplingSettings(max_new_tokens=new_tokens, temperature=0.6, seed=0, logprobs=True)
        policy.clear_prefix_cache()
        # The same work on both sides: every row generates exactly new_tokens tokens (an end-of-sequence
        # token stops neither; the library gets min_new_tokens), else whichever side happens to sample an
        # early end for its slowest row looks faster.
        stops, policy.eos_token_ids = policy.eos_token_ids, set()
        started = time.perf_counter()
        try:
            generations = policy.generate(batch_chats, settings)
        finally:
            policy.eos_token_ids = stops
        ours_s = time.perf_counter() - started
        ours_tokens = sum(len(g.completion_token_ids) for g in generations)
        texts = [
            tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in batch_chats
        ]
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(0)
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                **encoded,
                do_sample=True,
                temperature=0.6,
                top_p=1.0,
                top_k=0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        library_s = time.perf_counter() - started
        library_tokens = out[:, encoded["input_ids"].shape[1] :].numel()
        ours_rate, library_rate = ours_tokens / ours_s, library_tokens / library_s
        rows.append(
            {
                "batch": batch,
                "ours_tok_s": ours_rate,
                "library_tok_s": library_rate,
                "ours_over_library": ours_rate / library_rate,
                "ours_share_of_ceiling": ours_rate / ceiling,
                "library_share_of_ceiling": library_rate / ceiling,
                "ours_tokens": ours_tokens,
                "library_tokens": library_tokens,
            }
        )
    return {
        "threads": torch.get_num_threads(),
        "matmul_gflops": gflops,
        "parameters": params,
        "ceiling_tok_s": ceiling,
        "rows": rows,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="a run configuration (default: the CPU default)")
    parser.add_argument("--no-iteration", action="store_true")
    parser.add_argument("--no-generation", action="store_true")
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("overrides", nargs="*", help="run overrides, as `spade-rl run` takes them")
    args = parser.parse_args(argv)
    result: dict = {}
    if not args.no_iteration:
        result["iteration"] = one_iteration(args.config, args.overrides)
        result["iteration"]["matmul_gflops"] = matmul_gflops()
    if not args.no_generation:
        batches = [int(b) for b in args.batches.split(",")]
        result["generation"] = generation(batches, args.new_tokens, args.config, args.overrides)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if "iteration" in result:
        it = result["iteration"]
        total = it["iteration_s"]
        print(f"one iteration: {total:.1f} s ({it['designs']} designs, valid rate {it['valid_rate']}, "
              f"updated: {it['updated']}); setup before it {it['setup_s']:.1f} s")  # fmt: skip
        print(f"{'phase':28} {'seconds':>9} {'share':>7}")
        for name, seconds in it["phases_s"].items():
            print(f"{name:28} {seconds:9.2f} {seconds / total:7.1%}")
        gen = it["generation_tokens"]
        for phase in ("design", "play"):
            if gen.get(f"{phase}/rows"):
                rows, prompt, new = (gen[f"{phase}/{k}"] for k in ("rows", "prompt_tokens", "new_tokens"))
                print(f"{phase} generation: {rows} rows, {prompt} prompt tokens, {new} new tokens")
        if it["prefix_cache"]:
            pc = it["prefix_cache"]
            print(f"prefix cache: {pc['hits']} of {pc['rows']} rows reused a prefix, {pc['reused_tokens']} "
                  f"tokens not encoded again")  # fmt: skip
        if it["update_tokens"]:
            # 6 FLOP per parameter and token for a forward and a backward pass (2 + 4).
            rate = 6 * it["parameters"] * it["update_tokens"] / it["phases_s"]["update"] / 1e9
            it["update_gflops"] = rate
            line = (f"update: {it['update_rows']} rows, {it['update_tokens']} tokens "
                    f"({it['update_trained_tokens']} trained): {rate:.0f} GFLOP/s")  # fmt: skip
            if "matmul_gflops" in it:
                line += f", {rate / it['matmul_gflops']:.0%} of the measured fp32 matmul rate"
            print(line)
        print(f"peak RSS: {it['peak_rss_mib_after_setup']:.0f} MiB after setup, "
              f"{it['peak_rss_mib']:.0f} MiB after the iteration; the largest finished child process "
              f"{it['peak_rss_mib_children']:.0f} MiB")  # fmt: skip
    if "generation" in result:
        gen = result["generation"]
        print(f"\ngeneration ({args.new_tokens} new tokens, sampling): matmul "
              f"{gen['matmul_gflops']:.0f} GFLOP/s on {gen['threads']} threads, "
              f"{gen['parameters'] / 1e6:.0f}M parameters: ceiling "
              f"{gen['ceiling_tok_s']:.0f} tok/s")  # fmt: skip
        print(
            f"{'batch':>5} {'ours tok/s':>11} {'library tok/s':>14} {'ours/library':>13} {'ours/ceiling':>13}"
        )
        for r in gen["rows"]:
            print(f"{r['batch']:5} {r['ours_tok_s']:11.1f} {r['library_tok_s']:14.1f} "
                  f"{r['ours_over_library']:12.2f}x {r['ours_share_of_ceiling']:12.1%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
