"""The local executor: one sandbox in this process tree (the default; no Ray anywhere).

    with LocalExecutor(SandboxConfig()) as executor:
        [report] = executor.validate_many([(source, hint)], ValidationSettings())
        episodes = run_episodes(policy, executor, specs, RolloutConfig())

Validation runs the battery on one source after another, as ``validate_source`` does; rollouts use
the sandbox directly (its handles are the sandbox's own ``EnvHandle``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spade_rl.design.validate import ValidationReport, ValidationSettings, validate_source
from spade_rl.executor.base import Executor, ValidationRequest
from spade_rl.sandbox import CallResult, EnvHandle, Sandbox, SandboxConfig


class LocalExecutor:
    """Runs everything in one ``Sandbox``: its own (built from ``config``), or one it is given (``sandbox``),
    which it then leaves open when it closes."""

    kind = "local"

    def __init__(self, config: SandboxConfig | None = None, *, sandbox: Sandbox | None = None):
        if sandbox is not None and config is not None:
            raise ValueError("give LocalExecutor a sandbox configuration or a sandbox, not both")
        self._owns_sandbox = sandbox is None
        self.sandbox = sandbox if sandbox is not None else Sandbox(config)

    def __enter__(self) -> LocalExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.sandbox.start()

    def close(self) -> None:
        if self._owns_sandbox:
            self.sandbox.close()

    @property
    def stats(self) -> dict[str, int]:
        return self.sandbox.stats

    def validate_many(
        self, requests: Sequence[ValidationRequest], settings: ValidationSettings
    ) -> list[ValidationReport]:
        return [validate_source(self.sandbox, source, settings, hint=hint) for source, hint in requests]

    def open_many(
        self,
        requests: list[tuple[str, dict | None]],
        timeout_s: float | None = None,
        fresh_worker: bool = False,
    ) -> list[CallResult]:
        return self.sandbox.open_many(requests, timeout_s, fresh_worker)

    def call_many(
        self, calls: list[tuple[EnvHandle, str, dict]], timeout_s: float | None = None
    ) -> list[CallResult]:
        return self.sandbox.call_many(calls, timeout_s)

    def close_env(self, env: EnvHandle) -> CallResult:
        return self.sandbox.close_env(env)


def as_executor(where: Executor | Sandbox | Any) -> Executor:
    """An executor for ``where``: itself when it is one, a ``LocalExecutor`` over it when it is a
    ``Sandbox`` (for callers that hold a sandbox, such as the CLI's one-off commands)."""
    if isinstance(where, Sandbox):
        return LocalExecutor(sandbox=where)
    if isinstance(where, Executor):
        return where
    raise TypeError(f"expected an executor or a Sandbox, got {type(where).__name__}")
