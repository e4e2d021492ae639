"""One environment instance played one call at a time in the sandbox, for callers outside spade-rl.

    with Sandbox(SandboxConfig(pool_size=1, max_workers=1)) as sandbox:
        episode = SandboxedEpisode(sandbox, reference_entry("guess"))
        first = episode.reset(seed=3)          # Outcome: observation, info (error set if it failed)
        step = episode.step(r"\\boxed{50}")    # Outcome: observation, reward, terminated, truncated, info
        episode.close()

This is what the Gymnasium adapter and each session of the OpenEnv server drive. The environment's code
runs only in the sandbox's worker; every answer crosses the contract checks of
:mod:`spade_rl.envs.contract` before anything here uses it. Whatever the environment does (raise,
hang past the deadline, crash its worker, answer with the wrong types or a reward outside [0, 1]) ends
the episode with a typed :class:`Outcome`: ``truncated`` (the episode stopped for a reason outside the
game), reward 0, ``error`` and ``reason`` set (a stable code: ``timeout``, ``crashed``, ``memory``,
``step_bad_type``, ``reward_out_of_range``, ``load_raised``, ...). Nothing the environment returns raises
here. A reset after a failure opens a fresh instance (in a new worker when the old one was killed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from spade_rl.envs.contract import (
    ContractViolation,
    check_reset_value,
    check_solution_value,
    check_step_value,
)
from spade_rl.envs.sources import EnvEntry
from spade_rl.sandbox import CallResult, EnvHandle, Sandbox, SandboxFull

log = logging.getLogger(__name__)

REWARD_RANGE = (0.0, 1.0)  # the contract's default range: what the archive's environments were validated in


@dataclass(frozen=True)
class Outcome:
    """The answer of one reset or step, checked. ``error`` is empty unless the environment failed; then
    ``reason`` is a stable code and the episode is over (``truncated``)."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict = field(default_factory=dict)
    error: str = ""
    reason: str = "ok"

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def failed(self) -> bool:
        return bool(self.error)


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the cut said at its end (inside the limit)."""
    if len(text) <= limit:
        return text
    keep = limit - 40  # room for the note (limits here are at least 64)
    return text[:keep] + f"\n[... {len(text) - keep} characters cut]"


class SandboxedEpisode:
    """The episodes of one environment, one at a time, in ``sandbox`` (opened at the first reset).

    ``call_timeout_s`` is every call's deadline (``step`` may ask for a shorter one); observations longer
    than ``max_observation_chars`` are cut. ``turns``, ``seed``, ``episode_return`` and ``done`` describe
    the current episode."""

    def __init__(
        self,
        sandbox: Sandbox,
        entry: EnvEntry,
        *,
        call_timeout_s: float | None = None,
        max_observation_chars: int = 65536,
    ):
        if call_timeout_s is not None and not call_timeout_s > 0:
            raise ValueError(f"call_timeout_s must be positive, got {call_timeout_s!r}")
        if max_observation_chars < 64:
            raise ValueError(f"max_observation_chars must be at least 64, got {max_observation_chars!r}")
        self.sandbox = sandbox
        self.entry = entry
        self.call_timeout_s = call_timeout_s or sandbox.config.call_timeout_s
        self.max_observation_chars = max_observation_chars
        self._handle: EnvHandle | None = None
        self.turns = 0
        self.seed: int | None = None
        self.episode_return = 0.0
        self.done = True  # no episode before the first reset
        self.started = False
        self.last: Outcome | None = None

    # --- the episode ------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Outcome:
        """Start an episode from ``seed``. A failure (the source does not load, the constructor or reset
        raises, times out, or answers outside the contract) comes back as an Outcome with ``error``; the
        episode is then over at once. ``SandboxUnavailable`` when this machine cannot isolate the code."""
        if seed is not None and (type(seed) is not int or not -(2**63) <= seed < 2**63):
            raise ValueError(f"a seed is an integer within ±2**63 (the sandbox's range), got {seed!r}")
        self.turns, self.seed, self.episode_return, self.started = 0, seed, 0.0, True
        self.done = False
        handle, failure = self._fresh_handle()
        if failure is not None:
            return self._end(failure)
        result = handle.reset(seed=seed, timeout_s=self.call_timeout_s)
        if not result.ok:
            return self._end(_failure("reset", result))
        try:
            observation, info = check_reset_value(result.value)
        except ContractViolation as exc:
            return self._end(Outcome("", error=f"reset: {exc}", reason=exc.reason))
        self.last = Outcome(cut(observation, self.max_observation_chars), info=info)
        return self.last

    def step(self, action: str, timeout_s: float | None = None) -> Outcome:
        """Play ``action`` (a str: the caller checks its input first). After the episode is over, or
        before any reset, this raises ``RuntimeError`` (a caller's mistake, not the environment's)."""
        if type(action) is not str:
            raise TypeError(f"an action is a str (the agent's text), got {type(action).__name__}")
        if not self.started:
            raise RuntimeError("step() before reset(): call reset() to start an episode")
        if self.done:
            raise RuntimeError("the episode is over: call reset() to start another")
        assert self._handle is not None  # an episode in progress always has one
        deadline = self.call_timeout_s if timeout_s is None else min(timeout_s, self.call_timeout_s)
        result = self._handle.step(action, timeout_s=deadline)
        self.turns += 1
        if not result.ok:
            return self._end(_failure("step", result))
        try:
            step = check_step_value(result.value, REWARD_RANGE)
        except ContractViolation as exc:
            return self._end(Outcome("", error=f"step: {exc}", reason=exc.reason))
        outcome = Outcome(
            cut(step.observation, self.max_observation_chars),
            step.reward,
            step.terminated,
            step.truncated,
            step.info,
        )
        self.done = outcome.done
        if self.done:
            # The contract's return: the final reward of a terminated episode, 0 when truncated.
            self.episode_return = step.reward if step.terminated else 0.0
        self.last = outcome
        return outcome

    def solution(self) -> list[str] | None:
        """The environment's own play of the current episode (its ``solution()`` after this reset), or
        None when it fails or breaks the contract. Call it right after ``reset``."""
        if self._handle is None or not self._handle.alive or not self.started:
            return None
        result = self._handle.solution(timeout_s=self.call_timeout_s)
        if not result.ok:
            log.info("solution() of %s failed: %s: %s", self.entry.name, result.reason, result.error[:200])
            return None
        try:
            return check_solution_value(result.value)
        except ContractViolation as exc:
            log.info("solution() of %s broke the contract: %s", self.entry.name, exc)
            return None

    def close(self) -> None:
        """Close the instance (its worker stays with the sandbox); safe to call twice."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self.done = True

    # --- helpers ----------------------------------------------------------------------------------
    def _fresh_handle(self) -> tuple[EnvHandle, None] | tuple[None, Outcome]:
        """A new instance for every episode: an environment's state never leaks from one episode into
        the next, and a killed worker is replaced."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        try:
            opened = self.sandbox.open(self.entry.source, kwargs=dict(self.entry.env_kwargs))
        except SandboxFull as exc:
            return None, Outcome("", error=f"open: {exc}", reason="sandbox_full")
        # SandboxUnavailable (this machine lacks an isolation layer the configuration requires) is not
        # the environment's failure: it propagates, saying which layer and what fixes it.
        if not opened.ok:
            return None, _failure("open", opened)
        self._handle = opened.value
        return self._handle, None

    def _end(self, failure: Outcome) -> Outcome:
        """End the episode with a failure: truncated, reward 0, the error in the outcome and in its info."""
        log.info("%s failed: %s: %s", self.entry.name, failure.reason, failure.error[:300])
        self.done = True
        self.episode_return = 0.0
        message = failure.error[:2000]
        observation = cut(
            f"[the environment failed: {failure.reason}] {message}", min(self.max_observation_chars, 600)
        )
        info = {"error": message, "error_reason": failure.reason}
        self.last = Outcome(observation, 0.0, False, True, info, message, failure.reason)
        return self.last


def _failure(phase: str, result: CallResult) -> Outcome:
    """A failed sandbox call as an Outcome: its phase, status and reason code, and its message."""
    error = result.error or result.reason or str(result.status)
    if result.error_type and result.error_type not in error:
        error = f"{result.error_type}: {error}"
    reason = result.reason or str(result.status)
    return Outcome("", error=f"{phase}: {reason}: {error}", reason=reason)
