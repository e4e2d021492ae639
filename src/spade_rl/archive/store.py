"""The environment archive: every environment a run proposed, its verdict, statistics and lineage.

One SQLite file per run (``archive.sqlite`` in the run directory), in WAL mode while it is written: readers
in other connections or processes read a consistent snapshot while one writer writes (the last writer to
close it checkpoints it into one file again). Every ``add`` and
``record_stats`` commits its own transaction; ``batch()`` groups several into one atomic commit. A
killed process loses only its uncommitted transaction, never a committed one.

- Duplicates: an environment is identified by the hash of its normalised source
  (:func:`~spade_rl.archive.records.source_hash`). Proposing it again returns the existing id with
  ``duplicate=True`` and adds a row to ``proposals`` (with that proposal's iteration, verdict and
  parents); the environment keeps its first hint, verdict and lineage.
- Statistics: one row per (environment, iteration). ``record_stats`` **replaces** that row by
  default, so a resumed iteration that plays again does not count twice; ``mode="merge"`` combines
  the episodes instead (:func:`~spade_rl.archive.records.merge_stats`).
- Schema: see :mod:`~spade_rl.archive.schema`; a file of another schema version is refused.

Usage::

    with Archive(run_dir / "archive.sqlite") as archive:
        memory = archive.sample_memory(random.Random(seed), skill="logic", setting="games")
        result = archive.add(source, valid=report.valid, reason=report.reason, skill="logic",
                             setting="games", iteration=3, parents=memory.parent_ids)
        archive.record_stats(result.env_id, 3, stats)

One ``Archive`` object belongs to one thread; open another for another thread or process.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from spade_rl.archive import jsonl
from spade_rl.archive.config import ArchiveConfig
from spade_rl.archive.connection import ArchiveConnection
from spade_rl.archive.records import (
    ORIGINS,
    SETTINGS,
    AddResult,
    EnvRecord,
    ImportResult,
    IterationStats,
    LineageNode,
    MemoryExample,
    MemorySample,
    PlayStats,
    ReasonCount,
    check_choice,
    check_iteration,
    check_parents,
    check_text,
    check_verdict,
    encode_metadata,
    merge_stats,
    source_hash,
)
from spade_rl.archive.sampling import Candidate, pick_memory, pool_weight, weighted_sample
from spade_rl.archive.schema import ENV_COLUMNS, STATS_COLUMNS

log = logging.getLogger(__name__)

# <p> is the table whose rows are counted: proposals (p) or environments (e).
GROUP_COLUMNS = {
    "iteration": "<p>.iteration",
    "skill": "e.skill",
    "setting": "e.setting",
    "origin": "e.origin",
}
STATS_MODES = ("replace", "merge")


class Archive:
    """An open archive file. ``readonly=True`` opens an existing archive for reading only."""

    def __init__(
        self, path: str | os.PathLike, config: ArchiveConfig | None = None, *, readonly: bool = False
    ):
        self.path = Path(path)
        self.config = config if config is not None else ArchiveConfig()
        self.readonly = readonly
        self._db = ArchiveConnection(self.path, self.config, readonly=readonly)
        self._conn = self._db.conn

    # -- transactions (the file itself: spade_rl.archive.connection) --------------------------------

    def _transaction(self) -> AbstractContextManager[None]:
        """A write transaction (``BEGIN IMMEDIATE``); nested inside ``batch()`` it is a savepoint."""
        return self._db.transaction()

    def _snapshot(self) -> AbstractContextManager[None]:
        """A read transaction: several queries see the same committed state."""
        return self._db.snapshot()

    @contextmanager
    def batch(self) -> Iterator[Archive]:
        """Group writes into one atomic transaction: all of them are committed on exit, none on error."""
        with self._transaction():
            yield self

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_integrity(self) -> list[str]:
        """SQLite's ``integrity_check`` and ``foreign_key_check``; an empty list means the file is sound."""
        problems = [r[0] for r in self._conn.execute("PRAGMA integrity_check") if r[0] != "ok"]
        problems += [f"foreign key: {tuple(r)}" for r in self._conn.execute("PRAGMA foreign_key_check")]
        return problems

    # -- writing ------------------------------------------------------------------------------------

    def discard_after(self, iteration: int) -> int:
        """Forget everything recorded in iterations after ``iteration``: environments first proposed
        then (with their lineage), and the proposals and statistics of those iterations. A resumed run
        calls this with its last completed iteration, so that an interrupted iteration is neither
        lost nor counted twice when it runs again. Returns how many environments were removed."""
        iteration = check_iteration(iteration)
        with self._transaction():
            ids = [
                r[0]
                for r in self._conn.execute("SELECT id FROM environments WHERE iteration > ?", (iteration,))
            ]
            marks = ",".join("?" * len(ids))
            self._conn.execute("DELETE FROM stats WHERE iteration > ?", (iteration,))
            self._conn.execute("DELETE FROM proposals WHERE iteration > ?", (iteration,))
            self._conn.execute(
                "UPDATE environments SET metadata = json_remove(metadata, '$.flagged') "
                "WHERE json_extract(metadata, '$.flagged.iteration') > ?",
                (iteration,),
            )
            if ids:
                for table, column in (("stats", "env_id"), ("proposals", "env_id"), ("lineage", "env_id")):
                    self._conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", ids)
                self._conn.execute(f"DELETE FROM environments WHERE id IN ({marks})", ids)
        return len(ids)

    def add(
        self,
        source: str,
        *,
        valid: bool,
        reason: str,
        skill: str,
        setting: str,
        iteration: int,
        hint: str = "",
        message: str = "",
        class_name: str = "",
        document_id: str | None = None,
        parents: Sequence[int] = (),
        origin: str = "designer",
        metadata: dict | None = None,
        env_kwargs: dict | None = None,
    ) -> AddResult:
        """Record one proposed environment; a duplicate (same normalised source) keeps its first record.
        ``env_kwargs``: the constructor arguments validation used (kept in the metadata, read back as
        ``EnvRecord.env_kwargs``): every play of the environment uses them."""
        check_text("source", source)
        check_verdict(valid, reason)
        for what, text in (("hint", hint), ("message", message), ("class_name", class_name)):
            check_text(what, text)
        check_text("skill", skill, empty=False)
        check_choice("setting", setting, SETTINGS)
        check_choice("origin", origin, ORIGINS)
        check_iteration(iteration)
        if document_id is not None:
            check_text("document_id", document_id)
        parents = check_parents(parents)
        metadata = metadata if metadata is not None else {}
        if env_kwargs is not None:
            if not isinstance(env_kwargs, dict) or not all(isinstance(k, str) for k in env_kwargs):
                raise ValueError(f"env_kwargs must be a dict with string keys, got {env_kwargs!r:.80}")
            if not isinstance(metadata, dict):
                raise ValueError(f"metadata must be a dict, got {type(metadata).__name__}")
            metadata = {**metadata, "env_kwargs": dict(env_kwargs)}
        meta = encode_metadata(metadata)
        digest, now = source_hash(source), time.time()
        with self._transaction():
            self._check_exist(parents)
            existing = self._db.scalar("SELECT id FROM environments WHERE source_hash = ?", digest)
            env_id = existing
            if env_id is None:
                values = (digest, source, hint, valid, reason, message, class_name, skill, setting)
                env_id = self._db.insert_env((*values, document_id, iteration, origin, now, meta), parents)
            self._conn.execute(
                "INSERT INTO proposals (env_id, iteration, valid, reason, duplicate, parents, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (env_id, iteration, valid, reason, existing is not None, json.dumps(list(parents)), now),
            )
        return AddResult(env_id, existing is not None)  # type: ignore[arg-type]

    def _check_exist(self, env_ids: Sequence[int]) -> None:
        for env_id in env_ids:
            if self._db.scalar("SELECT 1 FROM environments WHERE id = ?", env_id) is None:
                raise KeyError(f"no environment with id {env_id} in {self.path}")

    def flag(self, env_id: int, iteration: int, reason: str, message: str = "") -> bool:
        """Flag a valid environment found in ``iteration`` to behave otherwise in play than validation
        saw it (``reason``: a code of the play-time guard, :mod:`spade_rl.loop.guard`). It keeps its
        verdict and statistics and is never drawn into the training pool or the memory again
        (``EnvRecord.flagged``); ``discard_after`` forgets the flags of the iterations it discards.
        Returns False, changing nothing, when it was flagged already."""
        check_iteration(iteration)
        check_text("reason", reason, empty=False)
        check_text("message", message)
        flag = json.dumps({"iteration": iteration, "reason": reason, "message": message})
        with self._transaction():
            self._check_exist([env_id])
            cursor = self._conn.execute(
                "UPDATE environments SET metadata = json_set(metadata, '$.flagged', json(?)) "
                "WHERE id = ? AND valid = 1 AND json_extract(metadata, '$.flagged') IS NULL",
                (flag, env_id),
            )
        return cursor.rowcount > 0

    def record_stats(
        self, env_id: int, iteration: int, stats: PlayStats, *, mode: str = "replace"
    ) -> PlayStats:
        """Store the play of ``env_id`` in ``iteration``; returns what was stored.

        ``mode="replace"`` (default) overwrites a row already recorded for this (env, iteration), so
        recording a resumed iteration again does not double count; ``mode="merge"`` adds the episodes
        to it with :func:`~spade_rl.archive.records.merge_stats`.
        """
        check_choice("stats mode", mode, STATS_MODES)
        check_iteration(iteration)
        if not isinstance(stats, PlayStats):
            raise ValueError(f"stats must be a PlayStats, got {type(stats).__name__}")
        with self._transaction():
            self._check_exist([env_id])
            reason = self._db.scalar("SELECT reason FROM environments WHERE id = ?", env_id)
            if reason != "ok":
                raise ValueError(f"environment {env_id} is invalid ({reason}); only valid ones are played")
            if mode == "merge":
                old = self._stats_rows("WHERE env_id = ? AND iteration = ?", (env_id, iteration))
                if old:
                    stats = merge_stats(old[0].stats, stats)
            self._db.write_stats(env_id, iteration, stats, time.time(), replace=True)
        return stats

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM environments").fetchone()[0]

    def find(self, source: str) -> int | None:
        """The id of the environment with the same normalised source, if any."""
        return self._db.scalar("SELECT id FROM environments WHERE source_hash = ?", source_hash(source))  # type: ignore[return-value]

    def get(self, env_id: int) -> EnvRecord:
        """The record of ``env_id``; ``KeyError`` if there is none."""
        with self._snapshot():
            row = self._conn.execute(
                f"SELECT {ENV_COLUMNS} FROM environments WHERE id = ?", (env_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no environment with id {env_id} in {self.path}")
            parents = self._parents(env_id)
            proposed = self._db.scalar("SELECT COUNT(*) FROM proposals WHERE env_id = ?", env_id)
        # The columns are in the order of EnvRecord's fields, up to created_at.
        return EnvRecord(
            *row[:4],
            bool(row[4]),
            *row[5:14],
            parents=parents,
            times_proposed=proposed,  # type: ignore[arg-type]
            metadata=json.loads(row[14]),
        )

    def _parents(self, env_id: int) -> tuple[int, ...]:
        rows = self._conn.execute(
            "SELECT parent_id FROM lineage WHERE env_id = ? ORDER BY position", (env_id,)
        )
        return tuple(r[0] for r in rows)

    def ids(
        self,
        *,
        valid: bool | None = None,
        skill: str | None = None,
        setting: str | None = None,
        origin: str | None = None,
    ) -> list[int]:
        """Environment ids in order, filtered by verdict, skill, setting and origin (None: any)."""
        where, args = _filters({"valid": valid, "skill": skill, "setting": setting, "origin": origin})
        return [r[0] for r in self._conn.execute(f"SELECT id FROM environments e {where} ORDER BY id", args)]

    def _stats_rows(self, where: str, args: Sequence[object]) -> list[IterationStats]:
        rows = self._conn.execute(
            f"SELECT env_id, iteration, recorded_at, {', '.join(STATS_COLUMNS)} FROM stats {where} "
            "ORDER BY env_id, iteration",
            args,
        )
        return [IterationStats(r[0], r[1], PlayStats(*r[3:]), r[2]) for r in rows]

    def stats_history(self, env_id: int) -> list[IterationStats]:
        """Every recorded iteration of ``env_id``, oldest first."""
        return self._stats_rows("WHERE env_id = ?", (env_id,))

    def latest_stats(self, env_ids: Sequence[int] | None = None) -> dict[int, IterationStats]:
        """The most recent iteration's statistics of each played environment (of ``env_ids``, if given)."""
        latest = "iteration = (SELECT MAX(s2.iteration) FROM stats s2 WHERE s2.env_id = stats.env_id)"
        if env_ids is None:
            return {r.env_id: r for r in self._stats_rows(f"WHERE {latest}", ())}
        ids, out = sorted(set(env_ids)), {}
        for start in range(0, len(ids), 500):  # stay below SQLite's limit on bound parameters
            chunk = ids[start : start + 500]
            where = f"WHERE env_id IN ({', '.join('?' * len(chunk))}) AND {latest}"
            out.update({r.env_id: r for r in self._stats_rows(where, chunk)})
        return out

    # -- sampling -----------------------------------------------------------------------------------

    def _candidates(self, skill: str | None, setting: str | None) -> list[Candidate]:
        """The valid environments that may be drawn (flagged ones never are), with their latest rates."""
        where, args = _filters({"valid": True, "skill": skill, "setting": setting})
        where += " AND json_extract(e.metadata, '$.flagged') IS NULL"
        rows = self._conn.execute(
            "SELECT e.id, s.win_rate_nohint, s.regret FROM environments e "
            "LEFT JOIN stats s ON s.env_id = e.id "
            "AND s.iteration = (SELECT MAX(s2.iteration) FROM stats s2 WHERE s2.env_id = e.id) "
            f"{where} ORDER BY e.id",
            args,
        )
        return [Candidate(*r) for r in rows]

    def sample_memory(
        self,
        rng: random.Random | int,
        *,
        skill: str | None = None,
        setting: str | None = None,
        positives: int | None = None,
        negatives: int | None = None,
    ) -> MemorySample:
        """The reference examples for one designer prompt (SPADE step 1), see
        :func:`~spade_rl.archive.sampling.pick_memory`. Counts default to the config's; the same seed and
        archive give the same sample. A sparse archive gives a smaller or fallback sample, never an error."""
        rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        n_pos = self.config.memory_positives if positives is None else positives
        n_neg = self.config.memory_negatives if negatives is None else negatives
        for name, n in (("positives", n_pos), ("negatives", n_neg)):
            if type(n) is not int or n < 0:
                raise ValueError(f"memory {name} must be an integer >= 0, got {n!r}")
        with self._snapshot():
            candidates = self._candidates(skill, setting)
            references = self.ids(valid=True, skill=skill, setting=setting, origin="reference")
            pick = pick_memory(candidates, references, rng, self.config, n_pos, n_neg)
            latest = self.latest_stats([*pick.positives, *pick.negatives])
            examples = tuple(
                MemoryExample(
                    self.get(env_id),
                    role,
                    pick.kinds[env_id],
                    latest[env_id].stats if env_id in latest else None,
                )
                for role, chosen in (("positive", pick.positives), ("negative", pick.negatives))
                for env_id in chosen
            )
        if not pick.complete:
            log.info("memory sample (skill=%s, setting=%s): %s", skill, setting, pick.message)
        return MemorySample(examples, pick.fallback, pick.complete, pick.message)

    def pool_weights(self, *, skill: str | None = None, setting: str | None = None) -> dict[int, float]:
        """Training-pool weight of every valid environment (:func:`.sampling.pool_weight`)."""
        with self._snapshot():
            candidates = self._candidates(skill, setting)
        return {c.env_id: pool_weight(c.win_rate, c.regret, self.config) for c in candidates}

    def sample_pool(
        self,
        n: int,
        rng: random.Random | int,
        *,
        skill: str | None = None,
        setting: str | None = None,
        replace: bool = False,
    ) -> list[int]:
        """``n`` valid environment ids drawn by pool weight: distinct ones (at most all of them) unless
        ``replace``, in which case each draw is independent. Invalid environments are never drawn."""
        if type(n) is not int or n < 0:
            raise ValueError(f"pool sample size must be an integer >= 0, got {n!r}")
        rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        weights = self.pool_weights(skill=skill, setting=setting)
        if not weights:
            return []
        ids, w = list(weights), list(weights.values())
        return rng.choices(ids, w, k=n) if replace else weighted_sample(ids, w, n, rng)

    # -- reports ------------------------------------------------------------------------------------

    def reason_counts(
        self, group_by: str = "iteration", *, unique: bool = False, origin: str | None = None
    ) -> list[ReasonCount]:
        """Counts by group (``iteration``, ``skill``, ``setting`` or ``origin``), verdict and reason.

        ``unique=False`` counts proposals (every ``add``, duplicates included, in the iteration of that
        proposal, with its verdict); ``unique=True`` counts environments once (imported ones included),
        in the iteration they were first proposed in.
        """
        check_choice("group_by", group_by, list(GROUP_COLUMNS))
        table = "environments e" if unique else "proposals p JOIN environments e ON e.id = p.env_id"
        prefix = "e" if unique else "p"
        column = GROUP_COLUMNS[group_by].replace("<p>", prefix)
        where, args = _filters({"origin": origin})
        rows = self._conn.execute(
            f"SELECT {column}, {prefix}.valid, {prefix}.reason, COUNT(*) FROM {table} {where} "
            "GROUP BY 1, 2, 3 ORDER BY 1, 2 DESC, 3",
            args,
        )
        return [ReasonCount(r[0], bool(r[1]), r[2], r[3]) for r in rows]

    def lineage(self, env_id: int) -> list[LineageNode]:
        """``env_id`` and all its ancestors, breadth first: depth 0 is itself, 1 its parents, ..."""
        with self._snapshot():
            self._check_exist([env_id])
            nodes, seen, frontier, depth = [], {env_id}, [env_id], 0
            while frontier:
                next_frontier = []
                for node in frontier:
                    parents = self._parents(node)
                    nodes.append(LineageNode(node, depth, parents))
                    next_frontier += [p for p in parents if p not in seen]
                    seen.update(parents)
                frontier, depth = next_frontier, depth + 1
        return nodes

    def children(self, env_id: int) -> list[int]:
        """The environments whose designer was shown ``env_id``."""
        rows = self._conn.execute("SELECT env_id FROM lineage WHERE parent_id = ? ORDER BY env_id", (env_id,))
        return [r[0] for r in rows]

    # -- export and import (the work is in spade_rl.archive.jsonl) ---------------------------------

    def export_jsonl(self, path: str | os.PathLike, *, valid_only: bool = False) -> int:
        """Write one line per environment (with its statistics) to ``path``, atomically; returns the count."""
        return jsonl.export_jsonl(self, self._db, Path(path), valid_only=valid_only)

    def import_jsonl(
        self, path: str | os.PathLike, *, origin: str | None = "import", on_error: str = "raise"
    ) -> ImportResult:
        """Add the environments of a JSONL export in one transaction; see :func:`jsonl.import_jsonl`."""
        return jsonl.import_jsonl(self._db, Path(path), origin=origin, on_error=on_error)


def _filters(values: dict[str, object]) -> tuple[str, list[object]]:
    """``WHERE e.col = ? AND ...`` for the values that are not None (the column names are ours)."""
    clauses = [f"e.{column} = ?" for column, value in values.items() if value is not None]
    args = [value for value in values.values() if value is not None]
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args
