"""Imported by sandbox workers that play GEM games, before they harden themselves (``SandboxConfig.preload``).

After hardening, a worker cannot import what it has not loaded (numpy's import fails under the seccomp
filter, and a worker dropped to an unprivileged uid may not read a Python under a 0700 folder), so
``gem`` and the module of every game :data:`spade_rl.envs.external.GEM_GAMES` lists are loaded here.
Importing ``gem`` imports ``reasoning_gym`` (GEM registers its tasks) and ``numpy``.
"""

import importlib
import logging

import gem  # noqa: F401 - loaded for the adapter (gem_adapter.py)

from spade_rl.envs.external import GEM_GAMES

logging.getLogger().handlers.clear()  # gem's import configures the root logger; the worker keeps none

for _module in sorted({game.module for game in GEM_GAMES.values()}):
    importlib.import_module(_module)
