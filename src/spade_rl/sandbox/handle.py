"""``EnvHandle``: the caller's side of one environment instance living in a worker of a ``Sandbox``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spade_rl.sandbox.results import CallResult

if TYPE_CHECKING:
    from spade_rl.sandbox.pool import Sandbox
    from spade_rl.sandbox.worker_process import Worker


class EnvHandle:
    """One environment instance (one episode at a time) living in a worker of the sandbox."""

    def __init__(self, sandbox: Sandbox, worker: Worker, instance: int, class_name: str):
        self._pool = sandbox
        self._worker = worker
        self.instance = instance
        self.class_name = class_name
        self.closed = False

    def reset(self, seed: int | None = None, timeout_s: float | None = None) -> CallResult:
        return self._pool.call(self, "reset", {"seed": seed}, timeout_s)

    def step(self, action: str, timeout_s: float | None = None) -> CallResult:
        return self._pool.call(self, "step", {"action": action}, timeout_s)

    def solution(self, timeout_s: float | None = None) -> CallResult:
        return self._pool.call(self, "solution", {}, timeout_s)

    def close(self) -> CallResult:
        return self._pool.close_env(self)

    @property
    def alive(self) -> bool:
        return not self.closed and not self._worker.dead

    @property
    def worker_pid(self) -> int:
        return self._worker.pid

    @property
    def worker_instances(self) -> int:
        """How many instances its worker has made so far (this one and any made after it included):
        the count an environment's class attribute would keep. A worker makes at most
        ``SandboxConfig.episodes_per_worker`` before it is retired."""
        return self._worker.created
