"""Generation on vLLM servers kept in step with the trainer, inference-only runs, and several processes.

The servers are loopback stand-ins for vLLM (spade_rl.policy.fake_vllm) serving copies of the tiny model;
the NCCL data plane is a loopback object. What only a GPU can check (vLLM itself, NCCL, several GPUs) is in
tests/gpu and bench/gpu_check.sh.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from fixture_envs import PARITY, SMALL, designer_output
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.loop.distributed import Processes, split_for_processes
from spade_rl.loop.run import SelfPlay
from spade_rl.loop.updating import InferenceOnlyLearner, make_learner, trainer_weights
from spade_rl.policy import FakePolicy, PolicyError, ServersConfig
from spade_rl.policy.servers import ServerPolicy
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.testing.fake_vllm import FakeVLLMServer, LoopbackTransport
from spade_rl.train import Sample

DESIGN = designer_output(PARITY)


def server_roles(config: ServersConfig, tokenizer: Any, designs: list[str]) -> dict:
    """SelfPlay's two roles here: the servers play (and are kept in step), a scripted designer writes
    ``designs`` (real token ids of the same tokenizer)."""
    return {
        "policy": ServerPolicy(config, tokenizer=tokenizer),
        "designer_policy": FakePolicy(designs, tokenizer=tokenizer),
    }


@pytest.fixture
def servers(tiny_dir: Path) -> Iterator[list[FakeVLLMServer]]:
    from spade_rl.policy.models import load_pretrained

    model, tokenizer = load_pretrained(str(tiny_dir))
    transport = LoopbackTransport()
    made = [
        FakeVLLMServer(
            TransformersPolicy(copy.deepcopy(model), tokenizer), transport=transport, timeout_s=30
        ).start()
        for _ in range(2)
    ]
    try:
        yield made
    finally:
        for server in made:
            server.stop()


def servers_overrides(servers: list[FakeVLLMServer], tiny_dir: Path, sync: str, *extra: str) -> list[str]:
    urls = ", ".join(f"'{s.base_url}'" for s in servers)
    return [
        *SMALL,
        "policy.backend='servers'",
        f"policy.model='{tiny_dir}'",
        f"policy.servers.base_urls=[{urls}]",
        f"policy.servers.weight_sync='{sync}'",
        "policy.servers.max_retries=0",
        *extra,
    ]


def same_weights(model: Any, other: Any) -> bool:
    theirs = dict(other.named_parameters())
    return all(torch.equal(p, theirs[n]) for n, p in model.named_parameters())


@pytest.mark.slow
def test_selfplay_on_two_servers_pushes_the_weights_after_every_update(
    servers: list[FakeVLLMServer], tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = servers[0].transport
    monkeypatch.setattr("spade_rl.policy.weight_sync.VLLMNCCLTransport", lambda device=None: transport)
    # Up to 12 iterations, stopping after the second update: an iteration trains only when one of its 3
    # groups of 4 plays has reward spread (measured here: 1 group in 3 has it, so about 1 iteration in 3
    # trains nothing), and the servers' sampling depends on which server answers which request, so SMALL's
    # two iterations trained nothing once in CI.
    config = load_config(None, servers_overrides(servers, tiny_dir, "nccl", "loop.iterations=12"))
    roles = server_roles(config.policy.servers, servers[0].policy.tokenizer, [DESIGN] * 24)
    with SelfPlay(config, tmp_path / "run", **roles) as run:
        trainer = run.learner.learner.raw_model
        assert not any(p is q for p in trainer.parameters() for q in servers[0].policy.model.parameters())
        assert [s.routes().count("/finish_weight_update") for s in servers] == [1, 1]  # pushed at start
        metrics: list[dict] = []
        for m in run.iterations():
            metrics.append(m)
            if sum("train/loss" in x for x in metrics) == 2:
                break
        updates = [m for m in metrics if "train/loss" in m]
        assert updates, f"no iteration trained: the test needs an update; iterations: {metrics}"
        for m in updates:
            assert m["sync/tensors"] == len(list(trainer.parameters())) and m["time/sync_s"] > 0
        for server in servers:
            assert same_weights(trainer, server.policy.model)  # the servers hold the trained weights
            assert server.routes().count("/init_weight_transfer_engine") == 1
            assert server.routes().count("/finish_weight_update") == 1 + len(updates)
            assert server.weight_version == f"step-{run.learner.steps}"
            assert server.prefix_cache_resets == 1 + len(updates)
        plays = sum(route == "/v1/completions" for s in servers for route, _ in s.calls)
        assert plays > 0 and all(any(r == "/v1/completions" for r, _ in s.calls) for s in servers)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["policy"]["backend"] == "servers" and saved["policy"]["servers"]["weight_sync"] == "nccl"


@pytest.mark.slow
def test_inference_only_run_says_so_and_never_updates(
    servers: list[FakeVLLMServer], tiny_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(None, servers_overrides(servers, tiny_dir, "none", "loop.iterations=1"))
    roles = server_roles(config.policy.servers, servers[0].policy.tokenizer, [DESIGN] * 2)
    before = {n: p.detach().clone() for n, p in servers[0].policy.model.named_parameters()}
    with caplog.at_level(logging.WARNING), SelfPlay(config, tmp_path / "run", **roles) as run:
        assert isinstance(run.learner, InferenceOnlyLearner)
        [metrics] = list(run.iterations())
    assert any(
        "INFERENCE-ONLY RUN" in r.getMessage() and "weight_sync = 'none'" in r.getMessage()
        for r in caplog.records
    )
    assert metrics["train/skipped"] == 1.0
    assert metrics.get("train/inference_only", 1.0) == 1.0 and "train/loss" not in metrics
    for server in servers:
        # the policy read the server's capacity (/server_info); no weight route: nothing was pushed
        assert server.routes() == ["/server_info"]
    assert all(torch.equal(p, before[n]) for n, p in servers[0].policy.model.named_parameters())
    checkpoint = tmp_path / "run" / "checkpoints" / "iter-0001" / "updater"
    assert json.loads((checkpoint / "inference_only.json").read_text())["inference_only"] is True
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert line["train/skipped"] == 1.0


def test_a_run_whose_context_a_server_cannot_hold_is_refused_at_start(
    servers: list[FakeVLLMServer], tiny_dir: Path, tmp_path: Path
) -> None:
    # The stand-ins serve 4096 positions: an episode of up to 8192 tokens would fail mid-run with HTTP 400.
    overrides = servers_overrides(servers, tiny_dir, "none", "rollout.max_context_tokens=8192")
    config = load_config(None, overrides)
    roles = server_roles(config.policy.servers, servers[0].policy.tokenizer, [DESIGN])
    with pytest.raises(
        PolicyError, match=r"max_model_len 4096, shorter than rollout.max_context_tokens = 8192"
    ):
        SelfPlay(config, tmp_path / "run", **roles)
    assert not any(route == "/v1/completions" for s in servers for route, _ in s.calls)  # nothing played


def test_an_inference_only_learner_refuses_a_training_checkpoint(tmp_path: Path) -> None:
    learner = InferenceOnlyLearner("test")
    assert learner.step([]) == {"train/skipped": 1.0, "train/inference_only": 1.0}
    learner.load(learner.save(tmp_path / "ok"))
    (tmp_path / "trained").mkdir()
    with pytest.raises(
        ConfigError, match="checkpoint of a training run; it cannot be resumed as inference-only"
    ):
        learner.load(tmp_path / "trained")


def test_backends_that_cannot_train_are_refused_with_what_to_use() -> None:
    for backend, message in [
        ("openai", "OpenAI chat endpoint cannot continue the rollouts' token sequences"),
        ("vllm", "in-process vLLM engine has no weight sync here; run `vllm serve`"),
    ]:
        config = load_config(None, [f"policy.backend='{backend}'", "warmup.designs=0"])
        with pytest.raises(ConfigError, match=message):
            make_learner(config, FakePolicy(["x"]))


def test_processes_from_the_launch_environment() -> None:
    assert Processes.from_env({}) == Processes()
    env = {"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0", "ACCELERATE_USE_FSDP": "true"}
    assert Processes.from_env(env) == Processes(world_size=4, rank=2, local_rank=0, sharding="fsdp")
    zero = {"WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}
    assert Processes.from_env(zero).deepspeed and Processes.from_env(zero).sharding == "none"
    assert Processes.from_env({"WORLD_SIZE": "2", "ACCELERATE_USE_CPU": "True"}).cpu


def test_one_process_that_sees_several_gpus_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Never run on a GPU here: torch.cuda's answers are stand-ins (issue 38, item 4).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    config = load_config(None, ["warmup.designs=0", "policy.transformers.device='cuda'"])
    with pytest.raises(ConfigError) as refused:
        Processes().check(config)
    message = str(refused.value)
    assert "sees 4 GPUs (CUDA_VISIBLE_DEVICES=0,1,2,3)" in message and "leaving 3 idle" in message
    assert "accelerate launch --config_file configs/accelerate/ddp.yaml" in message
    assert "CUDA_VISIBLE_DEVICES=0 spade-rl run" in message and "'cuda:0'" in message
    Processes().check(
        replace(
            config,
            policy=replace(config.policy, transformers=replace(config.policy.transformers, device="cuda:1")),
        )
    )  # one GPU named: the user's choice
    with caplog.at_level(logging.WARNING):
        Processes(world_size=4).check(config)  # one process per GPU: each uses its own
    assert "only the main one generates" in caplog.text and "the other 3 GPUs wait" in caplog.text
    inference_only = load_config(None, ["policy.backend='servers'", "warmup.designs=0"])
    Processes().check(inference_only)  # no trainer model: no GPU used here
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    Processes().check(config)  # one GPU visible


def test_what_each_sharding_allows_is_checked_before_anything_runs() -> None:
    transformers = load_config(None, ["warmup.designs=0"])  # (the warm-up runs in one process)
    servers = load_config(
        None,
        [
            "policy.backend='servers'",
            "policy.servers.weight_sync='disk'",
            "policy.servers.sync_dir='/tmp/x'",
            "warmup.designs=0",
            "train.offload_optimizer=false",
        ],
    )
    inference_only = load_config(None, ["policy.backend='servers'", "warmup.designs=0"])
    Processes().check(inference_only)  # one process: anything goes
    Processes(world_size=2, sharding="none").check(transformers)  # DDP: generate in process
    Processes(world_size=2, sharding="fsdp").check(servers)
    with pytest.raises(ConfigError, match=r"offload_optimizer = false under FSDP"):
        Processes(world_size=2, sharding="fsdp").check(
            replace(servers, train=replace(servers.train, offload_optimizer=True))
        )
    with pytest.raises(ConfigError, match=r"FSDP shards the weights.*policy.backend = 'servers'"):
        Processes(world_size=2, sharding="fsdp").check(transformers)
    with pytest.raises(ConfigError, match=r"DeepSpeed launches are not supported.*FSDP2.*DDP"):
        Processes(world_size=2, deepspeed=True).check(servers)
    with pytest.raises(ConfigError, match=r"inference-only run .* trains nothing: run it without accelerate"):
        Processes(world_size=2).check(inference_only)


def test_update_capacity_is_per_process_under_accelerate(monkeypatch: pytest.MonkeyPatch) -> None:
    # every group in one step: 11 blocks of 8 rows; one process holds 48
    wide = ["loop.envs_per_iteration=10", "warmup.designs=0", "loop.groups_per_step=0"]
    wide.append("train.gradient_accumulation_steps=24")
    with pytest.raises(ConfigError, match=r"48 rows per process, but an iteration can bring 88 to each of 1"):
        load_config(None, wide)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert load_config(None, wide).loop.envs_per_iteration == 10  # 6 blocks each
    with pytest.raises(ConfigError, match=r"warm-up trains the model of a single process"):
        load_config(None, ["warmup.designs=8"])
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ConfigError, match=r"designer\.policy is never trained: its servers take no weights"):
        load_config(
            None,
            [
                "designer.source='frozen'",
                "designer.policy.backend='servers'",
                "designer.policy.servers.weight_sync='disk'",
                "designer.policy.servers.sync_dir='/tmp/x'",
            ],
        )


def _sample(group: int, role: str, advantage: float) -> Sample:
    return Sample(role, (1, 2), (3, 4), (1, 1), (-0.5, -0.5), advantage, group)


def test_samples_are_dealt_to_processes_in_whole_groups() -> None:
    samples = [_sample(g, "agent" if g else "designer", a) for g in range(3) for a in (1.0, -1.0)]
    shares = split_for_processes(samples, 2)
    assert [[s.group for s in share] for share in shares] == [[0, 0, 2, 2], [1, 1]]
    assert shares[0] == samples[:2] + samples[4:] and shares[1] == samples[2:4]  # every sample, once
    alone = split_for_processes(samples[:2], 3)
    assert alone == [samples[:2], [], []]  # no group left: the learner still steps with the others
    with pytest.raises(ValueError, match="0 processes"):
        split_for_processes(samples, 0)


def test_trainer_weights_are_the_models_parameters_once_each(tiny_dir: Path) -> None:
    from spade_rl.policy.models import load_pretrained
    from spade_rl.train import Learner, TrainConfig

    model, tokenizer = load_pretrained(str(tiny_dir))
    learner = Learner(model, tokenizer, TrainConfig(group_size=2, per_device_train_batch_size=2))
    with trainer_weights(learner) as (specs, tensors):
        named = list(tensors)
    expected = list(model.named_parameters())
    assert [s.name for s in specs] == [n for n, _ in expected] == [n for n, _ in named]
    assert "lm_head.weight" not in [s.name for s in specs]  # tied to the embedding: sent once
    assert all(tuple(t.shape) == s.shape for (_, t), s in zip(named, specs, strict=True))
    learner.close()


def test_trainer_weights_merge_lora_for_the_duration(tiny_dir: Path) -> None:
    from spade_rl.policy.models import load_pretrained
    from spade_rl.train import Learner, TrainConfig

    model, tokenizer = load_pretrained(str(tiny_dir))
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    learner = Learner(
        model, tokenizer, TrainConfig(group_size=2, per_device_train_batch_size=2, use_lora=True)
    )
    peft_model = learner.model
    with torch.no_grad():  # a non-zero adapter, as after some training
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    probe = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = peft_model(input_ids=probe).logits
    with trainer_weights(learner) as (specs, tensors):
        named = dict((n, t.detach().clone()) for n, t in tensors)
    assert [s.name for s in specs] == list(base) and list(named) == list(base)  # base names, no lora_*
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(named[q], base[q])  # the adapter was merged in
    assert torch.equal(named["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    with torch.no_grad():
        torch.testing.assert_close(peft_model(input_ids=probe).logits, before)  # and unmerged after
    learner.close()


@pytest.mark.slow
def test_spade_rl_run_with_two_cpu_processes(tiny_dir: Path, tmp_path: Path) -> None:
    """DDP over gloo: the main process plays, both processes train their share, both write checkpoints.

    Launched by torchrun, the launcher `accelerate launch` runs for GPUs, with the variable accelerate sets
    for CPUs (its own `--cpu --num_processes 2` starts several processes only through MPI)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
        "-m", "spade_rl", "run", "--out", str(run_dir),
        f"policy.model='{tiny_dir}'",
        "loop.iterations=2",  # the second plays with each process's optimiser state parked in its own file
        "loop.envs_per_iteration=2",
        "loop.drop_zero_signal_groups=false",  # every group trains, so that the iteration surely updates
        "warmup.designs=0",  # the warm-up runs in one process only
        "design.max_new_tokens=32",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "loop.plays_per_env=4",
        "loop.hint_plays_per_env=4",
        "loop.groups_per_step=0",  # one optimiser step for the whole iteration
        "train.group_size=4",
        "train.per_device_train_batch_size=1",
        "train.gradient_accumulation_steps=8",  # 8 rows per process: 2 of the 3 groups fit in each
        "train.learning_rate=1e-3",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first, metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert first["train/processes"] == 2.0 and first["train/step"] == 1.0, first
    assert metrics["train/processes"] == 2.0 and metrics["train/step"] == 2.0, metrics
    assert not list(run_dir.glob("optimizer-state*"))  # read back by the update, removed
    checkpoint = run_dir / "checkpoints" / "iter-0002" / "updater"
    assert (checkpoint / "rng_state.rank0.pth").is_file() and (checkpoint / "rng_state.rank1.pth").is_file()
    assert (checkpoint / "optimizer.rank0.pt").is_file() and (checkpoint / "optimizer.rank1.pt").is_file()
    assert (checkpoint / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize(("name", "sharding"), [("ddp", "none"), ("fsdp", "fsdp")])
def test_the_accelerate_configs_launch_what_the_loop_detects(name: str, sharding: str) -> None:
    """The environment `accelerate launch --config_file configs/accelerate/<name>.yaml` gives each process."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    root = Path(__file__).resolve().parents[2] / "configs" / "accelerate"
    parsed = launch_command_parser().parse_args(
        ["--config_file", str(root / f"{name}.yaml"), "--num_processes", "2", "-m", "spade_rl", "run"]
    )
    args, _, _ = _validate_launch_command(parsed)
    env = prepare_multi_gpu_env(args)
    processes = Processes.from_env({**env, "WORLD_SIZE": "2", "RANK": "1"})
    assert processes.sharding == sharding and processes.distributed and not processes.main
    if name == "fsdp":
        assert env["FSDP_VERSION"] == "2"  # FSDP1 is refused by trainer_weights


def test_selfplay_refuses_several_visible_gpus_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # stand-ins: no GPU here
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    config = load_config(None, ["warmup.designs=0", "policy.transformers.device='auto'"])
    with pytest.raises(ConfigError, match="this process sees 2 GPUs"):
        SelfPlay(config, tmp_path / "run", policy=FakePolicy(["x"]))
    assert not (tmp_path / "run").exists()  # refused before the run directory, the policy or the warm-up
