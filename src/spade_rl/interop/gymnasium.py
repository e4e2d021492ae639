"""spade-rl's environments as Gymnasium environments (``gymnasium.Env``), played in the sandbox.

    import gymnasium
    import spade_rl.interop.gymnasium                                  # registers the "spade-rl/..." ids

    env = gymnasium.make("spade-rl/guess")                             # a reference environment by name
    env = gymnasium.make("spade-rl/Archive-v0", archive="runs/r1", env_id=3)     # a run's archive
    env = gymnasium.make("spade-rl/Archive-v0", jsonl="pool.jsonl", env_id=3)    # an exported pool
    env = gymnasium.make("spade-rl/Archive-v0", file="my_env.py")               # one source file
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(r"\\boxed{50}")
    env.close()

Without importing this module first, ``gymnasium.make("spade_rl.interop.gymnasium:spade-rl/guess")``
imports it itself (Gymnasium's ``module:id`` form). :func:`make` here does the same as
``gymnasium.make`` for these ids without the registry: ``make("guess")``, ``make(archive="runs/r1",
env_id=3)``, ``make(jsonl="pool.jsonl", env_id=3)``, ``make(file="my_env.py")``.

Observations and actions are text (:class:`EnvText`, a ``gymnasium.spaces.Text``). Each
:class:`SpadeEnv` owns a sandbox of one worker, started at the first ``reset`` and stopped by
``close()``; the environment's code runs only in that worker, never in this process. ``reset(seed=s)``
plays the environment's instance ``s``; ``reset()`` without a seed draws the next one from the Gymnasium
random generator (seeded by the last seeded reset), and ``info["seed"]`` says which was played.

An environment that fails (its source does not load, it raises, hangs past ``call_timeout_s``, crashes
its worker, or answers outside the contract: a reward outside [0, 1], wrong types) does not raise: the
episode ends with ``truncated=True``, reward 0, ``info["error"]`` (what happened) and
``info["error_reason"]`` (a stable code such as ``timeout``, ``crashed``, ``step_bad_type``). A failed
``reset`` returns an observation that says so and the same two keys; the next ``step`` ends the episode.
Bad input from the caller (an unknown name or id, an action that is not a str, a seed that is not a
non-negative integer) raises ``ValueError`` or ``TypeError`` saying what is allowed; a machine that lacks
an isolation layer the sandbox requires raises ``SandboxUnavailable`` at the first ``reset`` (see
``spade-rl doctor``).
"""

from __future__ import annotations

import dataclasses
import string
from typing import Any, ClassVar

import gymnasium
from gymnasium import spaces

from spade_rl.envs import reference
from spade_rl.envs.sources import (
    EnvEntry,
    UnknownEnvironment,
    archive_entries,
    file_entry,
    jsonl_entries,
    reference_entry,
)
from spade_rl.interop.gym_episode import Outcome, SandboxedEpisode
from spade_rl.sandbox import Sandbox, SandboxConfig

NAMESPACE = "spade-rl"
ARCHIVE_ID = f"{NAMESPACE}/Archive-v0"
MAX_TEXT = 65536  # the longest observation (longer ones are cut) and action
SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"


class EnvText(spaces.Text):
    """A text space for environment observations and agents' actions: any str of at most ``max_length``
    characters that is valid text (encodable as UTF-8). An environment writes whatever characters it
    likes (``×``, ``…``, emoji), so ``contains`` does not restrict them to a character set; ``sample``
    draws from printable ASCII (a random agent's junk, as the validator's probes send)."""

    def __init__(self, max_length: int = MAX_TEXT, *, seed: int | None = None):
        super().__init__(max_length, min_length=0, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        if type(x) is not str or len(x) > self.max_length:
            return False
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return False
        return True

    def __repr__(self) -> str:
        return f"EnvText(max_length={self.max_length})"


class SpadeEnv(gymnasium.Env[str, str]):
    """One spade-rl environment as a ``gymnasium.Env``; see the module docstring.

    Give exactly one of ``name`` (a reference environment), ``archive`` (a run directory or
    ``archive.sqlite``) with ``env_id``, ``jsonl`` (a pool from ``spade-rl envs export``) with
    ``env_id``, or ``file`` (one source file). ``env_kwargs`` are passed to the environment's constructor
    over the ones it was validated with. ``sandbox`` replaces the default isolation settings (its pool is
    always one worker). ``render_mode="ansi"``: ``render()`` returns the latest observation."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        name: str | None = None,
        *,
        archive: str | None = None,
        jsonl: str | None = None,
        file: str | None = None,
        env_id: int | None = None,
        env_kwargs: dict | None = None,
        call_timeout_s: float = 5.0,
        max_observation_chars: int = MAX_TEXT,
        sandbox: SandboxConfig | None = None,
        render_mode: str | None = None,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if not 64 <= max_observation_chars <= MAX_TEXT:
            raise ValueError(
                f"max_observation_chars must be from 64 to {MAX_TEXT}, got {max_observation_chars!r}"
            )
        if not call_timeout_s > 0:
            raise ValueError(f"call_timeout_s must be positive, got {call_timeout_s!r}")
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise TypeError(
                f"env_kwargs must be a dict of constructor arguments, got {type(env_kwargs).__name__}"
            )
        self.entry = resolve(name, archive=archive, jsonl=jsonl, file=file, env_id=env_id)
        if env_kwargs:
            self.entry = dataclasses.replace(self.entry, env_kwargs={**self.entry.env_kwargs, **env_kwargs})
        self.render_mode = render_mode
        self.observation_space = EnvText(max_observation_chars)
        self.action_space = EnvText(MAX_TEXT)
        self._sandbox_config = dataclasses.replace(
            sandbox or SandboxConfig(), pool_size=1, max_workers=1, call_timeout_s=call_timeout_s
        )
        self._call_timeout_s = call_timeout_s
        self._max_observation_chars = max_observation_chars
        self._sandbox: Sandbox | None = None
        self._episode: SandboxedEpisode | None = None
        self._last_observation = ""
        self._failed_reset: Outcome | None = None  # a reset that failed, until the step that ends it

    @property
    def hint(self) -> str:
        """The environment's privileged hint (SPADE's designer writes one per design); empty if none."""
        return self.entry.hint

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Start an episode: instance ``seed``, or the next seed of the Gymnasium generator. ``options``
        is accepted for the API and must be empty or None (these environments take none)."""
        if seed is not None and (type(seed) is not int or not 0 <= seed < 2**63):
            raise ValueError(f"seed must be an integer from 0 to 2**63 - 1, got {seed!r}")
        super().reset(seed=seed)
        if options:
            raise ValueError(f"reset() takes no options for spade-rl environments, got {sorted(options)}")
        played = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        outcome = self._episode_driver().reset(played)
        self._last_observation = outcome.observation
        self._failed_reset = outcome if outcome.failed else None
        return outcome.observation, {**outcome.info, "seed": played}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if type(action) is not str:
            raise TypeError(f"an action is a str (the agent's text), got {type(action).__name__}")
        if len(action) > self.action_space.max_length:
            raise ValueError(
                f"the action has {len(action)} characters; the action space allows at most "
                f"{self.action_space.max_length}"
            )
        episode = self._episode
        if episode is None or not episode.started:
            raise RuntimeError("step() before reset(): call reset() first")
        if self._failed_reset is not None:  # this step ends the episode that could not start
            failed, self._failed_reset = self._failed_reset, None
            return self._answer(failed)
        if episode.done:
            raise RuntimeError("the episode is over: call reset() to start another")
        return self._answer(episode.step(action))

    def solution(self) -> list[str] | None:
        """The environment's own winning play of the current episode (call it right after ``reset``), or
        None when the environment fails to give one. For tests and demonstrations."""
        return None if self._episode is None else self._episode.solution()

    def render(self) -> str | None:
        return self._last_observation if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Stop the environment's worker; calling it again does nothing."""
        if self._episode is not None:
            self._episode.close()
            self._episode = None
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        super().close()

    def __repr__(self) -> str:
        return f"SpadeEnv({self.entry.name!r}, from {self.entry.origin})"

    # --- helpers ----------------------------------------------------------------------------------
    def _episode_driver(self) -> SandboxedEpisode:
        if self._episode is None:
            self._sandbox = Sandbox(self._sandbox_config)
            self._episode = SandboxedEpisode(
                self._sandbox,
                self.entry,
                call_timeout_s=self._call_timeout_s,
                max_observation_chars=self._max_observation_chars,
            )
        return self._episode

    def _answer(self, outcome: Outcome) -> tuple[str, float, bool, bool, dict]:
        self._last_observation = outcome.observation
        return outcome.observation, outcome.reward, outcome.terminated, outcome.truncated, dict(outcome.info)


def resolve(
    name: str | None = None,
    *,
    archive: str | None = None,
    jsonl: str | None = None,
    file: str | None = None,
    env_id: int | None = None,
) -> EnvEntry:
    """The one environment that these arguments name; ``ValueError`` (``UnknownEnvironment``) saying
    what is wrong and what is allowed."""
    given = [k for k, v in (("name", name), ("archive", archive), ("jsonl", jsonl), ("file", file)) if v]
    if len(given) != 1:
        raise UnknownEnvironment(
            "give exactly one of name (a reference environment: "
            f"{', '.join(reference.ALL)}), archive= with env_id=, jsonl= with env_id=, or file=; "
            f"got {', '.join(given) or 'none'}"
        )
    if env_id is not None and (type(env_id) is not int or env_id < 1):
        raise UnknownEnvironment(f"env_id must be a positive integer (an archive id), got {env_id!r}")
    if name is not None:
        if env_id is not None:
            raise UnknownEnvironment("env_id goes with archive= or jsonl=, not with a reference name")
        return reference_entry(name)
    if file is not None:
        if env_id is not None:
            raise UnknownEnvironment("env_id goes with archive= or jsonl=, not with file=")
        return file_entry(file)
    if env_id is None:
        where = "archive" if archive else "jsonl"
        raise UnknownEnvironment(f"{where}= needs env_id= (the id of one valid environment in it)")
    entries = archive_entries(archive, (env_id,)) if archive else jsonl_entries(jsonl, (env_id,))
    return entries[0]


def make(
    name: str | None = None,
    *,
    archive: str | None = None,
    jsonl: str | None = None,
    file: str | None = None,
    env_id: int | None = None,
    **kwargs: Any,
) -> gymnasium.Env:
    """``gymnasium.make`` of the matching ``spade-rl/...`` id (so with Gymnasium's checks and wrappers):
    ``make("guess")``, ``make(archive="runs/r1", env_id=3)``, ``make(file="my_env.py")``. Other keyword
    arguments (``call_timeout_s``, ``env_kwargs``, ``max_episode_steps``, ...) go to ``gymnasium.make``."""
    register_envs()
    if name is not None and not (archive or jsonl or file):
        resolve(name, env_id=env_id)  # the clear message for an unknown name, before Gymnasium's
        return gymnasium.make(f"{NAMESPACE}/{name}", **kwargs)
    where = {"name": name, "archive": archive, "jsonl": jsonl, "file": file, "env_id": env_id}
    return gymnasium.make(ARCHIVE_ID, **where, **kwargs)


def register_envs() -> None:
    """Register ``spade-rl/<reference name>`` for every reference environment and ``spade-rl/Archive-v0``
    for archives, pools and files (idempotent; this module calls it when imported)."""
    entry_point = f"{__name__}:SpadeEnv"
    for name in reference.ALL:
        env_id = f"{NAMESPACE}/{name}"
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=entry_point, kwargs={"name": name})
    if ARCHIVE_ID not in gymnasium.registry:
        gymnasium.register(ARCHIVE_ID, entry_point=entry_point)


register_envs()
