"""GEM's games (PyPI ``gem-llm``) as a held-out suite: multi-turn episodes in the sandbox, scored by winning.

    spade-rl eval --suite gem --limit 5
    spade-rl eval --suite gem --option gem.games=game:Mastermind-v0-hard,game:Sudoku-v0-easy
    spade-rl eval --suite gem --option 'gem.kwargs={"game:Mastermind-v0-easy": {"max_turns": 6}}'

An item is one episode of one game (``ctx.limit`` episodes per game, seeds ``ctx.seed + i``); it is
correct when GEM's game is solved (its dense rewards reach 1 on a step that ends the game; the mapping is
in :mod:`spade_rl.envs.external`). The games: :data:`spade_rl.envs.external.GEM_GAMES` (the default
plays six small ones). Needs ``gem-llm`` installed with ``--no-deps`` (its pins conflict with
spade-rl's reasoning-gym): ``pip install 'spade-rl[gem]' && pip install --no-deps gem-llm==0.1.0``.
Everything shared with the TextArena suite is in :mod:`spade_rl.evaluate._external_games`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from spade_rl.evaluate._external_games import ExternalGamesSuite


class GemSuite(ExternalGamesSuite):
    name: ClassVar[str] = "gem"
    OPTIONS: ClassVar[dict[str, Any]] = ExternalGamesSuite.options_for("gem")
