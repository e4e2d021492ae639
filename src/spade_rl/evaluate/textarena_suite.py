"""TextArena's single-player games (PyPI ``textarena``) as a held-out suite: multi-turn episodes in the
sandbox, scored by winning.

    spade-rl eval --suite textarena --limit 5
    spade-rl eval --suite textarena --option textarena.games=TowerOfHanoi-v0,FrozenLake-v0

An item is one episode of one game (``ctx.limit`` episodes per game, seeds ``ctx.seed + i``); it is
correct when TextArena ends the game with its reward 1 (a win; the mapping, and how a ``\\boxed{}``
answer becomes TextArena's ``[move]``, are in :mod:`spade_rl.envs.external`). Only single-player games
(:data:`spade_rl.envs.external.TEXTARENA_GAMES`): the two-player ones need an opponent, and
TextArena's are language models behind web APIs. Needs ``pip install 'spade-rl[textarena]'``.
Everything shared with the GEM suite is in :mod:`spade_rl.evaluate._external_games`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from spade_rl.evaluate._external_games import ExternalGamesSuite


class TextArenaSuite(ExternalGamesSuite):
    name: ClassVar[str] = "textarena"
    OPTIONS: ClassVar[dict[str, Any]] = ExternalGamesSuite.options_for("textarena")
