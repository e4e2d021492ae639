"""The `spade-rl` application: its commands, `python -m spade_rl`, and what `spade_rl.cli` offers."""

from __future__ import annotations

import inspect

import spade_rl.cli
from spade_rl.cli import common

COMMANDS = ["doctor", "design", "play", "run", "report", "eval", "experiment", "envs"]


def test_python_m_spade_rl_lists_every_command_in_order(spade):
    done = spade("--help")
    assert done.returncode == 0, done.stderr
    positions = [done.stdout.find(f"│ {name} ") for name in COMMANDS]
    assert -1 not in positions and positions == sorted(positions), done.stdout
    envs = spade("envs", "--help")
    assert all(name in envs.stdout for name in ("list", "show", "export", "import", "validate"))


def test_each_command_is_a_module_and_the_console_is_shared():
    for name in ("design", "doctor", "envs", "eval", "experiment", "play", "report", "run"):
        assert inspect.ismodule(getattr(spade_rl.cli, name)), name  # patchable as spade_rl.cli.<name>.<x>
    assert spade_rl.cli.console is common.console
    assert callable(spade_rl.cli.app) and callable(spade_rl.cli.main)
