"""Other projects' environments played in spade-rl: GEM (``gem-llm``) and TextArena (``textarena``) games.

    source = gem_source("game:GuessTheNumber-v0-hard")          # an environment source, like a design's
    source = textarena_source("TowerOfHanoi-v0", {"num_disks": 2})
    with Sandbox(external_sandbox_config(SandboxConfig(), ["gem"])) as sandbox:
        episodes = run_episodes(policy, sandbox, [EpisodeSpec(source, seed=0)], RolloutConfig())

Their code runs where environment code runs, in :mod:`spade_rl.sandbox`: the source of each game is
an adapter module (``gem_adapter.py``, ``textarena_adapter.py``, shipped as text, never imported here)
with one small ``*Env`` class appended that names the game, so that the validator, the archive, the
rollout and the evaluation treat it as any environment. The package itself is imported only inside a
worker, which loads it before it hardens itself (``gem_preload`` / ``textarena_preload`` in
``SandboxConfig.preload``: :func:`external_sandbox_config`). This module never imports either package;
it knows their games from the catalogues below, which list the games spade-rl has played and tested:

- ``GEM_GAMES`` / ``TEXTARENA_GAMES``: id -> :class:`ExternalGame` (the module of its class, whether
  spade-rl has a reference ``solution()`` for it, so that it can be validated for a training pool).
  The others are evaluated only. Games that download word lists at run time (GEM's and TextArena's
  Wordle, Hangman, WordSearch, Crosswords: ``nltk.download``) cannot work in a sandbox without network
  and are not listed; neither are TextArena's two-player games (their opponent would be a language
  model behind a web API).

How rewards, wins, observations and actions map is said in each adapter's docstring: in short, an
episode is won when the game says it is solved (GEM: its dense rewards reach 1 on a terminating step;
TextArena: its final reward is 1), and spade-rl's return is then 1, otherwise 0.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

PACKAGES = ("gem", "textarena")
PRELOAD = {
    "gem": "spade_rl.envs.external.gem_preload",
    "textarena": "spade_rl.envs.external.textarena_preload",
}
INSTALL = {
    "gem": "pip install 'spade-rl[gem]' && pip install --no-deps gem-llm==0.1.0",
    "textarena": "pip install 'spade-rl[textarena]'",
}
VERSIONS = {"gem": "gem-llm 0.1.0", "textarena": "textarena 0.7.4"}  # the versions the catalogues are of
_HERE = Path(__file__).parent


@dataclass(frozen=True)
class ExternalGame:
    module: str  # the module of the game's class (preloaded by the workers)
    solvable: bool  # spade-rl's adapter has a reference solution(): it can be validated for a pool


def _gem(module: str, solvable: bool) -> ExternalGame:
    return ExternalGame(f"gem.envs.game_env.{module}", solvable)


GEM_GAMES: dict[str, ExternalGame] = {
    "game:GuessTheNumber-v0-easy": _gem("guess_the_number", True),
    "game:GuessTheNumber-v0-hard": _gem("guess_the_number", True),
    "game:GuessTheNumber-v0-random": _gem("guess_the_number", True),
    "game:Mastermind-v0-easy": _gem("mastermind", True),
    "game:Mastermind-v0-hard": _gem("mastermind", True),
    "game:Mastermind-v0-random": _gem("mastermind", True),
    "game:TowerofHanoi-v0-easy": _gem("tower_of_hanoi", True),
    "game:TowerofHanoi-v0-hard": _gem("tower_of_hanoi", True),
    "game:TowerofHanoi-v0-random": _gem("tower_of_hanoi", True),
    "game:Sudoku-v0-easy": _gem("sudoku", True),
    "game:Sudoku-v0-hard": _gem("sudoku", True),
    "game:Minesweeper-v0-easy": _gem("minesweeper", False),
    "game:Minesweeper-v0-hard": _gem("minesweeper", False),
    "game:FifteenPuzzle-v0-easy": _gem("fifteen_puzzle", False),
    "game:FifteenPuzzle-v0-hard": _gem("fifteen_puzzle", False),
    "game:Game2048-v0-easy": _gem("game_2048", False),
}


def _ta(game: str, solvable: bool) -> ExternalGame:
    return ExternalGame(f"textarena.envs.{game}.env", solvable)


TEXTARENA_GAMES: dict[str, ExternalGame] = {
    "GuessTheNumber-v0": _ta("GuessTheNumber", True),
    "GuessTheNumber-v0-hardcore": _ta("GuessTheNumber", True),
    "Mastermind-v0": _ta("Mastermind", True),
    "Mastermind-v0-hard": _ta("Mastermind", True),
    "TowerOfHanoi-v0": _ta("TowerOfHanoi", True),
    "TowerOfHanoi-v0-medium": _ta("TowerOfHanoi", True),
    "FrozenLake-v0": _ta("FrozenLake", True),
    "FrozenLake-v0-hardcore": _ta("FrozenLake", True),
    "Minesweeper-v0-small": _ta("Minesweeper", False),
    "LightsOut-v0": _ta("LightsOut", False),
}

CATALOGUES = {"gem": GEM_GAMES, "textarena": TEXTARENA_GAMES}
# The games each suite plays by default: small ones, one or two per kind of game.
DEFAULT_EVAL_GAMES = {
    "gem": (
        "game:GuessTheNumber-v0-easy",
        "game:Mastermind-v0-easy",
        "game:TowerofHanoi-v0-easy",
        "game:Sudoku-v0-easy",
        "game:Minesweeper-v0-easy",
        "game:FifteenPuzzle-v0-easy",
    ),
    "textarena": (
        "GuessTheNumber-v0",
        "Mastermind-v0",
        "TowerOfHanoi-v0",
        "FrozenLake-v0",
        "Minesweeper-v0-small",
    ),
}


def installed(package: str) -> bool:
    """Whether ``package`` (``gem`` or ``textarena``) can be imported, found without importing it."""
    return importlib.util.find_spec(package) is not None


def check_games(
    package: str, ids: Sequence[str], kwargs: Mapping | None = None, *, for_pool: bool, key: str
) -> None:
    """Raise ``ValueError`` for an id not in the catalogue, named twice, without a solution where a pool
    needs one, or with arguments that are not a table of JSON values; and when the package is missing.
    ``key`` names the setting in the messages (``pool.gem``, ``option gem.games``)."""
    catalogue = CATALOGUES[package]
    unknown = [i for i in ids if i not in catalogue]
    if unknown:
        raise ValueError(f"{key}: unknown {package} game(s) {unknown}; allowed: {', '.join(catalogue)}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{key}: a game is named twice in {list(ids)}")
    if for_pool:
        unsolved = [i for i in ids if not catalogue[i].solvable]
        if unsolved:
            solvable = [i for i, g in catalogue.items() if g.solvable]
            raise ValueError(
                f"{key}: {unsolved} have no reference solution in spade-rl, so they cannot be validated "
                f"for a training pool (evaluate them with spade-rl eval --suite {package}); games that "
                f"can: {', '.join(solvable)}"
            )
    for name, table in (kwargs or {}).items():
        if name not in ids:
            raise ValueError(f"{key}_kwargs.{name}: not one of the games named in {key} ({list(ids)})")
        if not isinstance(table, dict) or not all(isinstance(k, str) for k in table):
            raise ValueError(f"{key}_kwargs.{name} must be a table of constructor arguments, got {table!r}")
        try:
            json.dumps(table)
        except (TypeError, ValueError):
            raise ValueError(f"{key}_kwargs.{name} must hold plain values (numbers, text, lists)") from None
    if ids and not installed(package):
        raise ValueError(f"{key}: {package} games need the package {package}: {INSTALL[package]}")


def class_name(package: str, game_id: str) -> str:
    """The ``*Env`` class of a game's source, e.g. ``GemGuessTheNumberV0HardEnv``."""
    words = "".join(c if c.isalnum() else " " for c in game_id.removeprefix("game:")).split()
    prefix = "Gem" if package == "gem" else "TextArena"
    return prefix + "".join(w[:1].upper() + w[1:] for w in words) + "Env"


def gem_source(game_id: str, kwargs: Mapping | None = None) -> str:
    """The environment source of GEM game ``game_id`` made with ``kwargs`` (on top of GEM's registered
    ones); raises ``ValueError`` for a game not in :data:`GEM_GAMES`."""
    return _source("gem", game_id, kwargs, "_GemGame", "GEM_ID", "GEM_KWARGS")


def textarena_source(game_id: str, kwargs: Mapping | None = None) -> str:
    """The environment source of single-player TextArena game ``game_id`` made with ``kwargs`` (on top
    of TextArena's registered ones); raises ``ValueError`` for a game not in :data:`TEXTARENA_GAMES`."""
    return _source("textarena", game_id, kwargs, "_TextArenaGame", "TEXTARENA_ID", "TEXTARENA_KWARGS")


def _source(package: str, game_id: str, kwargs, base: str, id_attr: str, kwargs_attr: str) -> str:
    if game_id not in CATALOGUES[package]:
        raise ValueError(f"unknown {package} game {game_id!r}; allowed: {', '.join(CATALOGUES[package])}")
    adapter = (_HERE / f"{package}_adapter.py").read_text(encoding="utf-8")
    arguments = json.dumps(dict(kwargs or {}), sort_keys=True)
    return (
        f"{adapter}\n\nclass {class_name(package, game_id)}({base}):\n"
        f'    """The {package} game {game_id}."""\n\n'
        f"    {id_attr} = {game_id!r}\n"
        f"    {kwargs_attr} = {arguments!r}\n"
    )


def external_sandbox_config(base, packages: Iterable[str]):
    """``base`` (a ``SandboxConfig``) with the preload of each package in ``packages`` added, and time
    for a worker to load them (a second or two each on a small CPU)."""
    wanted = [PRELOAD[p] for p in packages if PRELOAD[p] not in base.preload]
    if not wanted:
        return base
    return replace(base, preload=(*base.preload, *wanted), start_timeout_s=max(base.start_timeout_s, 60.0))


def needed_imports(package: str) -> tuple[str, ...]:
    """The top-level modules a game source of ``package`` imports beyond the standard library (what its
    validation must allow)."""
    return ("gem", "numpy") if package == "gem" else ("textarena",)
