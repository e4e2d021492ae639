"""The SQLite schema of the archive, version 1.

``PRAGMA application_id`` marks the file as a spade-rl archive and ``PRAGMA user_version`` holds the
schema version; :class:`~spade_rl.archive.store.Archive` refuses files of any other version.

- ``environments``: one row per distinct environment (unique ``source_hash``), as first proposed;
- ``lineage``: ``env_id`` was designed after seeing ``parent_id`` (ordered by ``position``);
- ``proposals``: one row per ``Archive.add``, duplicates included, with that proposal's iteration,
  verdict and parents (JSON list);
- ``stats``: one row per (environment, iteration) of play;
- ``info``: key/value notes (``created_at``).
"""

from __future__ import annotations

SCHEMA_VERSION = 1
APPLICATION_ID = 0x53504144  # "SPAD"
STATS_COLUMNS = (
    "episodes_nohint",
    "episodes_hint",
    "win_rate_nohint",
    "win_rate_hint",
    "regret",
    "mean_turns",
    "mean_return_nohint",
    "mean_return_hint",
)
ENV_COLUMNS = (
    "id, source, source_hash, hint, valid, reason, message, class_name, skill, setting, document_id, "
    "iteration, origin, created_at, metadata"
)
SCHEMA = f"""
CREATE TABLE environments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source_hash TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    hint TEXT NOT NULL,
    valid INTEGER NOT NULL CHECK (valid IN (0, 1)),
    reason TEXT NOT NULL,
    message TEXT NOT NULL,
    class_name TEXT NOT NULL,
    skill TEXT NOT NULL,
    setting TEXT NOT NULL,
    document_id TEXT,
    iteration INTEGER NOT NULL,
    origin TEXT NOT NULL,
    created_at REAL NOT NULL,
    metadata TEXT NOT NULL
);
CREATE INDEX environments_by_kind ON environments (valid, setting, skill);
CREATE TABLE lineage (
    env_id INTEGER NOT NULL REFERENCES environments (id),
    parent_id INTEGER NOT NULL REFERENCES environments (id),
    position INTEGER NOT NULL,
    PRIMARY KEY (env_id, parent_id)
) WITHOUT ROWID;
CREATE INDEX lineage_by_parent ON lineage (parent_id);
CREATE TABLE proposals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    env_id INTEGER NOT NULL REFERENCES environments (id),
    iteration INTEGER NOT NULL,
    valid INTEGER NOT NULL,
    reason TEXT NOT NULL,
    duplicate INTEGER NOT NULL,
    parents TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX proposals_by_env ON proposals (env_id);
CREATE TABLE stats (
    env_id INTEGER NOT NULL REFERENCES environments (id),
    iteration INTEGER NOT NULL,
    {", ".join(f"{c} {'INTEGER' if c.startswith('episodes') else 'REAL'} NOT NULL" for c in STATS_COLUMNS)},
    recorded_at REAL NOT NULL,
    PRIMARY KEY (env_id, iteration)
) WITHOUT ROWID;
CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
