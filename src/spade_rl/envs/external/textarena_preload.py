"""Imported by sandbox workers that play TextArena games, before they harden themselves
(``SandboxConfig.preload``).

After hardening, a worker cannot import what it has not loaded, so ``textarena`` and the module of
every game :data:`spade_rl.envs.external.TEXTARENA_GAMES` lists are loaded here.
"""

import importlib

import textarena  # noqa: F401 - loaded for the adapter (textarena_adapter.py)

from spade_rl.envs.external import TEXTARENA_GAMES

for _module in sorted({game.module for game in TEXTARENA_GAMES.values()}):
    importlib.import_module(_module)
