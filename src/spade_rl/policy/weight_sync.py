"""Push a trainer's weights into running vLLM servers, so that they generate with the policy being trained.

    sync = make_weight_sync(ServersConfig(base_urls=(...), weight_sync="nccl"))
    sync.check(processed_logprobs=True)            # before anything runs: every server is ready for it
    metrics = sync.push(specs, named_tensors, version="step-12")   # after every optimiser step

``specs`` announce, in order, the ``(name, shape)`` of every tensor; ``named_tensors`` then yields exactly
those ``(name, tensor)`` pairs, under the Hugging Face parameter names the servers' model loader knows
(tied weights once, LoRA merged in: :mod:`spade_rl.loop.updating` builds both). Each tensor is cast to the
servers' dtype (``model_config.dtype`` of their ``/server_info``) and checked against its announcement
before it is sent.
Every push ends with ``/reset_prefix_cache`` on every server (cached keys and values belong to the old
weights) and records ``version`` as the servers' weight version (``GET /weight_info`` shows it).

Two mechanisms, both through vLLM's development-mode routes (``VLLM_SERVER_DEV_MODE=1``; vLLM 0.31):

``nccl`` (:class:`NCCLWeightSync`) is vLLM's NCCL weight-transfer engine, spoken the way TRL 1.16's
``trl.generation.vllm_client.VLLMClient`` speaks it (``trl vllm-serve`` is nothing but ``vllm serve`` with
``--weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs`` in dev mode). Once:
``GET /get_world_size`` of each server, then ``POST /init_weight_transfer_engine`` with ``{master_address,
master_port, rank_offset, world_size, packed: true}`` while the trainer joins the same rendezvous as rank 0.
Unlike TRL's client (one server), all servers join one group: server ``k``'s workers take the ranks from
``1 + sum(world sizes before k)`` (vLLM's ``rank_offset``), so one broadcast reaches every server. Per push:
``/start_weight_update`` on each, ``/update_weights`` with ``{names, dtype_names, shapes}`` on each (they
block in the NCCL receive, so they run in threads) while the trainer broadcasts the tensors packed
(``vllm.distributed.weight_transfer.packed_tensor.packed_nccl_broadcast_producer``), then
``/finish_weight_update`` with the version. The trainer needs a CUDA device of its own (NCCL refuses two ranks
on one GPU) and vllm installed; the data plane is a :class:`VLLMNCCLTransport`, replaceable by any object with
``connect(host, port, world_size)`` and ``broadcast(named_tensors)`` (the tests use
``spade_rl.testing.fake_vllm.LoopbackTransport``).

``disk`` (:class:`DiskWeightSync`) writes the tensors as safetensors shards into a fresh folder under
``sync_dir`` and has every server reload them: ``POST /collective_rpc {"method": "reload_weights", "kwargs":
{"weights_path": folder}}`` (vLLM's ``GPUModelRunner.reload_weights``), then ``/update_weight_version``. It
needs no GPU on the trainer and no NCCL between machines, only a folder every server reads at the same path;
it costs a write and a read of the whole model per step. The previous folder is removed after a push.

Nothing here can check that a server's weights really changed; tests/gpu/test_scale_out_gpu.py does, on a
GPU, by comparing generations before and after a push.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spade_rl.policy.base import PolicyError
from spade_rl.policy.config import ServersConfig
from spade_rl.policy.servers import request_json

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

PROCESSED_LOGPROBS = "processed_logprobs"
_SHARD_BYTES = 2 * 1024**3  # safetensors shards of the disk mechanism
_RESET_TRIES = 5


@dataclass(frozen=True)
class TensorSpec:
    """One tensor a push announces: its name (as the model loader knows it) and full shape."""

    name: str
    shape: tuple[int, ...]


class NCCLTransport(Protocol):
    """The data plane of the ``nccl`` mechanism: the trainer's side of the group."""

    def default_host(self) -> str: ...

    def connect(self, host: str, port: int, world_size: int) -> None: ...

    def broadcast(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None: ...

    def close(self) -> None: ...


class WeightSync:
    """What both mechanisms share: the servers, their checks, the cast-and-check stream, the cache reset."""

    method = ""

    def __init__(self, config: ServersConfig, *, api_key: str | None = None) -> None:
        self.config = config
        self.roots = config.roots
        self.api_key = api_key
        self.dtype: str | None = None  # the servers' dtype ("bfloat16"), known after check()
        self.pushes = 0

    # --- checks before anything runs --------------------------------------------------------------------

    def check(self, *, processed_logprobs: bool) -> None:
        """Every server is in development mode and serves one dtype; with ``processed_logprobs`` its
        log-probs are those of the tempered distribution. Raises ``PolicyError`` saying what to change."""
        dtypes = set()
        for root in self.roots:
            info = self._server_info(root)
            model = info.get("model_config") or {}
            dtypes.add(str(model.get("dtype", "")).removeprefix("torch."))
            mode = model.get("logprobs_mode")
            if processed_logprobs and mode != PROCESSED_LOGPROBS:
                raise PolicyError(
                    f"the server {root} reports log-probs in mode {mode!r}: the update compares against the "
                    "sampling distribution (train.old_logprobs = 'sampling'), so start it with "
                    "--logprobs-mode processed_logprobs (trl vllm-serve does), or set "
                    "train.old_logprobs = 'recompute'"
                )
            self._check_server(root, info)
        if len(dtypes) != 1 or not next(iter(dtypes)):
            raise PolicyError(
                f"the servers serve different or unknown dtypes {sorted(dtypes)}: serve one dtype"
            )
        self.dtype = dtypes.pop()

    def _check_server(self, root: str, info: dict[str, Any]) -> None:
        """Mechanism-specific checks of one server's ``vllm_config``."""

    # --- one push ------------------------------------------------------------------------------------------

    def push(
        self, specs: Sequence[TensorSpec], named_tensors: Iterable[tuple[str, torch.Tensor]], version: str
    ) -> dict[str, float]:
        """Send the weights; afterwards every server generates with them. Returns ``sync/...`` metrics."""
        if self.dtype is None:
            raise PolicyError("call check() before the first push: the servers' dtype is not known yet")
        if not specs:
            raise ValueError("a weight push needs at least one tensor")
        started = time.perf_counter()
        stream = _CheckedStream(specs, named_tensors, self.dtype)
        self._push(specs, stream, version)
        self._reset_prefix_caches()
        self.pushes += 1
        seconds = time.perf_counter() - started
        log.info(
            "pushed %d tensors (%.1f MB, %s) to %d server(s) by %s in %.2f s as version %s",
            len(specs),
            stream.bytes / 1e6,
            self.dtype,
            len(self.roots),
            self.method,
            seconds,
            version,
        )
        return {"sync/tensors": float(len(specs)), "sync/bytes": float(stream.bytes), "time/sync_s": seconds}

    def _push(self, specs: Sequence[TensorSpec], stream: _CheckedStream, version: str) -> None:
        raise NotImplementedError

    def weight_versions(self) -> list[str | None]:
        """Each server's weight version (``GET /weight_info``): the ``version`` of the last push it got."""
        return [self._get(root, "/weight_info").get("weight_version") for root in self.roots]

    def close(self) -> None:
        """Release what the mechanism holds (the NCCL group). Idempotent."""

    # --- HTTP ----------------------------------------------------------------------------------------------

    def _server_info(self, root: str) -> dict[str, Any]:
        answer = self._get(root, "/server_info?config_format=json")
        if not isinstance(answer, dict) or not isinstance(answer.get("vllm_config"), dict):
            raise PolicyError(f"{root}/server_info gave no vllm_config: is it a vLLM server?")
        return answer["vllm_config"]

    def _get(self, root: str, path: str) -> Any:
        return request_json("GET", root + path, timeout_s=self.config.timeout_s, api_key=self.api_key) or {}

    def _post(self, root: str, path: str, body: dict[str, Any] | None = None, *, long: bool = False) -> Any:
        timeout = self.config.sync_timeout_s if long else self.config.timeout_s
        return request_json("POST", root + path, body, timeout_s=timeout, api_key=self.api_key)

    def _on_every_server(self, path: str, body: dict[str, Any] | None = None, *, long: bool = False) -> None:
        """``POST path`` to every server at once (calls that block server-side must overlap)."""
        with ThreadPoolExecutor(max_workers=len(self.roots)) as pool:
            futures = [pool.submit(self._post, root, path, body, long=long) for root in self.roots]
            for future in futures:
                future.result()

    def _reset_prefix_caches(self) -> None:
        for root in self.roots:
            for attempt in range(_RESET_TRIES):
                answer = self._post(root, "/reset_prefix_cache")
                # vLLM >= 0.26 answers {"success": bool}; it fails while blocks are held by running requests.
                if not isinstance(answer, dict) or answer.get("success", True):
                    break
                time.sleep(0.2 * (attempt + 1))
            else:
                raise PolicyError(
                    f"{root} could not reset its prefix cache after {_RESET_TRIES} tries (requests still "
                    "running?): it would serve keys and values computed with the old weights"
                )


class _CheckedStream:
    """The tensors of a push, each checked against its announcement and cast to the wire dtype."""

    def __init__(self, specs: Sequence[TensorSpec], named: Iterable[tuple[str, Any]], dtype: str) -> None:
        self.specs = specs
        self.named = named
        self.dtype = dtype
        self.sent = 0
        self.bytes = 0

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        import torch

        wire = getattr(torch, self.dtype)
        for name, tensor in self.named:
            if self.sent >= len(self.specs):
                raise PolicyError(
                    f"the trainer yielded {name!r} after the {len(self.specs)} announced tensors"
                )
            spec = self.specs[self.sent]
            if name != spec.name or tuple(tensor.shape) != spec.shape:
                raise PolicyError(
                    f"tensor {self.sent} is {name!r} {tuple(tensor.shape)}, but {spec.name!r} {spec.shape} "
                    "was announced: the servers would load it into the wrong place"
                )
            tensor = tensor.detach().to(wire).contiguous()
            self.sent += 1
            self.bytes += tensor.numel() * tensor.element_size()
            yield name, tensor
        if self.sent != len(self.specs):  # before any server loads a partial set
            raise PolicyError(f"the trainer yielded {self.sent} tensors, {len(self.specs)} were announced")


class NCCLWeightSync(WeightSync):
    """vLLM's NCCL weight-transfer engine, all servers in one group (see the module docstring)."""

    method = "nccl"

    def __init__(
        self,
        config: ServersConfig,
        *,
        transport: NCCLTransport | None = None,
        api_key: str | None = None,
        device: Any = None,
    ) -> None:
        super().__init__(config, api_key=api_key)
        self.transport = transport
        self.device = device  # the trainer's CUDA device: the broadcast's source
        self.world_sizes: list[int] = []
        self.rendezvous: dict[str, Any] | None = None

    def check(self, *, processed_logprobs: bool) -> None:
        super().check(processed_logprobs=processed_logprobs)
        self.world_sizes = [int(self._get(root, "/get_world_size")["world_size"]) for root in self.roots]
        if self.transport is None:
            self.transport = VLLMNCCLTransport(self.device)

    def _check_server(self, root: str, info: dict[str, Any]) -> None:
        if info.get("weight_transfer_config") is None:
            raise PolicyError(
                f"the server {root} has no weight-transfer engine: start it with "
                '--weight-transfer-config \'{"backend": "nccl"}\' (trl vllm-serve does), or use '
                "policy.servers.weight_sync = 'disk'"
            )

    def _open(self) -> None:
        """Form the group: every server's workers and the trainer (rank 0)."""
        assert self.transport is not None
        host = self.config.nccl_host or self.transport.default_host()
        world = 1 + sum(self.world_sizes)
        offsets = [1 + sum(self.world_sizes[:k]) for k in range(len(self.roots))]
        log.info("forming the weight-sync group at %s:%d: %d ranks", host, self.config.nccl_port, world)
        pool = ThreadPoolExecutor(max_workers=len(self.roots))
        try:
            joining = [
                pool.submit(
                    self._post,
                    root,
                    "/init_weight_transfer_engine",
                    {
                        "init_info": {
                            "master_address": host,
                            "master_port": self.config.nccl_port,
                            "rank_offset": offset,
                            "world_size": world,
                            "packed": True,
                        }
                    },
                    long=True,
                )
                for root, offset in zip(self.roots, offsets, strict=True)
            ]
            self.transport.connect(host, self.config.nccl_port, world)
            for future in joining:
                future.result()  # the servers' side of the rendezvous, or its error
        finally:
            pool.shutdown(wait=False)  # on an error, do not wait out requests blocked in the rendezvous
        self.rendezvous = {
            "host": host,
            "port": self.config.nccl_port,
            "world_size": world,
            "offsets": offsets,
        }

    def _push(self, specs: Sequence[TensorSpec], stream: _CheckedStream, version: str) -> None:
        assert self.transport is not None
        if self.rendezvous is None:
            self._open()
        update_info = {
            "names": [s.name for s in specs],
            "dtype_names": [self.dtype] * len(specs),
            "shapes": [list(s.shape) for s in specs],
        }
        for root in self.roots:
            self._post(root, "/start_weight_update")
        pool = ThreadPoolExecutor(max_workers=len(self.roots))
        try:
            receiving = [
                pool.submit(self._post, root, "/update_weights", {"update_info": update_info}, long=True)
                for root in self.roots
            ]
            try:
                self.transport.broadcast(stream)
            except Exception as error:
                raise PolicyError(
                    f"the weight broadcast failed after {stream.sent} of {len(specs)} tensors ({error}); the "
                    "servers are left waiting inside the transfer: restart them"
                ) from error
            for future in receiving:
                future.result()
        finally:
            pool.shutdown(wait=False)
        for root in self.roots:
            self._post(root, "/finish_weight_update", {"weight_version": version})

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.rendezvous = None


class VLLMNCCLTransport:
    """The trainer's side of vLLM's NCCL group, through vLLM's own helpers (vllm installed; CUDA)."""

    def __init__(self, device: Any = None) -> None:
        try:
            from vllm.distributed.weight_transfer.nccl_common import trainer_init
            from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer
        except ImportError as error:
            raise PolicyError(
                "weight_sync = 'nccl' needs vllm on the trainer's machine too, for its NCCL helpers (pip "
                "install 'spade-rl[vllm]' on a CUDA machine); or use weight_sync = 'disk'"
            ) from error
        import torch

        if not torch.cuda.is_available():
            raise PolicyError(
                "weight_sync = 'nccl' needs a CUDA GPU on the trainer; use weight_sync = 'disk'"
            )
        self.device = torch.device(device) if device is not None else torch.device("cuda")
        if self.device.type != "cuda":
            raise PolicyError(
                f"weight_sync = 'nccl' broadcasts from a CUDA device; the trainer's model is on {self.device}"
            )
        self._trainer_init = trainer_init
        self._producer = packed_nccl_broadcast_producer
        self.group: Any = None

    def default_host(self) -> str:
        from vllm.utils.network_utils import get_ip

        return get_ip()

    def connect(self, host: str, port: int, world_size: int) -> None:
        import torch

        if self.device.index is not None:
            torch.cuda.set_device(self.device)  # vLLM builds the trainer's side on the current device
        self.group = self._trainer_init(
            {"master_address": host, "master_port": port, "world_size": world_size}
        )

    def broadcast(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        device = self.device

        def on_device(item: tuple[str, Any]) -> Any:
            return item[1].to(device, non_blocking=True)

        self._producer(iterator=iter(named_tensors), group=self.group, src=0, post_iter_func=on_device)

    def close(self) -> None:
        if self.group is not None:
            # As TRL's VLLMClient.close_communicator: drop the store and socket the servers would wait on.
            inner = getattr(self.group, "group", None)
            if inner is not None:
                inner.store = None
                inner.socket = None
            self.group = None


class DiskWeightSync(WeightSync):
    """Safetensors in a shared folder, reloaded by every server (see the module docstring)."""

    method = "disk"

    def __init__(self, config: ServersConfig, *, api_key: str | None = None) -> None:
        super().__init__(config, api_key=api_key)
        if config.sync_dir is None:
            raise ValueError("weight_sync = 'disk' needs servers.sync_dir")
        self.sync_dir = Path(config.sync_dir).expanduser()
        self.current: Path | None = None

    def check(self, *, processed_logprobs: bool) -> None:
        super().check(processed_logprobs=processed_logprobs)
        try:
            self.sync_dir.mkdir(parents=True, exist_ok=True)
            probe = self.sync_dir / ".spade-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            raise PolicyError(f"servers.sync_dir {self.sync_dir} is not writable here: {error}") from error

    def _push(self, specs: Sequence[TensorSpec], stream: _CheckedStream, version: str) -> None:
        folder = self.sync_dir / f"weights-{_safe(version)}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        _write_shards(stream, folder)
        self._on_every_server(
            "/collective_rpc",
            {"method": "reload_weights", "kwargs": {"weights_path": str(folder.resolve())}},
            long=True,
        )
        for root in self.roots:
            self._post(root, "/update_weight_version", {"new_version": version})
        previous, self.current = self.current, folder
        if previous is not None and previous != folder:
            shutil.rmtree(previous, ignore_errors=True)


def _write_shards(stream: Iterable[tuple[str, Any]], folder: Path) -> None:
    """The tensors as ``model-NNNNN.safetensors`` files of about ``_SHARD_BYTES`` each."""
    from safetensors.torch import save_file

    shard: dict[str, Any] = {}
    size, index = 0, 0
    for name, tensor in stream:
        shard[name] = tensor.to("cpu")
        size += tensor.numel() * tensor.element_size()
        if size >= _SHARD_BYTES:
            save_file(shard, str(folder / f"model-{index:05d}.safetensors"), metadata={"format": "pt"})
            shard, size, index = {}, 0, index + 1
    if shard:
        save_file(shard, str(folder / f"model-{index:05d}.safetensors"), metadata={"format": "pt"})


def _safe(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", version) or "weights"


def make_weight_sync(
    config: ServersConfig,
    *,
    api_key: str | None = None,
    transport: NCCLTransport | None = None,
    device: Any = None,
) -> WeightSync | None:
    """The mechanism ``config.weight_sync`` names; ``None`` for ``"none"`` (an inference-only run)."""
    if config.weight_sync == "none":
        return None
    if config.weight_sync == "nccl":
        return NCCLWeightSync(config, transport=transport, api_key=api_key, device=device)
    if config.weight_sync == "disk":
        return DiskWeightSync(config, api_key=api_key)
    raise ValueError(f"servers weight_sync {config.weight_sync!r} is not one of 'none', 'nccl', 'disk'")
