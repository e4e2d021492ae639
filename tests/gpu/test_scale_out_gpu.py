"""The paths that only a GPU exercises: a real vLLM server, its weight sync (disk; NCCL with two GPUs), and
`spade-rl run` under accelerate on two GPUs (DDP; FSDP2 with generation on a vLLM server).

A weight push is checked by what the server then computes: with the final norm's weight zeroed, every
hidden state is zero, so are the logits, and every sampled token has log-probability -log(vocabulary)
exactly; pushing the real weights back makes them informative again. Run by bench/gpu_check.sh.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from gpu_helpers import VLLMServer, free_port, needs_two_gpus, needs_vllm

from spade_rl.policy import SamplingSettings, ServersConfig
from spade_rl.policy.servers import ServerPolicy
from spade_rl.policy.weight_sync import WeightSync, make_weight_sync

CHAT = [{"role": "user", "content": "Name three colours and say why you like them."}]
ROOT = Path(__file__).resolve().parents[2]


def push_all(sync: WeightSync, model: Any, version: str) -> dict[str, float]:
    from spade_rl.policy.weight_sync import TensorSpec

    named = list(model.named_parameters())
    return sync.push(
        [TensorSpec(n, tuple(p.shape)) for n, p in named], ((n, p.data) for n, p in named), version
    )


def sampled_logprobs(policy: ServerPolicy) -> list[float]:
    [g] = policy.generate([CHAT], SamplingSettings(max_new_tokens=12, temperature=1.0, seed=5))
    assert g.completion_logprobs is not None and len(g.completion_logprobs) == len(g.completion_token_ids)
    return list(g.completion_logprobs)


def check_push_reaches_the_server(sync: WeightSync, model: Any, policy: ServerPolicy) -> None:
    uniform = -math.log(model.lm_head.out_features)
    real = model.model.norm.weight.detach().clone()
    with torch.no_grad():
        model.model.norm.weight.zero_()
    metrics = push_all(sync, model, "step-1")
    assert metrics["sync/tensors"] == len(list(model.parameters())) and sync.weight_versions() == ["step-1"]
    assert all(abs(lp - uniform) < 0.05 for lp in sampled_logprobs(policy)), "the zeroed norm did not arrive"
    with torch.no_grad():
        model.model.norm.weight.copy_(real)
    push_all(sync, model, "step-2")
    assert max(sampled_logprobs(policy)) > uniform + 2.0, "the real weights did not come back"
    assert sync.weight_versions() == ["step-2"]


@needs_vllm
def test_server_policy_on_a_real_vllm_server(vllm_server: VLLMServer, model_dir: Path) -> None:
    from spade_rl.policy.models import load_pretrained

    policy = ServerPolicy(ServersConfig(base_urls=(f"{vllm_server.root}/v1",)), model=str(model_dir))
    assert policy.served_model == "gpu-test" and policy.max_model_len == 2048
    settings = SamplingSettings(max_new_tokens=16, temperature=1.0, seed=3, n=2)
    generations = policy.generate([CHAT, CHAT], settings)
    assert (
        len(generations) == 4 and generations[0].completion_token_ids != generations[1].completion_token_ids
    )
    again = policy.generate([CHAT, CHAT], settings)
    assert [g.completion_token_ids for g in again] == [g.completion_token_ids for g in generations]  # seeded
    model, _ = load_pretrained(str(model_dir), device="cuda", dtype="bfloat16")
    diffs = []
    for g in generations:
        assert g.prompt_token_ids == tuple(policy.render(CHAT))
        ids = torch.tensor([list(g.prompt_token_ids) + list(g.completion_token_ids)], device="cuda")
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()[0, len(g.prompt_token_ids) - 1 : -1]
        local = torch.log_softmax(logits, -1).gather(1, ids[0, len(g.prompt_token_ids) :, None])[:, 0]
        diffs += [abs(a - b) for a, b in zip(local.tolist(), g.completion_logprobs, strict=True)]
    assert statistics.median(diffs) < 0.1, (
        f"vLLM's log-probs differ from transformers' ({statistics.median(diffs)})"
    )
    policy.close()


@needs_vllm
def test_disk_sync_into_a_real_vllm_server(vllm_server: VLLMServer, model_dir: Path, tmp_path: Path) -> None:
    from spade_rl.policy.models import load_pretrained

    model, _ = load_pretrained(str(model_dir), device="cuda", dtype="float32")
    config = ServersConfig(base_urls=(vllm_server.root,), weight_sync="disk", sync_dir=str(tmp_path))
    sync = make_weight_sync(config)
    sync.check(processed_logprobs=True)
    assert sync.dtype == "bfloat16"
    check_push_reaches_the_server(sync, model, ServerPolicy(config, model=str(model_dir)))


@needs_vllm
@needs_two_gpus
def test_nccl_sync_into_a_real_vllm_server_on_another_gpu(model_dir: Path, tmp_path: Path) -> None:
    from spade_rl.policy.models import load_pretrained

    server = VLLMServer(model_dir, tmp_path / "server.log", gpu=1)
    try:
        server.wait()
        model, _ = load_pretrained(str(model_dir), device="cuda:0", dtype="float32")
        config = ServersConfig(
            base_urls=(server.root,), weight_sync="nccl", nccl_host="127.0.0.1", nccl_port=free_port()
        )
        sync = make_weight_sync(config, device=torch.device("cuda:0"))
        sync.check(processed_logprobs=True)
        check_push_reaches_the_server(sync, model, ServerPolicy(config, model=str(model_dir)))
        sync.close()
    finally:
        server.stop()


def launch(config_file: str, run_dir: Path, *overrides: str) -> list[dict]:
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / config_file),
        "--num_processes", "2", "--main_process_port", str(free_port()),
        "-m", "spade_rl", "run", "--out", str(run_dir),
        "loop.iterations=1", "loop.drop_zero_signal_groups=false", "design.max_new_tokens=64",
        "loop.designs_per_iteration=2", "loop.envs_per_iteration=2", "warmup.designs=0",
        "rollout.max_turns=2", "rollout.max_new_tokens=16",
        "train.per_device_train_batch_size=1", "train.gradient_accumulation_steps=8",
        *overrides,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env={**os.environ})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@needs_two_gpus
def test_spade_rl_run_with_ddp_on_two_gpus(model_dir: Path, tmp_path: Path) -> None:
    [metrics] = launch("configs/accelerate/ddp.yaml", tmp_path / "run", f"policy.model='{model_dir}'")
    assert metrics["train/processes"] == 2.0 and metrics["train/step"] == 1.0


@needs_vllm
@needs_two_gpus
def test_spade_rl_run_with_fsdp2_and_a_vllm_server(
    vllm_server: VLLMServer, model_dir: Path, tmp_path: Path
) -> None:
    [metrics] = launch(
        "configs/accelerate/fsdp.yaml",
        tmp_path / "run",
        f"policy.model='{model_dir}'",
        "policy.backend='servers'",
        f"policy.servers.base_urls=['{vllm_server.root}/v1']",
        "policy.servers.weight_sync='disk'",
        f"policy.servers.sync_dir='{tmp_path / 'sync'}'",
        "policy.transformers.dtype='float32'",
    )
    assert metrics["train/processes"] == 2.0 and metrics["sync/tensors"] > 0
    versions = make_weight_sync(
        ServersConfig(base_urls=(vllm_server.root,), weight_sync="disk", sync_dir=str(tmp_path))
    ).weight_versions()
    assert versions == ["step-1"]
