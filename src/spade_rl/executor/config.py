"""Configuration of the executor: where environments are validated and stepped.

    ExecutorConfig()                                                  # local: one sandbox pool here
    ExecutorConfig(kind="ray", address="auto", num_actors=16, cpus_per_actor=1)

One frozen dataclass, validated on construction; every bad value raises ``ValueError`` saying what
was wrong and what is allowed. Nothing here imports Ray: ``kind = "ray"`` only checks that the
``ray`` package is installed (the ``spade-rl[ray]`` extra).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass

EXECUTORS = ("local", "ray")
# "auto": the cluster this machine joined with `ray start`; "local": a new Ray instance in this
# process's machine; "host:port": a cluster's head (GCS); "ray://host:port": a Ray Client server.
_ADDRESS = re.compile(r"^(auto|local|(ray://)?[A-Za-z0-9_.\-]+:\d{1,5}|(ray://)?\[[0-9A-Fa-f:]+\]:\d{1,5})$")


@dataclass(frozen=True)
class ExecutorConfig:
    """Where environment code runs.

    - ``kind``: ``local`` (one sandbox pool in the trainer's process tree, the default) or ``ray``
      (one sandbox pool in each of ``num_actors`` Ray actors, spread over the nodes of a cluster).
    - ``address``: the Ray cluster to join: ``auto`` (the cluster this machine joined with
      ``ray start``), ``local`` (start Ray on this machine only), ``host:port`` of the head, or
      ``ray://host:port`` (Ray Client). A process already connected to Ray keeps its connection.
    - ``num_actors``, ``cpus_per_actor``: how many sandbox actors, and the Ray CPUs each reserves
      (its sandbox workers run on those cores; the ``[sandbox]`` settings apply to each actor's pool).
    - ``spread``: place actors on as many nodes as possible (Ray's ``SPREAD`` strategy) rather than
      packing them.
    - ``start_timeout_s``: how long the actors may take to be placed and report ready.
    - ``actor_timeout_s``: grace beyond the sandbox's own deadlines before an actor that does not
      answer is declared lost (a node that died without the cluster noticing yet).
    - ``retries``: how many times work lost with an actor (a validation, opening an environment) is
      run again on another actor. A running episode is never retried: its state is gone, and it ends
      as an environment error.
    """

    kind: str = "local"
    address: str = "auto"
    num_actors: int = 2
    cpus_per_actor: float = 1.0
    spread: bool = True
    start_timeout_s: float = 120.0
    actor_timeout_s: float = 60.0
    retries: int = 2

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ValueError(f"executor.kind {self.kind!r} is unknown; allowed: {list(EXECUTORS)}")
        if not _ADDRESS.match(self.address):
            raise ValueError(
                f"executor.address {self.address!r} is not a Ray address; allowed: 'auto', 'local', "
                "'host:port' (the head node) or 'ray://host:port' (Ray Client)"
            )
        if self.num_actors < 1:
            raise ValueError(f"executor.num_actors must be at least 1, got {self.num_actors}")
        for name in ("cpus_per_actor", "start_timeout_s", "actor_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"executor.{name} must be positive, got {getattr(self, name)!r}")
        if self.retries < 0:
            raise ValueError(f"executor.retries must be zero or more, got {self.retries}")
        if self.kind == "ray" and importlib.util.find_spec("ray") is None:
            raise ValueError(
                "executor.kind 'ray' needs Ray, which is not installed: pip install 'spade-rl[ray]' "
                "(on the driver and on every node of the cluster)"
            )
