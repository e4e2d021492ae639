"""Weight sync into vLLM servers, against loopback stand-ins that implement vLLM 0.31's routes (fake_vllm).

What is checked here is the protocol: which routes, in which order, with which names, dtypes and shapes,
the rank offsets of one NCCL group over several servers, the cast to the servers' dtype, the prefix-cache
reset, and that a server's model really holds the trainer's weights afterwards. The NCCL data plane is a
loopback object here; the real one (vLLM's packed broadcast) only runs on a GPU: tests/gpu.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from spade_rl.policy import PolicyError, SamplingSettings, ServersConfig
from spade_rl.policy.servers import ServerPolicy
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.policy.weight_sync import (
    DiskWeightSync,
    NCCLWeightSync,
    TensorSpec,
    VLLMNCCLTransport,
    make_weight_sync,
)
from spade_rl.testing.fake_vllm import FakeVLLMServer, LoopbackTransport

CHAT = [{"role": "user", "content": "Say a word."}]
GREEDY = SamplingSettings(max_new_tokens=8, temperature=0)
NCCL_ROUTES = [
    "/init_weight_transfer_engine",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
]


@pytest.fixture
def trainer(tiny: tuple[Any, Any]) -> Any:
    """The trainer's copy: the tiny model with every weight moved, so that a missed sync shows."""
    model = copy.deepcopy(tiny[0])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return model


def weights(model: Any) -> tuple[list[TensorSpec], Iterator[tuple[str, Any]]]:
    named = list(model.named_parameters())
    return [TensorSpec(n, tuple(p.shape)) for n, p in named], ((n, p.data) for n, p in named)


@pytest.fixture
def servers(tiny: tuple[Any, Any], request: pytest.FixtureRequest) -> Iterator[list[FakeVLLMServer]]:
    options = getattr(request, "param", {})
    transport = LoopbackTransport()
    made = [
        FakeVLLMServer(
            TransformersPolicy(copy.deepcopy(tiny[0]), tiny[1]),
            transport=transport,
            world_size=1 + k,  # the second server has two workers (tensor parallel 2)
            timeout_s=20,
            **options,
        ).start()
        for k in range(2)
    ]
    try:
        yield made
    finally:
        for server in made:
            server.stop()


def config_for(servers: list[FakeVLLMServer], **options: Any) -> ServersConfig:
    return ServersConfig(
        base_urls=tuple(s.base_url for s in servers), max_retries=0, sync_timeout_s=20, **options
    )


def same_weights(model: Any, other: Any) -> bool:
    theirs = dict(other.named_parameters())
    return all(torch.equal(p, theirs[n]) for n, p in model.named_parameters())


def test_nccl_protocol_one_group_over_two_servers(
    servers: list[FakeVLLMServer], trainer: Any, tiny: tuple[Any, Any]
) -> None:
    transport = servers[0].transport
    sync = make_weight_sync(config_for(servers, weight_sync="nccl", nccl_port=29555), transport=transport)
    assert isinstance(sync, NCCLWeightSync)
    sync.check(processed_logprobs=True)
    assert sync.world_sizes == [1, 2] and sync.dtype == "float32"
    policy = ServerPolicy(config_for(servers, concurrency=2), tokenizer=tiny[1])  # no /server_info of its own
    local = TransformersPolicy(trainer, tiny[1])
    assert (
        policy.generate([CHAT], GREEDY)[0].completion_token_ids
        != local.generate([CHAT], GREEDY)[0].completion_token_ids
    )

    specs, tensors = weights(trainer)
    metrics = sync.push(specs, tensors, version="step-1")

    assert transport.rendezvous == {"master_address": "127.0.0.1", "master_port": 29555, "world_size": 4}
    assert [s.init_info["rank_offset"] for s in servers] == [1, 2]  # trainer 0, server A 1, server B 2-3
    assert all(s.init_info["world_size"] == 4 and s.init_info["packed"] is True for s in servers)
    for server in servers:
        routes = server.routes()
        assert routes[:2] == ["/server_info", "/get_world_size"]
        assert routes[2:] == [*NCCL_ROUTES, "/reset_prefix_cache"]  # the cache goes after the new weights
        update = next(body for route, body in server.calls if route == "/update_weights")["update_info"]
        assert update["names"] == [s.name for s in specs] and "lm_head.weight" not in update["names"]  # tied
        assert update["dtype_names"] == ["float32"] * len(specs)
        assert update["shapes"] == [list(s.shape) for s in specs]
        assert next(b for r, b in server.calls if r == "/finish_weight_update") == {
            "weight_version": "step-1"
        }
        assert same_weights(trainer, server.policy.model) and server.prefix_cache_resets == 1
    [broadcast] = transport.broadcasts  # one broadcast reaches both servers
    assert broadcast == [(s.name, "float32", s.shape) for s in specs]
    assert metrics["sync/tensors"] == len(specs)
    assert metrics["sync/bytes"] == sum(p.numel() * 4 for p in trainer.parameters())
    assert sync.weight_versions() == ["step-1", "step-1"]
    # the servers now generate what the trainer's model generates
    assert (
        policy.generate([CHAT], GREEDY)[0].completion_token_ids
        == local.generate([CHAT], GREEDY)[0].completion_token_ids
    )

    with torch.no_grad():
        trainer.model.norm.weight.mul_(0.5)
    sync.push(*weights(trainer), version="step-2")
    routes = servers[1].routes()
    assert routes.count("/init_weight_transfer_engine") == 1  # the group is formed once
    assert routes[-4:] == [*NCCL_ROUTES[1:], "/reset_prefix_cache"]
    assert same_weights(trainer, servers[1].policy.model) and sync.weight_versions() == ["step-2", "step-2"]
    sync.close()


@pytest.mark.parametrize("servers", [{"dtype": "bfloat16"}], indirect=True)
def test_tensors_are_cast_to_the_servers_dtype(servers: list[FakeVLLMServer], trainer: Any) -> None:
    transport = servers[0].transport
    sync = make_weight_sync(config_for(servers, weight_sync="nccl"), transport=transport)
    sync.check(processed_logprobs=True)
    specs, tensors = weights(trainer)
    metrics = sync.push(specs, tensors, version="step-7")
    update = next(b for r, b in servers[0].calls if r == "/update_weights")["update_info"]
    assert set(update["dtype_names"]) == {"bfloat16"}
    assert {dtype for _, dtype, _ in transport.broadcasts[0]} == {"bfloat16"}
    assert metrics["sync/bytes"] == sum(p.numel() * 2 for p in trainer.parameters())
    expected = trainer.model.norm.weight.to(torch.bfloat16).float()
    assert torch.equal(servers[0].policy.model.model.norm.weight, expected)


def test_disk_sync_writes_safetensors_and_every_server_reloads(
    servers: list[FakeVLLMServer], trainer: Any, tiny: tuple[Any, Any], tmp_path: Path
) -> None:
    sync = make_weight_sync(config_for(servers, weight_sync="disk", sync_dir=str(tmp_path / "sync")))
    assert isinstance(sync, DiskWeightSync)
    sync.check(processed_logprobs=True)
    specs, tensors = weights(trainer)
    sync.push(specs, tensors, version="step-1")
    first = tmp_path / "sync" / "weights-step-1"
    assert sorted(p.name for p in first.iterdir()) == ["model-00000.safetensors"]
    for server in servers:
        assert server.routes() == [
            "/server_info",
            "/collective_rpc",
            "/update_weight_version",
            "/reset_prefix_cache",
        ]
        rpc = next(b for r, b in server.calls if r == "/collective_rpc")
        assert rpc == {"method": "reload_weights", "kwargs": {"weights_path": str(first.resolve())}}
        assert same_weights(trainer, server.policy.model)
    assert sync.weight_versions() == ["step-1", "step-1"]
    sync.push(*weights(trainer), version="step-2")
    assert not first.exists() and (tmp_path / "sync" / "weights-step-2").is_dir()  # the old one is removed


@pytest.mark.parametrize("servers", [{"dev_mode": False}], indirect=True)
def test_servers_outside_development_mode_are_refused(servers: list[FakeVLLMServer], tmp_path: Path) -> None:
    sync = make_weight_sync(config_for(servers, weight_sync="disk", sync_dir=str(tmp_path)))
    with pytest.raises(PolicyError, match=r"HTTP 404.*VLLM_SERVER_DEV_MODE=1, or with `trl vllm-serve`"):
        sync.check(processed_logprobs=False)


@pytest.mark.parametrize("servers", [{"weight_transfer": False}], indirect=True)
def test_nccl_needs_a_weight_transfer_engine(servers: list[FakeVLLMServer]) -> None:
    sync = make_weight_sync(config_for(servers, weight_sync="nccl"), transport=LoopbackTransport())
    with pytest.raises(
        PolicyError, match=r"no weight-transfer engine: start it with --weight-transfer-config"
    ):
        sync.check(processed_logprobs=False)


@pytest.mark.parametrize("servers", [{"logprobs_mode": "raw_logprobs"}], indirect=True)
def test_raw_logprobs_are_refused_when_the_update_compares_against_them(
    servers: list[FakeVLLMServer], tmp_path: Path
) -> None:
    sync = make_weight_sync(config_for(servers, weight_sync="disk", sync_dir=str(tmp_path)))
    with pytest.raises(PolicyError, match=r"mode 'raw_logprobs'.*--logprobs-mode processed_logprobs"):
        sync.check(processed_logprobs=True)
    sync.check(processed_logprobs=False)  # train.old_logprobs = "recompute" does not use them


def test_servers_of_different_dtypes_are_refused(servers: list[FakeVLLMServer], tmp_path: Path) -> None:
    servers[1].dtype = "bfloat16"
    sync = make_weight_sync(config_for(servers, weight_sync="disk", sync_dir=str(tmp_path)))
    with pytest.raises(PolicyError, match=r"different or unknown dtypes \['bfloat16', 'float32'\]"):
        sync.check(processed_logprobs=False)


def test_a_stream_that_differs_from_its_announcement_stops_the_push(
    servers: list[FakeVLLMServer], trainer: Any, tmp_path: Path
) -> None:
    sync = make_weight_sync(config_for(servers, weight_sync="disk", sync_dir=str(tmp_path)))
    sync.check(processed_logprobs=False)
    specs, _ = weights(trainer)
    swapped = list(reversed(list(trainer.named_parameters())))
    with pytest.raises(PolicyError, match=r"but 'model.embed_tokens.weight' .* was announced"):
        sync.push(specs, ((n, p.data) for n, p in swapped), version="step-1")
    short = list(trainer.named_parameters())[:-1]
    with pytest.raises(PolicyError, match=rf"yielded {len(specs) - 1} tensors, {len(specs)} were announced"):
        sync.push(specs, ((n, p.data) for n, p in short), version="step-1")
    assert all("/collective_rpc" not in s.routes() for s in servers)  # nothing was loaded from a bad stream
    with pytest.raises(PolicyError, match="call check"):
        make_weight_sync(config_for(servers, weight_sync="disk", sync_dir=str(tmp_path))).push(
            specs, iter(()), version="x"
        )


def test_make_weight_sync_none_and_the_nccl_transport_needs_vllm() -> None:
    assert make_weight_sync(ServersConfig()) is None
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(
            PolicyError, match=r"needs vllm on the trainer's machine too.*weight_sync = 'disk'"
        ):
            VLLMNCCLTransport()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_urls": ()}, "non-empty list of URLs"),
        ({"base_urls": "http://a:8000/v1"}, "non-empty list of URLs"),
        ({"base_urls": ("a:8000",)}, "must start with http:// or https://"),
        ({"base_urls": ("http://a:8000/v1", "http://a:8000")}, "name one server twice"),
        ({"weight_sync": "ipc"}, r"weight_sync 'ipc' is not allowed; allowed: \['none', 'nccl', 'disk'\]"),
        ({"weight_sync": "disk"}, "needs sync_dir"),
        ({"nccl_port": 70000}, "port number"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
        ({"served_model": " "}, "served_model must be a non-empty string"),
    ],
)
def test_servers_config_is_validated(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServersConfig(**options)


def test_roots_accept_urls_with_or_without_v1() -> None:
    config = ServersConfig(base_urls=("http://a:8000/v1/", "https://b:9000"))
    assert config.roots == ("http://a:8000", "https://b:9000")
