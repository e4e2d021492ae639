"""What the ``gem`` and ``textarena`` suites share: other projects' games played as held-out episodes.

An item is one episode: game ``g`` played from seed ``ctx.seed + i`` (id ``g/seed=S``), without a hint,
through :func:`spade_rl.rollout.run_episodes`, in a sandbox of the suite's own whose workers preload
the package (:func:`spade_rl.envs.external.external_sandbox_config`; the game's code runs only there).
It is correct when the episode is won, by the game's own definition of winning (see
:mod:`spade_rl.envs.external`); its score is the episode's return (1 for a win, else 0). A move the game
rejects is the agent's (scored, as the game scores it); an episode that the game ends by raising (on the
agent's action too), a timeout or a contract violation (``stop_reason`` "env_error") is an error of that
episode, never of the suite: counted, shown, and left out of the metrics
(:mod:`spade_rl.evaluate._episodes`). Metrics, over the scored episodes: win rate, mean turns and the
win rate of each game. Without the package installed the suite is unavailable (``SuiteUnavailable``):
``spade-rl eval`` without ``--suite`` skips it, saying what to install.

Turn budgets: each game keeps its own (GEM's and TextArena's registered ones); ``max_turns`` caps every
episode on top of it (the rollout's limit; an episode cut there is not won), and lowers a GEM game's own
budget to it when that is larger, as a training run's ``rollout.max_turns`` does, so that GEM's
instructions state the budget the episode has. The defaults suit a small
model on a CPU (128 new tokens a turn, 2048 tokens of conversation, 8 episodes at once).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time
from typing import Any, ClassVar

from spade_rl import __version__
from spade_rl.design.validate import constructor_kwargs
from spade_rl.envs import external
from spade_rl.evaluate._episodes import episode_item, episode_metrics, play_episodes
from spade_rl.evaluate.base import SUITE_INSTALL, EvalContext, Suite, SuiteResult, SuiteUnavailable
from spade_rl.policy import Policy
from spade_rl.rollout import EpisodeSpec
from spade_rl.sandbox import Sandbox

DISTRIBUTIONS = {"gem": "gem-llm", "textarena": "textarena"}


class ExternalGamesSuite(Suite):
    """A suite of one package's games; subclasses set ``name`` (the package) and ``OPTIONS``."""

    name: ClassVar[str]

    @staticmethod
    def options_for(package: str) -> dict[str, Any]:
        return {
            "games": external.DEFAULT_EVAL_GAMES[package],  # ids of the package's catalogue
            "kwargs": {},  # id -> constructor arguments, on top of the registered ones (JSON on the CLI)
            "episodes": 10,  # episodes per game when the evaluation has no limit
            "max_turns": 30,  # the cap on the turns of an episode
            "max_new_tokens": 128,  # per turn
            "max_context_tokens": 2048,  # the whole conversation
            "call_timeout_s": 5.0,  # deadline of one reset or step
            "batch_episodes": 8,  # episodes played at once (memory grows with episodes x context)
            # A forced opening of every turn and the strings that end it, as in training
            # (rollout.action_prefix / action_stop: the CPU default plays with "\\boxed{" and "}").
            "action_prefix": "",
            "action_stop": (),
            # The system prompt of every game episode ("": the rollout's default for games), for a model
            # trained with another one (rollout.system_prompts.games): evaluated under the prompt it knows.
            "system_prompt": "",
        }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        o, key = self.options, self.name
        if not external.installed(key):  # before the games, so that eval without --suite can skip it
            raise SuiteUnavailable(
                f"suite {key!r} needs the package {key!r}, which is not installed: {SUITE_INSTALL[key]}"
            )
        for name in ("episodes", "max_turns", "max_new_tokens", "max_context_tokens", "batch_episodes"):
            if o[name] < 1:
                raise ValueError(f"option {key}.{name} must be at least 1, got {o[name]}")
        if o["call_timeout_s"] <= 0:
            raise ValueError(f"option {key}.call_timeout_s must be positive, got {o['call_timeout_s']}")
        if o["max_new_tokens"] >= o["max_context_tokens"]:
            raise ValueError(f"option {key}.max_new_tokens must be smaller than {key}.max_context_tokens")
        if isinstance(o["kwargs"], str):  # the command line: --option 'gem.kwargs={"game:...": {...}}'
            try:
                o["kwargs"] = json.loads(o["kwargs"])
            except json.JSONDecodeError as exc:
                raise ValueError(f"option {key}.kwargs: not JSON ({exc}): {o['kwargs']!r}") from None
        if not isinstance(o["kwargs"], dict):
            raise ValueError(
                f"option {key}.kwargs must be a table of game id -> arguments, got {o['kwargs']!r}"
            )
        if not o["games"]:
            raise ValueError(f"option {key}.games: name at least one game")
        external.check_games(key, o["games"], o["kwargs"], for_pool=False, key=f"option {key}.games")

    def sources(self) -> dict[str, str]:
        """Game id -> its environment source (the adapter and the game's class)."""
        make = external.gem_source if self.name == "gem" else external.textarena_source
        return {game: make(game, self.options["kwargs"].get(game)) for game in self.options["games"]}

    def version(self) -> str:
        try:
            installed = f"{DISTRIBUTIONS[self.name]} {importlib.metadata.version(DISTRIBUTIONS[self.name])}"
        except importlib.metadata.PackageNotFoundError:
            installed = f"{DISTRIBUTIONS[self.name]} (not installed)"
        digest = hashlib.sha256()
        for game, source in self.sources().items():
            digest.update(f"{game}\0{source}\0".encode())
        return f"{installed} spade-rl {__version__} {digest.hexdigest()[:12]}"

    def run(self, policy: Policy, ctx: EvalContext) -> SuiteResult:
        started = time.perf_counter()
        o = self.options
        episodes_each = ctx.limit or o["episodes"]
        # A game whose adapter takes max_turns (GEM's) lowers its own budget to the cap, as in training.
        specs = [
            EpisodeSpec(
                source,
                seed=ctx.seed + i,
                env_kwargs=constructor_kwargs(source, o["max_turns"]),
                tag=(game, ctx.seed + i),
            )
            for game, source in self.sources().items()
            for i in range(episodes_each)
        ]
        # The evaluation's sandbox settings, with the package preloaded by every worker.
        with Sandbox(external.external_sandbox_config(ctx.sandbox.config, [self.name])) as sandbox:
            episodes = play_episodes(policy, sandbox, specs, o, ctx)
        items = [episode_item(episode, "game", last_observation=True) for episode in episodes]
        return SuiteResult(
            self.name,
            self.version(),
            items,
            metrics=episode_metrics(items, "game"),
            config={
                **{k: list(v) if isinstance(v, tuple) else v for k, v in o.items()},
                "seed": ctx.seed,
                "limit": ctx.limit,
                "episodes_per_game": episodes_each,
                "temperature": ctx.sampling.temperature,
            },
            seconds=time.perf_counter() - started,
        )
