"""Several processes under ``accelerate launch``: the main one runs the loop, every one trains its share.

    accelerate launch --config_file configs/accelerate/ddp.yaml -m spade_rl run -c configs/qwen3-gpu.toml

**Design.** Only the main process (rank 0) designs, validates, plays, rewards and archives: one archive file,
one sandbox pool (or Ray executor), one stream of random choices, exactly as in a single-process run; it
generates with its policy (in process on its GPU, or on vLLM servers). The other processes (followers,
:func:`run_follower`) hold nothing but the trainer: their own copy of ``policy.model`` on their own device,
wrapped by TRL / accelerate like the main one. At every update the main process cuts the samples into one
share per process, whole GRPO groups dealt round-robin (:func:`split_for_processes`; a process with no group
gets one filler row, which trains nothing), and every process makes the same optimiser step on its share:
DDP averages the gradients, FSDP / DeepSpeed ZeRO shard what they shard. TRL's ``GRPOTrainer`` already works
this way (each process's ``rollout_func`` returns its own rows, rewards are gathered to centre groups), so
a group must not straddle two processes, which the round-robin of whole groups guarantees.

Commands (update, save, load, close) and the shares travel from the main process over a gloo group of their
own with a week-long timeout (:class:`CommandChannel`): the followers wait there while the main process
plays, which can outlast NCCL's default watchdog of ten minutes. A checkpoint is written by every process
(the model by the main one; RNG states per process; FSDP / ZeRO states as they shard them), so on several
machines the run directory must be on a shared file system. A follower that fails, or a main process that
dies, ends the whole launch (torchrun stops the others).

**What each strategy allows.** DDP and ZeRO-2 keep whole weights on every process: the main one can
generate in process (``backend = "transformers"``). FSDP and ZeRO-3 shard the weights, so that a forward
pass is a collective every process must join; generation then has to happen on vLLM servers
(``backend = "servers"`` with ``weight_sync = "nccl"`` or ``"disk"``), and each weight push gathers the
tensors on every process (:func:`spade_rl.loop.updating.trainer_weights`). :meth:`Processes.check` refuses
the other combinations before anything runs. ``train.per_device_train_batch_size *
train.gradient_accumulation_steps`` are the rows of one process: the loop's capacity is that times the
number of processes (``RunConfig.check_launch`` checks it for the launch's processes).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_rl.loop.config import ConfigError, RunConfig

if TYPE_CHECKING:
    from spade_rl.train import Sample

log = logging.getLogger(__name__)

SHARDINGS = ("none", "fsdp", "zero3")
_TRUE = ("1", "true", "yes")


@dataclass(frozen=True)
class Processes:
    """This process's place in an ``accelerate launch`` (from the environment torchrun and accelerate set)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    cpu: bool = False
    sharding: str = "none"  # "fsdp" (FSDP), "zero3" (DeepSpeed ZeRO-3): the weights are sharded

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Processes:
        env = os.environ if environ is None else environ
        sharding = "none"
        if env.get("ACCELERATE_USE_FSDP", "").lower() in _TRUE:
            sharding = "fsdp"
        elif env.get("ACCELERATE_USE_DEEPSPEED", "").lower() in _TRUE:
            sharding = "zero3" if env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3" else "none"
        return cls(
            world_size=int(env.get("WORLD_SIZE", "1")),
            rank=int(env.get("RANK", "0")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            cpu=env.get("ACCELERATE_USE_CPU", "").lower() in _TRUE,
            sharding=sharding,
        )

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def device(self, config: RunConfig) -> str:
        """Where this process's trainer lives: its own GPU in a distributed run, else the configured one."""
        import torch

        from spade_rl.policy.models import choose_device

        wanted = config.policy.transformers.device
        if self.cpu or wanted == "cpu" or not torch.cuda.is_available():
            return "cpu"
        if self.distributed:
            return f"cuda:{self.local_rank}"
        return choose_device(wanted)

    def check(self, config: RunConfig) -> None:
        """Refuse what cannot work with this many processes and this sharding (see the module docstring)."""
        config.check_launch(self.world_size)
        if not self.distributed:
            return
        backend = config.policy.backend
        if backend == "servers" and config.policy.servers.weight_sync == "none":
            raise ConfigError(
                "an inference-only run (policy.servers.weight_sync = 'none') trains nothing: run it without "
                "accelerate launch"
            )
        if self.sharding != "none" and backend != "servers":
            raise ConfigError(
                f"{'FSDP' if self.sharding == 'fsdp' else 'DeepSpeed ZeRO-3'} shards the weights over the "
                f"processes, so the main process cannot generate with them in process (policy.backend = "
                f"{backend!r}): generate on vLLM servers (policy.backend = 'servers' with weight_sync 'nccl' "
                "or 'disk'), or use DDP or ZeRO-2 (configs/accelerate/ddp.yaml, zero2.yaml)"
            )
        if backend not in ("transformers", "servers"):
            raise ConfigError(f"policy.backend {backend!r} cannot train; use 'transformers' or 'servers'")


def is_follower(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a non-main process of a distributed launch (it only trains)."""
    processes = Processes.from_env(environ)
    return processes.distributed and not processes.main


def split_for_processes(
    samples: Sequence[Sample], processes: int, filler_token_id: int
) -> list[list[Sample]]:
    """One share of ``samples`` per process: whole groups, dealt round-robin in order (group k to process
    k mod n). A process left without a group gets a single filler row (advantage 0, masked), so that every
    process takes the same optimiser step."""
    from spade_rl.train.samples import filler_sample, split_groups

    if processes < 1:
        raise ValueError(f"cannot split samples over {processes} processes")
    shares: list[list[Sample]] = [[] for _ in range(processes)]
    for k, group in enumerate(split_groups(samples)):
        shares[k % processes].extend(group)
    return [share or [filler_sample("agent", filler_token_id)] for share in shares]


class CommandChannel:
    """The main process's messages to the followers: a gloo group of all processes, long timeout.

    Every process must create it at the same point (it is a collective), after torch.distributed is up."""

    def __init__(self, processes: Processes, timeout: timedelta = timedelta(days=7)) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised: start the run with accelerate launch")
        self.processes = processes
        self._dist = dist
        self.group = dist.new_group(backend="gloo", timeout=timeout)

    def send(self, command: str, argument: Any = None) -> None:
        self._dist.broadcast_object_list([(command, argument)], src=0, group=self.group)

    def receive(self) -> tuple[str, Any]:
        box: list[Any] = [None]
        self._dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def scatter(self, shares: list[Any] | None = None) -> Any:
        """The main process passes one item per process; every process gets its own."""
        out: list[Any] = [None]
        self._dist.scatter_object_list(out, shares if self.processes.main else None, src=0, group=self.group)
        return out[0]

    def barrier(self) -> None:
        self._dist.barrier(group=self.group)


class DistributedUpdater:
    """The main process's updater in a distributed run: every call is mirrored by every follower."""

    def __init__(self, updater: Any, processes: Processes, channel: CommandChannel) -> None:
        self.updater = updater
        self.processes = processes
        self.channel = channel
        self.inference_only = False
        base = getattr(updater, "updater", updater)  # a SyncingUpdater wraps the GRPOUpdater
        self.filler_token_id = base.filler_token_id

    @property
    def step(self) -> int:
        return self.updater.step

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        shares = split_for_processes(samples, self.processes.world_size, self.filler_token_id)
        self.channel.send("update")
        mine = self.channel.scatter(shares)
        metrics = self.updater.update(mine)
        metrics["train/processes"] = float(self.processes.world_size)
        metrics["train/groups_per_process_max"] = float(max(_groups(share) for share in shares))
        return metrics

    def park_optimizer_state(self, path: str | Path) -> int:
        """Every process parks its own share of the optimiser's state (a file of its own beside ``path``)."""
        self.channel.send("park", str(path))
        return self.updater.park_optimizer_state(path)

    def save(self, directory: str | Path) -> Path:
        self.channel.send("save", str(directory))
        path = self.updater.save(directory)
        self.channel.barrier()  # every process has written its part before the checkpoint is published
        return path

    def load(self, directory: str | Path) -> None:
        self.channel.send("load", str(directory))
        self.updater.load(directory)

    def close(self) -> None:
        self.channel.send("close")
        self.updater.close()


def _groups(share: Sequence[Sample]) -> int:
    return len({s.group for s in share if s.group >= 0})


def wrap_for_processes(updater: Any, processes: Processes, config: RunConfig) -> Any:
    """``updater`` as is in a single process; in the main process of a distributed run, mirrored by the
    followers (which must reach :func:`follow` with the same construction)."""
    if not processes.distributed:
        return updater
    log.info(
        "distributed run: %d processes, this is the main one; sharding %s",
        processes.world_size,
        processes.sharding,
    )
    return DistributedUpdater(updater, processes, CommandChannel(processes))


def follower_updater(config: RunConfig, processes: Processes) -> Any:
    """What a follower trains: its own copy of ``policy.model``, built in the order the main process builds
    its updater (the collectives of construction must match)."""
    from spade_rl.loop.updating import SyncingUpdater, load_trainer_model
    from spade_rl.train import GRPOUpdater

    processes.check(config)
    model, tokenizer = load_trainer_model(config, processes.device(config))
    updater: Any = GRPOUpdater(model, tokenizer, config.update_config)
    if config.policy.backend == "servers":
        updater = SyncingUpdater(updater, None, gather_only=processes.sharding != "none")
    return updater


def follow(updater: Any, channel: CommandChannel) -> None:
    """Do what the main process asks until it closes the run."""
    while True:
        command, argument = channel.receive()
        if command == "update":
            updater.update(channel.scatter())
        elif command == "save":
            updater.save(argument)
            channel.barrier()
        elif command == "load":
            updater.load(argument)
        elif command == "park":
            updater.park_optimizer_state(argument)
        elif command == "close":
            updater.close()
            return
        else:
            raise RuntimeError(f"unknown command {command!r} from the main process")


def run_follower_from_cli(
    config_path: Path | None, overrides: list[str], run_dir: Path, resume: bool
) -> None:
    """A follower of ``spade-rl run``: the configuration read as the main process reads it, then
    :func:`run_follower`."""
    from spade_rl.loop.config import load_run_config

    run_follower(load_run_config(config_path, overrides, run_dir, resume))


def run_follower(config: RunConfig) -> None:
    """The whole life of a follower process of ``spade-rl run`` under ``accelerate launch``."""
    processes = Processes.from_env()
    log.info("follower %d of %d: training only", processes.rank, processes.world_size)
    updater = follower_updater(config, processes)
    follow(updater, CommandChannel(processes))
