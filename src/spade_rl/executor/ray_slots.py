"""The Ray executor's driver-side view of its actors: a ``Slot`` per actor, the ``RemoteEnv`` handles of the
episodes open on them, which actor a new episode goes to, and what counts as a lost actor.

``spade_rl.executor.ray_executor`` holds the slots; what runs on the nodes is ``spade_rl.executor.ray_actor``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import (
    ActorUnschedulableError,
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    RayActorError,
    RayError,
    WorkerCrashedError,
)

from spade_rl.sandbox import CallResult, Status

if TYPE_CHECKING:
    from spade_rl.executor.ray_executor import RayExecutor

log = logging.getLogger(__name__)

# What Ray raises when the actor, its process or its node is gone (not a bug of ours: those come as
# RayTaskError and are raised again here, as the local executor would raise them).
LOST = (
    RayActorError,
    ObjectLostError,
    WorkerCrashedError,
    NodeDiedError,
    OutOfMemoryError,
    ActorUnschedulableError,
)


@dataclass(eq=False)
class Slot:
    """One actor as the driver sees it."""

    index: int
    actor: Any  # ray.actor.ActorHandle
    ready_ref: Any  # the answer of its ready() call
    ready: bool = False
    alive: bool = True
    death: str = ""
    node_id: str = ""
    pid: int = 0
    live: int = 0  # environment instances open on it
    busy: int = 0  # validations in flight on it
    stats: dict = field(default_factory=dict)  # its pool's latest counters

    @property
    def name(self) -> str:
        node = f" on node {self.node_id[:12]}" if self.node_id else ""
        return f"actor {self.index}{node}"


class RemoteEnv:
    """One environment instance living in a Ray actor's sandbox pool; the interface of ``EnvHandle``."""

    def __init__(self, executor: RayExecutor, slot: Slot, key: int, class_name: str):
        self._executor = executor
        self._slot = slot
        self.instance = key
        self.class_name = class_name
        self.closed = False

    def reset(self, seed: int | None = None, timeout_s: float | None = None) -> CallResult:
        return self._executor.call_many([(self, "reset", {"seed": seed})], timeout_s)[0]

    def step(self, action: str, timeout_s: float | None = None) -> CallResult:
        return self._executor.call_many([(self, "step", {"action": action})], timeout_s)[0]

    def solution(self, timeout_s: float | None = None) -> CallResult:
        return self._executor.call_many([(self, "solution", {})], timeout_s)[0]

    def close(self) -> CallResult:
        return self._executor.close_env(self)

    @property
    def alive(self) -> bool:
        return not self.closed and self._slot.alive

    @property
    def actor_index(self) -> int:
        return self._slot.index


def route(sources: list[str], live: list[Slot]) -> list[Slot]:
    """An actor for each new instance: the one holding the fewest open instances, preferring one
    given the same source in this batch (its sandbox worker for that source is already warm)."""
    load = {slot.index: slot.live for slot in live}
    given: dict[int, set[str]] = {slot.index: set() for slot in live}
    chosen = []
    for source in sources:
        slot = min(live, key=lambda s: (load[s.index], source not in given[s.index], s.index))
        load[slot.index] += 1
        given[slot.index].add(source)
        chosen.append(slot)
    return chosen


def describe(exc: BaseException) -> str:
    """Ray's error in one line: its type and its last line (which says why: "its node has died")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1][:300]}" if lines else type(exc).__name__


def lost_result(slot: Slot, why: str, what: str) -> CallResult:
    return CallResult(
        Status.WORKER_LOST,
        None,
        "worker_lost",
        f"the Ray {slot.name} holding {what} was lost ({why})",
    )


def kill_actor(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except (RayError, ValueError) as exc:  # already gone, or Ray itself is shutting down
        log.debug("ray.kill: %s", exc)
