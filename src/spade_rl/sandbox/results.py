"""What a call into the sandbox returns: a ``CallResult`` with a ``Status`` and a stable reason code.

Nothing an environment does raises in the caller: every outcome of a call is one of these results.
The two exceptions here are for the pool's own user: a required isolation layer missing
(``SandboxUnavailable``) and no worker left to place an episode on (``SandboxFull``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any


class Status(enum.StrEnum):
    """How a call ended. After ``TIMEOUT``, ``CRASHED``, ``MEMORY``, ``OUTPUT_TOO_LARGE`` and
    ``PROTOCOL_ERROR`` the worker is killed and replaced (its other episodes answer ``WORKER_LOST``);
    after ``EXCEPTION`` it is retired once its episodes close."""

    OK = "ok"
    EXCEPTION = "exception"  # the environment raised (or broke the contract while loading)
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # the worker died (signal, exit)
    MEMORY = "memory"
    OUTPUT_TOO_LARGE = "output_too_large"
    PROTOCOL_ERROR = "protocol_error"  # the answer was not a well-formed frame for this request
    WORKER_LOST = "worker_lost"  # another episode on the same worker made it be killed


# The reason codes a worker may report for a source it could not load (``spade_rl.envs.loader``).
LOADER_REASONS = frozenset({"syntax_error", "no_env_class", "multiple_env_classes"})


@dataclass(frozen=True)
class CallResult:
    status: Status
    value: Any = None
    reason: str = ""  # stable code for statistics: "ok", "timeout", "syntax_error", "exception", ...
    error: str = ""  # human-readable message
    error_type: str = ""  # exception class name, when the environment raised
    traceback: str = ""
    output: str = ""  # what the environment printed during the call (capped)
    elapsed_s: float = 0.0
    # The clocks the environment read during the call (spade_rl.sandbox.clock), e.g. ("time.monotonic",):
    # a virtual time, the same in validation and in play; validation refuses reads in reset, step, solution.
    clock_reads: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class SandboxUnavailable(RuntimeError):
    """A required isolation layer is missing: the pool refuses to run generated code."""


class SandboxFull(RuntimeError):
    """Every allowed worker is busy with episodes of other environments."""


CLOSED = CallResult(Status.EXCEPTION, reason="closed", error="the environment is closed")


def with_phase(result: CallResult, phase: str) -> CallResult:
    """Name the phase of ``open`` in which the environment raised: ``load_raised`` (the module
    body) or ``init_raised`` (the constructor)."""
    if result.status is Status.EXCEPTION and result.reason in ("exception", "unserializable"):
        return replace(result, reason=f"{phase}_raised")
    return result
