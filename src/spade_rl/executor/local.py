"""The local executor: one sandbox pool in this process tree (the default; no Ray anywhere).

    with LocalExecutor(SandboxConfig()) as executor:
        [report] = executor.validate_many([(source, hint)], ValidationSettings())
        episodes = run_episodes(policy, executor, specs, RolloutConfig())

Validation runs the battery on one source after another, as ``validate_source`` does; rollouts use
the pool directly (its handles are the pool's own ``EnvHandle``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spade_rl.design.validate import ValidationReport, ValidationSettings, validate_source
from spade_rl.executor.base import Executor, ValidationRequest
from spade_rl.sandbox import CallResult, EnvHandle, SandboxConfig, SandboxPool


class LocalExecutor:
    """Runs everything in one ``SandboxPool``: its own (``sandbox``), or one it is given (``pool``),
    which it then leaves open when it closes."""

    kind = "local"

    def __init__(self, sandbox: SandboxConfig | None = None, *, pool: SandboxPool | None = None):
        if pool is not None and sandbox is not None:
            raise ValueError("give LocalExecutor a sandbox configuration or a pool, not both")
        self._owns_pool = pool is None
        self.pool = pool if pool is not None else SandboxPool(sandbox)

    def __enter__(self) -> LocalExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.pool.start()

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()

    @property
    def stats(self) -> dict[str, int]:
        return self.pool.stats

    def validate_many(
        self, requests: Sequence[ValidationRequest], settings: ValidationSettings
    ) -> list[ValidationReport]:
        return [validate_source(self.pool, source, settings, hint=hint) for source, hint in requests]

    def open_many(
        self,
        requests: list[tuple[str, dict | None]],
        timeout_s: float | None = None,
        fresh_worker: bool = False,
    ) -> list[CallResult]:
        return self.pool.open_many(requests, timeout_s, fresh_worker)

    def call_many(
        self, calls: list[tuple[EnvHandle, str, dict]], timeout_s: float | None = None
    ) -> list[CallResult]:
        return self.pool.call_many(calls, timeout_s)

    def close_env(self, env: EnvHandle) -> CallResult:
        return self.pool.close_env(env)


def as_executor(where: Executor | SandboxPool | Any) -> Executor:
    """An executor for ``where``: itself when it is one, a ``LocalExecutor`` over it when it is a
    ``SandboxPool`` (for callers that hold a pool, such as the CLI's one-off commands)."""
    if isinstance(where, SandboxPool):
        return LocalExecutor(pool=where)
    if isinstance(where, Executor):
        return where
    raise TypeError(f"expected an executor or a SandboxPool, got {type(where).__name__}")
