"""The JSONL exchange format of the archive: one environment per line, with its statistics.

A line is a JSON object::

    {"format": "spade-rl-env/1", "env_id": 7, "source": "...", "source_hash": "...", "hint": "...",
     "valid": true, "reason": "ok", "message": "", "class_name": "MazeEnv", "skill": "spatial",
     "setting": "games", "document_id": "doc-12", "iteration": 3, "origin": "designer",
     "created_at": 1767225600.0, "parents": [2, 5], "times_proposed": 2, "metadata": {...},
     "stats": [{"iteration": 3, "recorded_at": ..., "episodes_nohint": 16, ...}, ...]}

``env_id`` and ``parents`` are the ids of the exporting archive; an import gives new ids and remaps
the parents. ``source_hash`` and ``times_proposed`` are informational: an import recomputes the hash
(the normalised form can differ between Python versions) and does not copy proposals.
``Archive.export_jsonl`` and ``Archive.import_jsonl`` call :func:`export_jsonl` and :func:`import_jsonl`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_rl.archive.records import (
    ORIGINS,
    SETTINGS,
    EnvRecord,
    ImportResult,
    IterationStats,
    JsonlLineError,
    PlayStats,
    check_choice,
    check_iteration,
    check_parents,
    check_text,
    check_verdict,
    encode_metadata,
    source_hash,
)

if TYPE_CHECKING:
    from spade_rl.archive.connection import ArchiveConnection
    from spade_rl.archive.store import Archive

log = logging.getLogger(__name__)

LINE_FORMAT = "spade-rl-env/1"
ON_ERROR = ("raise", "skip")
REQUIRED = ("env_id", "source", "valid", "reason", "skill", "setting", "iteration", "origin")


def encode_env(record: EnvRecord, stats: list[IterationStats]) -> str:
    """One JSONL line (without the newline) for ``record`` and its statistics."""
    data: dict[str, Any] = {"format": LINE_FORMAT}
    for f in fields(record):
        value = getattr(record, f.name)
        data[f.name] = list(value) if f.name == "parents" else value
    data["stats"] = [
        {"iteration": s.iteration, "recorded_at": s.recorded_at, **s.stats.to_json()} for s in stats
    ]
    return json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ImportedEnv:
    """A decoded line: the record as the exporting archive had it (its ids) and its statistics."""

    record: EnvRecord
    stats: tuple[IterationStats, ...]


def decode_env(text: str) -> ImportedEnv:
    """Decode and check one line; raises ``ValueError`` saying what is wrong with it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if data.get("format") != LINE_FORMAT:
        raise ValueError(f"format is {data.get('format')!r}; this version reads {LINE_FORMAT!r}")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise ValueError(f"missing required field(s) {missing}")
    env_id = data["env_id"]
    if type(env_id) is not int:
        raise ValueError(f"env_id must be an integer, got {env_id!r}")
    valid, reason = check_verdict(data["valid"], data["reason"])
    source = check_text("source", data["source"])
    metadata = data.get("metadata", {})
    encode_metadata(metadata)
    document_id = data.get("document_id")
    if document_id is not None:
        check_text("document_id", document_id)
    created_at = data.get("created_at", 0.0)
    if type(created_at) not in (int, float) or not math.isfinite(created_at):
        raise ValueError(f"created_at must be a finite number (Unix time), got {created_at!r}")
    record = EnvRecord(
        env_id=env_id,
        source=source,
        source_hash=source_hash(source),
        hint=check_text("hint", data.get("hint", "")),
        valid=valid,
        reason=reason,
        message=check_text("message", data.get("message", "")),
        class_name=check_text("class_name", data.get("class_name", "")),
        skill=check_text("skill", data["skill"], empty=False),
        setting=check_choice("setting", data["setting"], SETTINGS),
        document_id=document_id,
        iteration=check_iteration(data["iteration"]),
        origin=check_choice("origin", data["origin"], ORIGINS),
        created_at=float(created_at),
        parents=check_parents(data.get("parents", [])),
        metadata=metadata,
    )
    return ImportedEnv(record, _decode_stats(env_id, valid, data.get("stats", [])))


def _decode_stats(env_id: int, valid: bool, rows: object) -> tuple[IterationStats, ...]:
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError("stats must be a list of JSON objects")
    if rows and not valid:
        raise ValueError("an invalid environment cannot have play statistics")
    out, seen = [], set()
    for row in rows:
        iteration = check_iteration(row.get("iteration"))
        if iteration in seen:
            raise ValueError(f"stats hold iteration {iteration} twice")
        seen.add(iteration)
        recorded_at = row.get("recorded_at", 0.0)
        if type(recorded_at) not in (int, float) or not math.isfinite(recorded_at):
            raise ValueError(f"stats recorded_at must be a finite number, got {recorded_at!r}")
        out.append(IterationStats(env_id, iteration, PlayStats.from_json(row), float(recorded_at)))
    return tuple(out)


def export_jsonl(archive: Archive, db: ArchiveConnection, path: Path, *, valid_only: bool = False) -> int:
    """Write one line per environment of ``archive`` (oldest first; ``db`` its file) to ``path``; returns
    the count.

    The lines come from one read snapshot and go to ``path.tmp`` first, renamed over ``path`` at the end,
    so a reader never sees half an export.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with db.snapshot(), open(tmp, "w", encoding="utf-8") as out:
            ids = archive.ids(valid=True if valid_only else None)
            for env_id in ids:
                out.write(encode_env(archive.get(env_id), archive.stats_history(env_id)) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("exported %d environments from %s to %s", len(ids), archive.path, path)
    return len(ids)


def import_jsonl(
    db: ArchiveConnection, path: Path, *, origin: str | None = "import", on_error: str = "raise"
) -> ImportResult:
    """Add the environments of a JSONL export to the archive file ``db``, in one transaction.

    - Environments already there (same normalised source) are not added again: their record and lineage
      stay, and only statistics of iterations they lack are added (their own rows win).
    - New environments get new ids; their parents are remapped, and parents absent from the file are
      dropped and counted. ``origin`` is recorded for them (None keeps each line's own origin).
    - Proposals are not copied: an import is not a proposal of this run.
    - ``on_error="raise"`` (default) stops at the first malformed line, naming its line number, and
      imports nothing; ``"skip"`` leaves malformed lines out and lists them in ``ImportResult.skipped``.
    """
    check_choice("on_error", on_error, ON_ERROR)
    if origin is not None:
        check_choice("origin", origin, ORIGINS)
    items, skipped = _read_lines(path, on_error)
    with db.transaction():
        result = _insert_all(db, items, origin)
    result = dataclasses.replace(result, skipped=tuple(skipped))
    log.info(
        "imported %s into %s: %d added, %d duplicates, %d malformed lines skipped",
        path, db.path, result.added, result.duplicates, len(skipped),
    )  # fmt: skip
    return result


def read_envs(path: str | Path) -> Iterator[tuple[int, ImportedEnv | ValueError]]:
    """Every non-blank line of a JSONL export, decoded: ``(line number, ImportedEnv)``, or ``(line number,
    the ValueError)`` for a malformed line (bad UTF-8, bad JSON, a field out of range), so the caller
    decides whether that stops it. ``OSError`` when the file cannot be read."""
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                text = raw.decode("utf-8")
                if not text.strip():
                    continue
                yield number, decode_env(text)
            except ValueError as exc:  # UnicodeDecodeError is a ValueError too
                yield number, exc


def read_valid_envs(path: str | Path) -> list[tuple[int, EnvRecord]]:
    """The environments of a JSONL export that were valid where they were exported, with their line
    numbers. Raises ``JsonlLineError`` naming the first malformed line, ``OSError`` when unreadable."""
    records = []
    for number, item in read_envs(path):
        if isinstance(item, ValueError):
            raise JsonlLineError(path, number, str(item))
        if item.record.valid:
            records.append((number, item.record))
    return records


def _read_lines(path: Path, on_error: str) -> tuple[list[ImportedEnv], list[tuple[int, str]]]:
    items: list[ImportedEnv] = []
    skipped: list[tuple[int, str]] = []
    first_line: dict[int, int] = {}  # exported id -> the line that holds it
    for number, item in read_envs(path):
        if isinstance(item, ImportedEnv) and item.record.env_id in first_line:
            old_id = item.record.env_id
            item = ValueError(f"env_id {old_id} was already used on line {first_line[old_id]}")
        if isinstance(item, ValueError):
            if on_error == "raise":
                raise JsonlLineError(path, number, str(item))
            log.warning("%s:%d: skipped: %s", path, number, item)
            skipped.append((number, str(item)))
            continue
        first_line[item.record.env_id] = number
        items.append(item)
    return items, skipped


def _insert_all(db: ArchiveConnection, items: list[ImportedEnv], origin: str | None) -> ImportResult:
    id_map: dict[int, int] = {}
    created: dict[int, ImportedEnv] = {}  # new id -> the line that created it
    for item in items:
        r = item.record
        existing = db.scalar("SELECT id FROM environments WHERE source_hash = ?", r.source_hash)
        if existing is None:
            values = (r.source_hash, r.source, r.hint, r.valid, r.reason, r.message, r.class_name, r.skill)
            values += (r.setting, r.document_id, r.iteration, origin or r.origin, r.created_at)
            new_id = db.insert_env((*values, encode_metadata(r.metadata)), ())
            created[new_id] = item
            id_map[r.env_id] = new_id
        else:
            id_map[r.env_id] = existing  # type: ignore[assignment]
    dropped = 0
    for new_id, item in created.items():
        parents = [id_map.get(p) for p in item.record.parents]
        dropped += sum(p is None for p in parents)
        # Two exported parents may be one environment here; an environment is never its own parent.
        kept = list(dict.fromkeys(p for p in parents if p is not None and p != new_id))
        db.insert_lineage(new_id, kept)
    if dropped:
        log.warning("import: %d parent links point to environments not in the file; dropped", dropped)
    stats_added = stats_ignored = 0
    for item in items:
        target = id_map[item.record.env_id]
        target_valid = db.scalar("SELECT valid FROM environments WHERE id = ?", target)
        for row in item.stats:
            if target_valid and db.write_stats(
                target, row.iteration, row.stats, row.recorded_at, replace=False
            ):
                stats_added += 1
            else:
                stats_ignored += 1
    return ImportResult(
        added=len(created),
        duplicates=len(items) - len(created),
        stats_added=stats_added,
        stats_ignored=stats_ignored,
        dropped_parents=dropped,
        skipped=(),
        id_map=id_map,
    )
