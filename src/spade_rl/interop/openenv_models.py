"""The messages of spade-rl's OpenEnv server: OpenEnv's wire format (openenv-core 0.3), our action and
observation.

OpenEnv answers a reset or a step with ``{"observation": {...}, "reward": r, "done": d}``, the
observation holding the environment's own fields; over the WebSocket session (``/ws``) each such answer
is wrapped as ``{"type": "observation", "data": ...}``, a state as ``{"type": "state", "data": ...}`` and
a refusal as ``{"type": "error", "data": {"message": ..., "code": ...}}`` with one of OpenEnv's codes
(``INVALID_JSON``, ``UNKNOWN_TYPE``, ``VALIDATION_ERROR``, ``EXECUTION_ERROR``, ``CAPACITY_REACHED``,
``FACTORY_ERROR``, ``SESSION_ERROR``). These models are written here from that description (only
pydantic, which FastAPI brings): the server must not need openenv-core, whose requirements are heavy.

A spade-rl action is ``{"message": "<the agent's text>"}``; an observation is ``{"text": ...,
"info": {...}, "terminated": ..., "truncated": ..., "turn": ..., "error": ..., "error_reason": ...}``
(``error`` is null unless the environment failed; then the episode is done, see
:mod:`spade_rl.interop.gym_episode`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spade_rl.interop.gym_episode import Outcome

# OpenEnv's WebSocket error codes (openenv.core.env_server.types.WSErrorCode).
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
FACTORY_ERROR = "FACTORY_ERROR"
SESSION_ERROR = "SESSION_ERROR"

# How deep a request's JSON may nest. A request needs 4 levels ({"action": {"metadata": {...}}}); past
# about a thousand Python's parser raises RecursionError, which must be a refusal, not a server error.
MAX_JSON_DEPTH = 32


class SpadeAction(BaseModel):
    """One turn of the agent: its text, as the environment's observation asks for it."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(description="The agent's text for this turn (for example '\\\\boxed{50}').")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored by the environment.")


class SpadeObservation(BaseModel):
    """What the environment answered (OpenEnv's ``done`` and ``reward`` travel beside it)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The environment's observation.")
    info: dict[str, Any] = Field(default_factory=dict, description="The environment's info dict.")
    terminated: bool = Field(default=False, description="The game ended (won or lost).")
    truncated: bool = Field(default=False, description="The episode stopped: out of turns, or a failure.")
    turn: int = Field(default=0, description="Steps played in this episode.")
    error: str | None = Field(default=None, description="Set when the environment failed.")
    error_reason: str | None = Field(default=None, description="A stable code: timeout, crashed, ...")


class ResetRequest(BaseModel):
    """OpenEnv's reset request: an optional seed (the instance to play) and episode id."""

    model_config = ConfigDict(extra="allow")

    # strict: true or "3" is not a seed (lax pydantic would read them as 1 and 3).
    seed: int | None = Field(
        default=None, ge=0, le=2**63 - 1, strict=True, description="The instance to play."
    )
    episode_id: str | None = Field(default=None, max_length=255, description="A name for the episode.")


class StepRequest(BaseModel):
    """OpenEnv's HTTP step request; ``episode_id`` names the episode a ``/reset`` started (spade-rl's
    HTTP sessions: OpenEnv's HTTP endpoints are otherwise stateless)."""

    model_config = ConfigDict(extra="allow")

    action: dict[str, Any] = Field(description="A SpadeAction: {'message': ...}.")
    timeout_s: float | None = Field(
        default=None, gt=0, strict=True, allow_inf_nan=False, description="A shorter deadline for this step."
    )
    request_id: str | None = Field(default=None, max_length=255)
    episode_id: str | None = Field(default=None, max_length=255)


class SpadeState(BaseModel):
    """OpenEnv's state (episode id, step count) and what spade-rl adds."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = 0
    env: str = ""
    seed: int | None = None
    done: bool = True
    episode_return: float = 0.0


def wire(outcome: Outcome, turn: int, reset: bool) -> dict[str, Any]:
    """An outcome in OpenEnv's result form. A reset's reward is None (as OpenEnv's); a failure's
    observation carries its error and the episode is done."""
    observation = SpadeObservation(
        text=outcome.observation,
        info=json_safe(outcome.info),
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        turn=turn,
        error=outcome.error or None,
        error_reason=outcome.reason if outcome.error else None,
    )
    reward = None if reset and not outcome.failed else outcome.reward
    return {"observation": observation.model_dump(), "reward": reward, "done": outcome.done}


def parse_json(raw: str | bytes, what: str) -> Any:
    """``raw`` parsed as JSON; ``Refused`` 422 (``INVALID_JSON``) saying what was wrong when it is not
    UTF-8 JSON, or nests deeper than ``MAX_JSON_DEPTH``. ``what`` names it in the message ("the body")."""
    try:
        value = json.loads(raw)
    except RecursionError:
        value = None
        too_deep = True
    except ValueError as exc:  # UnicodeDecodeError and the int-digits limit are ValueErrors too
        raise Refused(422, INVALID_JSON, f"{what} is not JSON: {str(exc)[:200]}") from None
    else:
        too_deep = _deeper_than(value, MAX_JSON_DEPTH)
    if too_deep:
        raise Refused(
            422,
            INVALID_JSON,
            f"{what} nests deeper than {MAX_JSON_DEPTH} levels of JSON objects and arrays; "
            "a request needs at most 4",
        )
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def error_message(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """A WebSocket refusal in OpenEnv's form."""
    return {"type": "error", "data": {"message": message, "code": code, **json_safe(extra)}}


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON can carry it: a non-finite float becomes its name ("nan", "inf"), a tuple
    a list, a key a str. What an environment returns already crossed the sandbox's checked boundary
    (plain JSON-like values, bounded in size and depth); this only removes what JSON cannot spell."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return repr(value)


class Refused(Exception):
    """A request the server refuses: its HTTP status, its OpenEnv WebSocket code and what was wrong."""

    def __init__(self, status: int, code: str, message: str, **extra: Any):
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra


def validation_summary(exc: ValidationError) -> str:
    """A pydantic error list in one line: ``loc: message; ...``."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())


def kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__
