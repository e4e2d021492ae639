"""The taskset package that ``spade-rl envs export --format verifiers OUT`` writes (without verifiers).

    count = write_package(Path("out"), archive.export_jsonl, name="spade-games")

The package: ``pyproject.toml`` (setuptools, depending on ``spade-rl[verifiers]``) and its module, which
holds the environments as a JSONL export and exports a :class:`~spade_rl.interop.verifiers.games.
GamesTaskset` bound to that file, :class:`~spade_rl.interop.verifiers.games.GamesEnv` and the in-process
harness: verifiers' loader finds them by the id ``name`` (its module: ``name`` with ``_``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def write_package(out: Path, export: Any, name: str = "spade-games", *, valid_only: bool = True) -> int:
    """Write the taskset package ``name`` into ``out`` (a new or empty folder): its ``pyproject.toml`` and
    its module (``name`` with ``_``), which holds the environments (``export(path, valid_only=...)`` writes
    them as JSONL: ``Archive.export_jsonl``). Returns how many environments it holds."""
    if not NAME.match(name):
        raise ValueError(
            f"package name {name!r}: lower-case letters and digits in words joined by '-' (e.g. "
            "spade-games); verifiers imports its module by that name with '_'"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty folder: give a new folder for the package")
    module = name.replace("-", "_")
    package = out / module
    package.mkdir(parents=True)
    count = export(package / "envs.jsonl", valid_only=valid_only)
    (out / "pyproject.toml").write_text(_PYPROJECT.format(name=name, module=module, count=count))
    (package / "__init__.py").write_text(_MODULE.format(name=name, count=count))
    return count


_PYPROJECT = """\
# Written by `spade-rl envs export --format verifiers`: {count} environments as a verifiers v1 taskset.
# pip install -e .   then   vf-eval {name} -m MODEL --client.base-url URL --no-push
[project]
name = "{name}"
version = "0.1.0"
description = "Environments designed by spade-rl, played in spade-rl's sandbox, as a verifiers taskset"
requires-python = ">=3.11"
dependencies = ["spade-rl[verifiers]"]

[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["{module}"]

[tool.setuptools.package-data]
{module} = ["envs.jsonl"]
"""

_MODULE = '''\
"""The verifiers id ``{name}``: {count} environments exported by ``spade-rl envs export --format verifiers``,
each played in spade-rl's sandbox on one agent seat (spade_rl.interop.verifiers.games). Options:
``--env.with-hint true`` (show each environment's hint), ``--env.taskset.seeds N`` (seeds per environment),
``--env.config FILE`` / ``--env.overrides`` (spade-rl's rollout settings)."""

from pathlib import Path

from spade_rl.interop.verifiers.games import GamesEnv, GamesTaskset
from spade_rl.interop.verifiers.seats import InlineChatHarness


class Games(GamesTaskset):
    DATA = Path(__file__).with_name("envs.jsonl")


__all__ = ["Games", "GamesEnv", "InlineChatHarness"]
'''
