"""Where environment code is validated and stepped: here, or on a Ray cluster.

    executor = make_executor(ExecutorConfig(kind="ray", address="auto", num_actors=8), SandboxConfig())
    executor.start()
    reports = executor.validate_many([(source, hint)], ValidationSettings())
    episodes = run_episodes(policy, executor, specs, RolloutConfig())
    executor.close()

``LocalExecutor`` (the default) runs one sandbox pool in this process tree. ``RayExecutor`` runs one
sandbox pool in each of several Ray actors spread over a cluster's nodes; the driver keeps the policy
and the archive. Only this package's ``ray_*`` modules import Ray, and only when the Ray executor is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spade_rl.executor.base import Executor, ExecutorError, ValidationRequest, apply_judge
from spade_rl.executor.config import EXECUTORS, ExecutorConfig
from spade_rl.executor.local import LocalExecutor, as_executor
from spade_rl.sandbox import SandboxConfig

if TYPE_CHECKING:
    from spade_rl.executor.ray_executor import RayExecutor


def make_executor(config: ExecutorConfig, sandbox: SandboxConfig) -> Executor:
    """The executor ``config`` asks for, not started yet."""
    if config.kind == "local":
        return LocalExecutor(sandbox)
    if config.kind == "ray":
        from spade_rl.executor.ray_executor import RayExecutor  # Ray loads here, and only here

        return RayExecutor(config, sandbox)
    raise ValueError(f"executor kind {config.kind!r} is unknown; allowed: {list(EXECUTORS)}")


def __getattr__(name: str) -> Any:
    if name == "RayExecutor":
        from spade_rl.executor.ray_executor import RayExecutor

        return RayExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EXECUTORS",
    "Executor",
    "ExecutorConfig",
    "ExecutorError",
    "LocalExecutor",
    "RayExecutor",
    "ValidationRequest",
    "apply_judge",
    "as_executor",
    "make_executor",
]
