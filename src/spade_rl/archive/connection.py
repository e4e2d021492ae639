"""The SQLite file under an ``Archive``: opened, created with its schema or checked, and transactions.

The file is in WAL mode while a writer has it open: readers in other connections or processes read a
consistent snapshot while one writer writes. The last writer to close it checkpoints it back into one
file (rollback-journal mode), so that a finished run's archive is one file, which a read-only open
(``spade-rl envs list --archive``) leaves as it found it, with no ``-wal``/``-shm`` files beside it; the
next writer turns WAL on again. A file that is not an archive, or of another schema version, is
refused with what it is instead. ``transaction()`` is a write transaction (``BEGIN IMMEDIATE``;
nested, a savepoint), ``snapshot()`` a read transaction (several queries see one committed state).
``scalar``, ``insert_env``, ``insert_lineage`` and ``write_stats`` are the statements that ``Archive``
and the JSONL import (:mod:`spade_rl.archive.jsonl`) both write with, inside a transaction of theirs.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from spade_rl.archive.config import ArchiveConfig
from spade_rl.archive.records import ArchiveError, PlayStats
from spade_rl.archive.schema import APPLICATION_ID, SCHEMA, SCHEMA_VERSION, STATS_COLUMNS

log = logging.getLogger(__name__)


class ArchiveConnection:
    """The connection to the archive file at ``path``; ``readonly=True`` opens an existing one for reading."""

    def __init__(self, path: Path, config: ArchiveConfig, *, readonly: bool = False):
        self.path = path
        self.config = config
        self.readonly = readonly
        self._depth = 0
        if self.path.is_dir():
            raise ArchiveError(
                f"{self.path} is a directory; an archive is a file such as <run>/archive.sqlite"
            )
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"cannot create an archive in {self.path.parent}: no such directory")
        if readonly and not self.path.exists():
            raise FileNotFoundError(f"no archive at {self.path}")
        uri = f"{self.path.resolve().as_uri()}?mode={'ro' if readonly else 'rwc'}"
        self.conn = sqlite3.connect(uri, uri=True, timeout=self.config.busy_timeout_s, isolation_level=None)
        try:
            self._open()
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        if not self.readonly and not self.conn.in_transaction:
            self._leave_wal()
        self.conn.close()

    def _leave_wal(self) -> None:
        """Checkpoint the WAL into the file and leave WAL mode, if no other connection has the file open.

        SQLite refuses at once (busy timeout 0) while another connection, in this process or another, has
        it open: that connection, if it writes, does it when it closes; one that only reads leaves the WAL
        as it is."""
        try:
            self.conn.execute("PRAGMA busy_timeout = 0")
            self.conn.execute("PRAGMA journal_mode = DELETE").fetchone()
        except sqlite3.Error as exc:
            log.debug("archive %s stays in WAL mode on close: %s", self.path, exc)

    def _identify(self) -> tuple[int, int, list[str]]:
        try:
            app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        except sqlite3.DatabaseError as exc:
            raise ArchiveError(
                f"{self.path} is not a spade-rl archive: SQLite cannot read it ({exc}); an archive is "
                "the archive.sqlite file of a run directory"
            ) from None
        return app_id, version, tables

    def _open(self) -> None:
        app_id, version, tables = self._identify()
        if app_id == 0 and not tables and not self.readonly:
            self._enter_wal()
            with self.transaction():  # another process may be creating it at the same moment
                app_id, version, tables = self._identify()
                if app_id == 0 and not tables:
                    # executescript() would commit the open transaction first: run statements one by one.
                    for statement in SCHEMA.split(";"):
                        if statement.strip():
                            self.conn.execute(statement)
                    self.conn.execute("INSERT INTO info VALUES ('created_at', ?)", (str(time.time()),))
                    self.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    app_id, version = APPLICATION_ID, SCHEMA_VERSION
                    log.info("created archive %s (schema version %d)", self.path, SCHEMA_VERSION)
        if app_id != APPLICATION_ID:
            raise ArchiveError(
                f"{self.path} is a SQLite database but not a spade-rl archive (application_id {app_id}, "
                f"tables {sorted(tables) or 'none'})"
            )
        if version != SCHEMA_VERSION:
            newer = "a newer" if version > SCHEMA_VERSION else "an older"
            raise ArchiveError(
                f"{self.path} has archive schema version {version}, written by {newer} spade-rl; this "
                f"version reads schema version {SCHEMA_VERSION} only"
            )
        if not self.readonly:
            self._enter_wal()  # an archive its last writer closed is in rollback-journal mode
            self.conn.execute(f"PRAGMA synchronous = {self.config.synchronous}")
        self.conn.execute("PRAGMA foreign_keys = ON")

    def _enter_wal(self) -> None:
        """WAL mode for a writer, so that readers elsewhere read while it writes."""
        try:
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:  # another connection is writing in rollback-journal mode
            mode = f"an error: {exc}"
        if str(mode).lower() != "wal":
            log.warning("archive %s: SQLite refused WAL mode (got %s); readers may wait", self.path, mode)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction (``BEGIN IMMEDIATE``); nested inside ``batch()`` it is a savepoint."""
        if self.readonly:
            raise ArchiveError(f"archive {self.path} was opened read-only")
        name = f"sp{self._depth}"
        self.conn.execute("BEGIN IMMEDIATE" if self._depth == 0 else f"SAVEPOINT {name}")
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self.conn.execute("ROLLBACK")
            else:
                self.conn.execute(f"ROLLBACK TO {name}")
                self.conn.execute(f"RELEASE {name}")
            raise
        self._depth -= 1
        try:
            self.conn.execute("COMMIT" if self._depth == 0 else f"RELEASE {name}")
        except BaseException:
            if self._depth == 0 and self.conn.in_transaction:  # e.g. disk full: leave no open transaction
                self.conn.execute("ROLLBACK")
            raise

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: several queries see the same committed state."""
        if self._depth:
            yield
            return
        self.conn.execute("BEGIN")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self.conn.execute("COMMIT")

    # -- the statements both the archive and the import write with ----------------------------------

    def scalar(self, sql: str, *args: object) -> object:
        """The first column of the first row, or None without a row."""
        row = self.conn.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def insert_env(self, values: tuple, parents: Sequence[int]) -> int:
        """Insert an environment row (the columns below, in order) and its parent links; returns its id."""
        cursor = self.conn.execute(
            "INSERT INTO environments (source_hash, source, hint, valid, reason, message, class_name, skill, "
            "setting, document_id, iteration, origin, created_at, metadata) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            values,
        )
        self.insert_lineage(cursor.lastrowid, parents)  # type: ignore[arg-type]
        return cursor.lastrowid  # type: ignore[return-value]

    def insert_lineage(self, env_id: int, parents: Sequence[int]) -> None:
        self.conn.executemany(
            "INSERT INTO lineage (env_id, parent_id, position) VALUES (?, ?, ?)",
            [(env_id, p, i) for i, p in enumerate(parents)],
        )

    def write_stats(self, env_id: int, iteration: int, stats: PlayStats, at: float, *, replace: bool) -> bool:
        """Write one (env, iteration) row of play statistics; ``replace=False`` keeps a row already there.
        Returns whether a row was written."""
        values = [getattr(stats, c) for c in STATS_COLUMNS]
        cursor = self.conn.execute(
            f"INSERT OR {'REPLACE' if replace else 'IGNORE'} INTO stats (env_id, iteration, "
            f"{', '.join(STATS_COLUMNS)}, recorded_at) VALUES ({', '.join('?' * (len(values) + 3))})",
            (env_id, iteration, *values, at),
        )
        return cursor.rowcount > 0
