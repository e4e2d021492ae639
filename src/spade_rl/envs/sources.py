"""Where an environment to play comes from: a reference name, an archive, a JSONL pool or a file.

    >>> from spade_rl.envs.sources import reference_entry
    >>> entry = reference_entry("guess")
    >>> entry.name, entry.setting, "class GuessEnv" in entry.source
    ('guess', 'games', True)

Every function here only reads text (the archive through SQLite, a pool line as JSON, a file as UTF-8):
none executes an environment. The Gymnasium adapter (:mod:`spade_rl.interop.gymnasium`), the OpenEnv
server (:mod:`spade_rl.interop.openenv_server`) and the ``envs`` evaluation suite
(:func:`spade_rl.evaluate.envs_suite.load_environments`) all resolve what the user named through them, so
that all refuse the same bad names and ids with the same messages. Only environments that passed validation
are offered from an archive or a pool: a rejected design may not even load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from spade_rl.envs import heldout, reference
from spade_rl.envs.loader import find_env_classes


class UnknownEnvironment(ValueError):
    """A name, id, archive, pool or file that names no playable environment; the message says what was
    wrong and what is allowed."""


@dataclass(frozen=True)
class EnvEntry:
    """One environment to play: a name (unique within what is served), its source text, the constructor
    arguments it was validated with, its setting and its hint (privileged: never shown by default)."""

    name: str
    source: str
    env_kwargs: dict = field(default_factory=dict)
    setting: str = "games"
    hint: str = ""
    origin: str = ""  # where it came from, for messages: "reference", "runs/r1/archive.sqlite#3", ...


# What a served environment's name may be: it is a path segment of the server's URLs.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


# Every environment that can be named: the reference environments (the training pool's and the held-out
# games nim and compare), then the held-out families of spade_rl.envs.heldout (the primary yardstick).
NAMED: tuple[str, ...] = reference.ALL + heldout.NAMES


def named_list() -> str:
    """The names allowed, for messages: the references, the held-out games, the held-out families."""
    return (
        f"{', '.join(reference.NAMES)}, the held-out games {', '.join(reference.HELD_OUT)}, and the "
        f"held-out families {', '.join(heldout.NAMES)}"
    )


def reference_entry(name: str) -> EnvEntry:
    """The environment named ``name``: a reference environment (the training references and the held-out
    games alike) or a held-out family, with its hint; ``UnknownEnvironment`` lists the allowed names."""
    if name in reference.ALL:
        return EnvEntry(
            name,
            reference.source(name),
            {},
            reference.SETTINGS[name],
            reference.HINTS.get(name, ""),
            "reference",
        )
    if name in heldout.NAMES:
        return EnvEntry(
            name, heldout.source(name), {}, heldout.SETTINGS[name], heldout.HINTS[name], "held-out"
        )
    raise UnknownEnvironment(f"unknown environment name {name!r}; allowed names: {named_list()}")


def role(name: str) -> str:
    """What a named environment is for: "pool" (trained on by default, shown to the designer), "held-out"
    (nim, compare: never in a default), "held-out family" (the primary yardstick: never trained on, never
    shown to the designer)."""
    if name in reference.NAMES:
        return "pool"
    return "held-out" if name in reference.HELD_OUT else "held-out family"


def archive_path(path: str | Path) -> Path:
    """The ``archive.sqlite`` of a run directory, or the archive file itself."""
    path = Path(path)
    return path / "archive.sqlite" if path.is_dir() else path


def archive_entries(path: str | Path, ids: tuple[int, ...] = ()) -> list[EnvEntry]:
    """The valid environments of a run directory or archive file, oldest first (all of them, or those
    ``ids``), named ``env<id>``. ``UnknownEnvironment`` for a missing or unreadable archive, an id that
    is not there, or one that validation rejected."""
    from spade_rl.archive import Archive, ArchiveError

    file = archive_path(path)
    if not file.is_file():
        raise UnknownEnvironment(
            f"no archive at {file}: give a run directory (holding archive.sqlite) or an archive.sqlite file"
        )
    _check_ids(ids)
    try:
        with Archive(file, readonly=True) as archive:
            valid = archive.ids(valid=True)
            for env_id in ids:
                if env_id in valid:
                    continue
                try:
                    record = archive.get(env_id)
                except KeyError:
                    raise UnknownEnvironment(
                        f"no environment {env_id} in {file}; its valid ids: {_id_list(valid)}"
                    ) from None
                raise UnknownEnvironment(
                    f"environment {env_id} in {file} was rejected by validation ({record.reason}): only "
                    f"valid environments can be played; its valid ids: {_id_list(valid)}"
                )
            records = [archive.get(i) for i in (ids or valid)]
    except ArchiveError as exc:
        raise UnknownEnvironment(f"cannot read the archive {file}: {exc}") from None
    if not records:
        raise UnknownEnvironment(f"the archive {file} holds no valid environment")
    return [
        EnvEntry(f"env{r.env_id}", r.source, r.env_kwargs or {}, r.setting, r.hint, f"{file}#{r.env_id}")
        for r in records
    ]


def jsonl_entries(path: str | Path, ids: tuple[int, ...] = ()) -> list[EnvEntry]:
    """The valid environments of a JSONL pool written by ``spade-rl envs export`` (all, or those ``ids``
    as the exporting archive numbered them), named ``env<id>``. ``UnknownEnvironment`` for a missing file,
    a malformed line (its number), an id that is not there, or one that validation rejected."""
    from spade_rl.archive.jsonl import read_envs

    file = Path(path)
    if not file.is_file():
        raise UnknownEnvironment(f"no JSONL pool at {file}: give a file written by `spade-rl envs export`")
    _check_ids(ids)
    valid, rejected = {}, {}
    try:
        for number, item in read_envs(file):
            if isinstance(item, ValueError):
                raise UnknownEnvironment(f"{file}:{number}: not an environment line: {item}")
            record = item.record
            (valid if record.valid else rejected)[record.env_id] = record
    except OSError as exc:
        raise UnknownEnvironment(f"cannot read {file}: {exc}") from None
    for env_id in ids:
        if env_id in rejected:
            raise UnknownEnvironment(
                f"environment {env_id} in {file} was rejected by validation ({rejected[env_id].reason}): "
                f"only valid environments can be played; its valid ids: {_id_list(valid)}"
            )
        if env_id not in valid:
            raise UnknownEnvironment(f"no environment {env_id} in {file}; its valid ids: {_id_list(valid)}")
    records = [valid[i] for i in (ids or valid)]
    if not records:
        raise UnknownEnvironment(f"the pool {file} holds no valid environment")
    return [
        EnvEntry(f"env{r.env_id}", r.source, r.env_kwargs or {}, r.setting, r.hint, f"{file}#{r.env_id}")
        for r in records
    ]


def file_entry(path: str | Path, name: str | None = None) -> EnvEntry:
    """The environment in one source file, named after the file's stem unless ``name`` is given. The
    file is parsed (never run) to check that it defines exactly one ``*Env`` class."""
    file = Path(path)
    if not file.is_file():
        raise UnknownEnvironment(f"no environment file at {file}")
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UnknownEnvironment(f"cannot read {file}: {exc}") from None
    try:
        classes = find_env_classes(source)
    except ValueError as exc:  # ContractViolation("syntax_error", ...)
        raise UnknownEnvironment(f"{file}: {exc}") from None
    if len(classes) != 1:
        found = ", ".join(classes) if classes else "none"
        raise UnknownEnvironment(
            f"{file} must define exactly one top-level class whose name ends in 'Env' (found: {found})"
        )
    label = name or re.sub(r"[^A-Za-z0-9_.-]", "_", file.stem).lstrip("._-") or "env"
    return EnvEntry(label, source, {}, "games", "", str(file))


def served_entries(
    specs: list[str], archive: str | None = None, jsonl: str | None = None, ids: str = ""
) -> list[EnvEntry]:
    """What ``spade-rl envs serve`` was asked to serve: reference names and environment files, the valid
    environments of an archive or a pool (all, or the comma-separated ``ids``); every reference
    environment when nothing is named. ``UnknownEnvironment`` says what is wrong."""
    try:
        wanted = tuple(int(i) for i in ids.split(",") if i.strip())
    except ValueError:
        raise UnknownEnvironment(
            f"--ids takes environment ids separated by commas (3,7), got {ids!r}"
        ) from None
    if wanted and not (archive or jsonl):
        raise UnknownEnvironment("--ids selects environments of --archive or --jsonl; give one of them")
    entries = []
    for spec in specs:
        if Path(spec).is_file():
            entries.append(file_entry(spec))
        elif spec in NAMED:
            entries.append(reference_entry(spec))
        else:
            raise UnknownEnvironment(f"{spec} is neither a file nor a named environment ({named_list()})")
    if archive:
        entries += archive_entries(archive, wanted)
    if jsonl:
        entries += jsonl_entries(jsonl, wanted)
    if not (specs or archive or jsonl):
        entries = [reference_entry(name) for name in reference.ALL]
    return entries


def _check_ids(ids: tuple[int, ...]) -> None:
    bad = [i for i in ids if type(i) is not int or i < 1]
    if bad:
        raise UnknownEnvironment(f"environment ids are positive integers, got {bad}")


def _id_list(ids) -> str:
    ids = sorted(ids)
    if not ids:
        return "none"
    shown = ", ".join(map(str, ids[:20]))
    return shown + (f" ... ({len(ids)} in all)" if len(ids) > 20 else "")
