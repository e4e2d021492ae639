"""Several processes under ``accelerate launch``: the main one runs the loop, every one trains its share.

    accelerate launch --config_file configs/accelerate/ddp.yaml -m spade_rl run -c configs/qwen3-gpu.toml

**Design.** Only the main process (rank 0) designs, validates, plays, rewards and archives: one archive file,
one sandbox pool (or Ray executor), one stream of random choices, exactly as in a single-process run; it
generates with its policy (in process on its GPU, or on vLLM servers). The other processes (followers,
:func:`run_follower`) hold nothing but a learner: their own copy of ``policy.model`` on their own device,
wrapped by accelerate like the main one. At every step the main process cuts the samples into one share per
process, whole GRPO groups dealt round-robin (:func:`split_for_processes`; a process may get none), and
every process makes the same optimiser step on its share: the learner sums the loss's normalisers over the
processes, DDP averages the gradients, FSDP2 shards what it shards (:mod:`spade_rl.train.learner`).
DeepSpeed is refused: its engine steps the optimiser on its own count of passes, which a step of any
number of rows does not keep.

Commands (update, save, load, close) and the shares travel from the main process over a gloo group of their
own with a week-long timeout (:class:`CommandChannel`): the followers wait there while the main process
plays, which can outlast NCCL's default watchdog of ten minutes. A checkpoint is written by every process
(the model by the main one; optimiser and RNG states per process), so on several
machines the run directory must be on a shared file system. A follower that fails, or a main process that
dies, ends the whole launch (torchrun stops the others).

**What each strategy allows.** DDP keeps whole weights on every process: the main one can
generate in process (``backend = "transformers"``). FSDP shards the weights, so that a forward
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
from spade_rl.train.base import BaseLearner

if TYPE_CHECKING:
    from spade_rl.train import Sample

log = logging.getLogger(__name__)

SHARDINGS = ("none", "fsdp")
_TRUE = ("1", "true", "yes")


@dataclass(frozen=True)
class Processes:
    """This process's place in an ``accelerate launch`` (from the environment torchrun and accelerate set)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    cpu: bool = False
    sharding: str = "none"  # "fsdp" (FSDP): the weights are sharded
    deepspeed: bool = False  # launched with DeepSpeed (refused by check)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Processes:
        env = os.environ if environ is None else environ
        sharding = "fsdp" if env.get("ACCELERATE_USE_FSDP", "").lower() in _TRUE else "none"
        return cls(
            deepspeed=env.get("ACCELERATE_USE_DEEPSPEED", "").lower() in _TRUE,
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
        if self.deepspeed:
            raise ConfigError(
                "DeepSpeed launches are not supported: its engine steps the optimiser on its own count of "
                "passes, and a learner's step makes as many passes as its rows need. Shard with FSDP2 "
                "(configs/accelerate/fsdp.yaml) or replicate with DDP (configs/accelerate/ddp.yaml)"
            )
        if not self.distributed:
            self.check_visible_gpus(config)
            return
        backend = config.policy.backend
        if backend == "servers" and config.policy.servers.weight_sync == "none":
            raise ConfigError(
                "an inference-only run (policy.servers.weight_sync = 'none') trains nothing: run it without "
                "accelerate launch"
            )
        if self.sharding != "none" and backend != "servers":
            raise ConfigError(
                "FSDP shards the weights over the processes, so the main process cannot generate with "
                f"them in process (policy.backend = {backend!r}): generate on vLLM servers "
                "(policy.backend = 'servers' with weight_sync 'nccl' or 'disk'), or use DDP "
                "(configs/accelerate/ddp.yaml)"
            )
        if self.sharding == "fsdp" and config.train.offload_optimizer:
            raise ConfigError(
                "train.offload_optimizer parks whole optimiser tensors in a file, and FSDP shards them "
                "(DTensors): set train.offload_optimizer = false under FSDP"
            )
        if backend not in ("transformers", "servers"):
            raise ConfigError(f"policy.backend {backend!r} cannot train; use 'transformers' or 'servers'")
        if backend == "transformers" and self.main:
            log.warning(
                "%d processes train, but only the main one generates (policy.backend = 'transformers'): "
                "the other %d GPUs wait while the episodes play. Generating on vLLM servers "
                "(policy.backend = 'servers') keeps them apart from the trainers",
                self.world_size,
                self.world_size - 1,
            )

    def check_visible_gpus(self, config: RunConfig) -> None:
        """One process that trains on "the" GPU (device 'auto' or 'cuda') while it sees several would use
        the first and leave the others idle without a word (the learner is plain torch in one process: no
        DataParallel). Refused, naming the ways to use them; an explicit 'cuda:N' is the user's choice.
        ``SelfPlay`` asks first, before the warm-up trains anything."""
        if self.distributed:
            return
        wanted = config.policy.transformers.device
        trains = config.policy.backend == "transformers" or (
            config.policy.backend == "servers" and config.policy.servers.weight_sync != "none"
        )
        if self.cpu or not trains or wanted not in ("auto", "cuda"):
            return
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count > 1:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(unset: every GPU)")
            raise ConfigError(
                f"this process sees {count} GPUs (CUDA_VISIBLE_DEVICES={visible}) and would train on the "
                f"first alone (policy.transformers.device = {wanted!r}), leaving {count - 1} idle. Use them "
                "all with one process per GPU: accelerate launch --config_file configs/accelerate/ddp.yaml "
                "-m spade_rl run ...; or make one visible (CUDA_VISIBLE_DEVICES=0 spade-rl run ...), or name "
                "one (policy.transformers.device = 'cuda:0') when the others serve vLLM"
            )


def is_follower(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a non-main process of a distributed launch (it only trains)."""
    processes = Processes.from_env(environ)
    return processes.distributed and not processes.main


def split_for_processes(samples: Sequence[Sample], processes: int) -> list[list[Sample]]:
    """One share of ``samples`` per process: whole groups, dealt round-robin in order (group k to process
    k mod n). A process may get none: it still takes part in the step (the learner's passes of one masked
    token), so that every process takes the same optimiser step."""
    from spade_rl.train.samples import split_groups

    if processes < 1:
        raise ValueError(f"cannot split samples over {processes} processes")
    shares: list[list[Sample]] = [[] for _ in range(processes)]
    for k, group in enumerate(split_groups(samples)):
        shares[k % processes].extend(group)
    return shares


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


class DistributedLearner(BaseLearner):
    """The main process's learner in a distributed run: every call is mirrored by every follower."""

    def __init__(self, learner: BaseLearner, processes: Processes, channel: CommandChannel) -> None:
        self.learner = learner
        self.processes = processes
        self.channel = channel

    @property
    def steps(self) -> int:
        return self.learner.steps

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        shares = split_for_processes(samples, self.processes.world_size)
        self.channel.send("step")
        mine = self.channel.scatter(shares)
        metrics = self.learner.step(mine)
        metrics["train/processes"] = float(self.processes.world_size)
        metrics["train/groups_per_process_max"] = float(max(_groups(share) for share in shares))
        return metrics

    def park_optimizer_state(self, path: str | Path) -> int:
        """Every process parks its own share of the optimiser's state (a file of its own beside ``path``)."""
        self.channel.send("park", str(path))
        return self.learner.park_optimizer_state(path)

    def save(self, directory: str | Path) -> Path:
        self.channel.send("save", str(directory))
        path = self.learner.save(directory)
        self.channel.barrier()  # every process has written its part before the checkpoint is published
        return path

    def load(self, directory: str | Path) -> None:
        self.channel.send("load", str(directory))
        self.learner.load(directory)

    def close(self) -> None:
        self.channel.send("close")
        self.learner.close()


def _groups(share: Sequence[Sample]) -> int:
    return len({s.group for s in share if s.group >= 0})


def wrap_for_processes(learner: BaseLearner, processes: Processes, config: RunConfig) -> BaseLearner:
    """``learner`` as is in a single process; in the main process of a distributed run, mirrored by the
    followers (which must reach :func:`follow` with the same construction)."""
    if not processes.distributed:
        return learner
    log.info(
        "distributed run: %d processes, this is the main one; sharding %s",
        processes.world_size,
        processes.sharding,
    )
    return DistributedLearner(learner, processes, CommandChannel(processes))


def follower_learner(config: RunConfig, processes: Processes) -> BaseLearner:
    """What a follower trains: its own copy of ``policy.model``, built in the order the main process builds
    its learner (the collectives of construction must match)."""
    from spade_rl.loop.updating import SyncingLearner, load_trainer_model
    from spade_rl.train.learner import Learner

    processes.check(config)
    model, tokenizer = load_trainer_model(config, processes.device(config))
    learner: BaseLearner = Learner(model, tokenizer, config.update_config)
    if config.policy.backend == "servers":
        learner = SyncingLearner(learner, None, gather_only=processes.sharding != "none")
    return learner


def follow(learner: BaseLearner, channel: CommandChannel) -> None:
    """Do what the main process asks until it closes the run."""
    while True:
        command, argument = channel.receive()
        if command == "step":
            learner.step(channel.scatter())
        elif command == "save":
            learner.save(argument)
            channel.barrier()
        elif command == "load":
            learner.load(argument)
        elif command == "park":
            learner.park_optimizer_state(argument)
        elif command == "close":
            learner.close()
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
    learner = follower_learner(config, processes)
    follow(learner, CommandChannel(processes))
