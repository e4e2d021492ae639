"""The taskset package that ``spade-rl envs export --format verifiers OUT`` writes (without verifiers).

    count = write_package(Path("out"), archive.export_jsonl, name="spade-games")

The package: ``pyproject.toml`` (setuptools, depending on ``spade-rl[verifiers]``) and its module, which
holds the environments as a JSONL export and exports a :class:`~spade_rl.interop.verifiers.games.
GamesTaskset` bound to that file, :class:`~spade_rl.interop.verifiers.games.GamesEnv` and the in-process
harness: verifiers' loader finds them by the id ``name`` (its module: ``name`` with ``_``).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from typing import Any

NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def write_package(out: Path, export: Any, name: str = "spade-games") -> int:
    """Write the taskset package ``name`` into ``out`` (a new or empty folder): its ``pyproject.toml`` and
    its module (``name`` with ``_``), which holds the environments a task can play (``export(path,
    valid_only=True)`` writes them as JSONL: ``Archive.export_jsonl``; the ones the play-time guard flagged
    are left out). Returns how many it holds. Nothing is left in ``out`` when it fails."""
    if not NAME.match(name):
        raise ValueError(
            f"package name {name!r}: lower-case letters and digits in words joined by '-' (e.g. "
            "spade-games); verifiers imports its module by that name with '_'"
        )
    module = name.replace("-", "_")
    taken = _taken(module)
    if taken:
        raise ValueError(f"package name {name!r}: its module {module!r} {taken}; pick another name")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty folder: give a new folder for the package")
    made = not out.exists()
    package = out / module
    try:
        package.mkdir(parents=True)
        data = package / "envs.jsonl"
        export(data, valid_only=True)
        count = _playable_only(data)
        (out / "pyproject.toml").write_text(_PYPROJECT.format(name=name, module=module, count=count))
        (package / "__init__.py").write_text(_MODULE.format(name=name, count=count))
    except BaseException:
        shutil.rmtree(out if made else package, ignore_errors=True)
        if not made:
            (out / "pyproject.toml").unlink(missing_ok=True)
        raise
    return count


def _taken(module: str) -> str:
    """Why ``module`` cannot name the package ('' when it can): verifiers' loader imports its own taskset of
    that name first, and a standard module or spade-rl's and verifiers' own would be shadowed."""
    if module in sys.stdlib_module_names or module in ("spade_rl", "verifiers", "spade_selfplay"):
        return "is a standard module or one spade-rl needs"
    try:
        builtin = importlib.util.find_spec(f"verifiers.v1.tasksets.{module}") is not None
    except ModuleNotFoundError:  # verifiers is not installed here: nothing of its own to shadow
        builtin = False
    if builtin:
        return "is one of verifiers' own tasksets, which its loader would load instead"
    return ""


def _playable_only(path: Path) -> int:
    """Keep the lines of a JSONL export whose environment is valid and not flagged; their count."""
    from spade_rl.archive.jsonl import decode_env

    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and (record := decode_env(line).record).valid and not record.flagged:
            keep.append(line)
    path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
    return len(keep)


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
