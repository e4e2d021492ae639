"""Held-out environments: multi-turn episodes in the sandbox, scored by winning.

    spade-rl eval --suite envs --limit 8                                  # the reference environments
    spade-rl eval --suite envs --option envs.source=runs/r1               # a run's archive (valid envs)
    spade-rl eval --suite envs --option envs.source=pool.jsonl --option envs.envs=3,7
    spade-rl eval --suite envs --option envs.envs=sequence,tally             # held-out families

    result = EnvsSuite(source="reference").run(policy, ctx)   # ctx.limit episodes per environment

An item is one episode: environment ``e`` played from seed ``ctx.seed + i`` (id ``e/seed=S``),
without the hint, through :func:`spade_rl.rollout.run_episodes` and the evaluation's sandbox pool.
It is correct when the episode is won (terminated with reward 1); its score is the episode's return.
An environment that fails to load, raises (on the agent's action too), hangs past ``call_timeout_s`` or
breaks the contract ends its episodes (``stop_reason`` "env_error", with the error), never the suite:
those episodes are errors, counted and shown but left out of the win rate, since they say nothing of the
agent (:mod:`spade_rl.evaluate._episodes`).

Turn budgets: an environment of an archive or a pool is played with the constructor arguments it was
validated with (recorded in the archive); a reference environment keeps the budget its constructor
gives it by default (the reference schedule game allows 3 attempts, the maze 30 moves);
``turn_budget`` > 0 passes ``max_turns`` instead to every environment whose constructor takes it.
``max_turns`` caps every episode (the rollout's limit). Sources: ``reference`` (the built-in
environments), a run directory or ``archive.sqlite`` (its valid environments), or a JSONL pool
written by ``spade-rl envs export``.
Metrics, over the scored episodes: win rate, mean return, mean turns, and the win rate of each environment.

The defaults suit a small model on a CPU: 128 new tokens a turn, 2048 tokens of conversation, 8
episodes at once. 35 episodes at once with 4096-token conversations took the default model's
process past 24 GB (killed for memory); raise them on a GPU with ``--option envs.batch_episodes=...``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from spade_rl import __version__
from spade_rl.design.validate import constructor_kwargs
from spade_rl.envs import heldout, reference
from spade_rl.envs.sources import UnknownEnvironment, archive_entries, jsonl_entries
from spade_rl.evaluate._episodes import episode_item, episode_metrics, play_episodes
from spade_rl.evaluate.base import EvalContext, Suite, SuiteResult
from spade_rl.policy import Policy
from spade_rl.rollout import EpisodeSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldOutEnv:
    """One environment to evaluate: a label (its category in results), its source and setting."""

    label: str
    source: str
    setting: str = "games"
    env_kwargs: dict | None = None  # the constructor arguments it was validated with (archive, pool)


class EnvsSuite(Suite):
    name: ClassVar[str] = "envs"
    OPTIONS: ClassVar[dict[str, Any]] = {
        "source": "reference",  # reference, a run directory, an archive.sqlite file, or a JSONL pool
        "envs": (),  # reference names or archive/JSONL env ids to keep (empty: all)
        "episodes": 10,  # episodes per environment when the evaluation has no limit
        "max_envs": 50,  # archives and pools: at most this many environments (a seeded sample)
        "max_turns": 30,  # the cap on the turns of an episode
        "turn_budget": 0,  # > 0: passed as max_turns to environments that take it; 0: their default
        "max_new_tokens": 128,  # per turn
        "max_context_tokens": 2048,  # the whole conversation
        "call_timeout_s": 5.0,  # deadline of one reset or step
        "batch_episodes": 8,  # episodes played at once (memory grows with episodes x context)
        # Games only: a forced opening of every turn and the strings that end it, as in training
        # (rollout.action_prefix / action_stop: the CPU default plays with "\\boxed{" and "}").
        "action_prefix": "",
        "action_stop": (),
        # The system prompt of every game episode ("": the rollout's default for games), for a model
        # trained with another one (rollout.system_prompts.games): evaluated under the prompt it knows.
        "system_prompt": "",
        # Reference environments only: constructor arguments per name, as [pool.reference_kwargs] gives
        # them in training ({"guess": {"high": 20}}: the sizes the CPU default trains at).
        "env_kwargs": {},
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        o = self.options
        for key in ("episodes", "max_envs", "max_turns", "max_new_tokens", "max_context_tokens"):
            if o[key] < 1:
                raise ValueError(f"option envs.{key} must be at least 1, got {o[key]}")
        if o["turn_budget"] < 0 or o["call_timeout_s"] <= 0 or o["batch_episodes"] < 1:
            raise ValueError(
                "option envs.turn_budget must be >= 0, call_timeout_s > 0 and batch_episodes >= 1"
            )
        if o["max_new_tokens"] >= o["max_context_tokens"]:
            raise ValueError("option envs.max_new_tokens must be smaller than envs.max_context_tokens")
        self._check_env_kwargs()
        self._envs: list[HeldOutEnv] | None = None
        self.all_environments()  # a bad source or id fails here, before any model is loaded

    def _check_env_kwargs(self) -> None:
        table = self.options["env_kwargs"]
        if isinstance(table, str):  # the command line: --option 'envs.env_kwargs={"guess": {"high": 20}}'
            try:
                table = self.options["env_kwargs"] = json.loads(table)
            except json.JSONDecodeError as exc:
                raise ValueError(f"option envs.env_kwargs: not JSON ({exc}): {table!r}") from None
        if not isinstance(table, dict):
            raise ValueError(f"option envs.env_kwargs must be a table of name -> arguments, got {table!r}")
        if table and self.options["source"] != "reference":
            raise ValueError(
                "option envs.env_kwargs applies to reference environments only; an archive's or a pool's "
                "environments are played with the arguments they were validated with"
            )
        for name, kwargs in table.items():
            if name not in reference.ALL and name not in heldout.NAMES:
                raise ValueError(
                    f"option envs.env_kwargs.{name}: unknown reference environment; allowed: "
                    f"{', '.join(reference.ALL)}, and the held-out families {', '.join(heldout.NAMES)}"
                )
            if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
                raise ValueError(
                    f"option envs.env_kwargs.{name} must be a table of constructor arguments, got {kwargs!r}"
                )

    def all_environments(self) -> list[HeldOutEnv]:
        """Every environment of the source that the options select (loaded once)."""
        if self._envs is None:
            envs = load_environments(self.options["source"], self.options["envs"])
            table = self.options["env_kwargs"]
            self._envs = [
                replace(e, env_kwargs=dict(table[e.label])) if e.label in table else e for e in envs
            ]
        return self._envs

    def environments(self, seed: int = 0) -> list[HeldOutEnv]:
        """The environments to play: all, or a seeded sample of ``max_envs`` from a larger pool."""
        envs = self.all_environments()
        if self.options["source"] != "reference" and len(envs) > self.options["max_envs"]:
            chosen = sorted(random.Random(seed).sample(range(len(envs)), self.options["max_envs"]))
            envs = [envs[i] for i in chosen]
        return envs

    def version(self) -> str:
        digest = hashlib.sha256()
        for env in self.all_environments():
            digest.update(f"{env.label}\0{env.source}\0".encode("utf-8", "surrogatepass"))
            if env.env_kwargs:  # other sizes are other environments (older versions had none)
                digest.update(json.dumps(env.env_kwargs, sort_keys=True).encode())
        return f"spade-rl {__version__} envs {self.options['source']} {digest.hexdigest()[:12]}"

    def run(self, policy: Policy, ctx: EvalContext) -> SuiteResult:
        started = time.perf_counter()
        o = self.options
        envs = self.environments(ctx.seed)
        episodes_each = ctx.limit or o["episodes"]
        specs = [
            EpisodeSpec(
                env.source,
                seed=ctx.seed + i,
                setting=env.setting,
                env_kwargs=self._env_kwargs(env),
                tag=(env.label, ctx.seed + i),
            )
            for env in envs
            for i in range(episodes_each)
        ]
        episodes = play_episodes(policy, ctx.sandbox, specs, o, ctx)
        items = [episode_item(episode, "env") for episode in episodes]
        return SuiteResult(
            self.name,
            self.version(),
            items,
            metrics=episode_metrics(items, "env", mean_return=True),
            config={
                **{k: list(v) if isinstance(v, tuple) else v for k, v in o.items()},
                "seed": ctx.seed,
                "limit": ctx.limit,
                "episodes_per_env": episodes_each,
                "environments": [env.label for env in envs],
                "temperature": ctx.sampling.temperature,
            },
            seconds=time.perf_counter() - started,
        )

    def _env_kwargs(self, env: HeldOutEnv) -> dict:
        """The recorded constructor arguments (none for a reference environment); ``turn_budget`` > 0
        replaces their ``max_turns`` where the constructor takes it."""
        recorded = dict(env.env_kwargs or {})
        budget = self.options["turn_budget"]
        if budget <= 0:
            return recorded
        recorded.pop("max_turns", None)
        return constructor_kwargs(env.source, budget, recorded)


def load_environments(source: str, wanted: tuple[str, ...] = ()) -> list[HeldOutEnv]:
    """The environments of ``source``: "reference", a run directory or archive file (valid environments),
    or a JSONL pool (valid lines). ``wanted`` keeps only those names (reference) or ids (archive, pool).
    Raises ``ValueError`` saying what is wrong with ``source`` or ``wanted``."""
    if source == "reference":
        unknown = [name for name in wanted if name not in reference.ALL and name not in heldout.NAMES]
        if unknown:
            raise ValueError(
                f"option envs.envs: unknown reference environment(s) {unknown}; allowed: "
                f"{', '.join(reference.NAMES)}, the held-out {', '.join(reference.HELD_OUT)}, and the "
                f"held-out families {', '.join(heldout.NAMES)}"
            )
        # Without a selection: the reference environments, never the held-out ones (named only). The
        # held-out families (spade_rl.envs.heldout) are played only by name, in the order given.
        if not wanted:
            return [HeldOutEnv(n, reference.source(n), reference.SETTINGS[n]) for n in reference.NAMES]
        envs = [
            HeldOutEnv(n, reference.source(n), reference.SETTINGS[n]) for n in reference.ALL if n in wanted
        ]
        return envs + [
            HeldOutEnv(n, heldout.source(n), heldout.SETTINGS[n]) for n in wanted if n in heldout.NAMES
        ]
    if not Path(source).exists():
        raise ValueError(
            f"option envs.source: {source!r} is neither 'reference' nor an existing run directory, "
            "archive.sqlite file or JSONL pool"
        )
    ids = _ids(wanted)
    try:
        if source.endswith(".jsonl"):
            entries = jsonl_entries(source, ids)
        else:
            entries = archive_entries(source, ids)
    except UnknownEnvironment as exc:
        raise ValueError(f"option envs.{'envs' if ids else 'source'}: {exc}") from None
    return [HeldOutEnv(e.name, e.source, e.setting, e.env_kwargs) for e in entries]


def _ids(wanted: tuple[str, ...]) -> tuple[int, ...]:
    if not all(w.isdigit() for w in wanted):
        raise ValueError(
            f"option envs.envs: give environment ids (numbers) for an archive or pool, got {wanted}"
        )
    return tuple(int(w) for w in wanted)
