"""The environment archive: every proposed environment, its verdict, play statistics and lineage.

One SQLite file per run; the memory sampler (SPADE step 1) and the training-pool sampler read it.

- :mod:`~spade_rl.archive.store`: :class:`Archive`, what is read and written;
- :mod:`~spade_rl.archive.connection`: the SQLite file (WAL, versioned schema) and its transactions;
- :mod:`~spade_rl.archive.records`: the records and the duplicate hash;
- :mod:`~spade_rl.archive.sampling`: frontier weights and the memory pick, as pure functions;
- :mod:`~spade_rl.archive.jsonl`: the JSONL exchange format;
- :mod:`~spade_rl.archive.config`: :class:`ArchiveConfig`.
"""

from spade_rl.archive.config import ArchiveConfig
from spade_rl.archive.records import (
    ORIGINS,
    SETTINGS,
    AddResult,
    ArchiveError,
    EnvRecord,
    ImportResult,
    IterationStats,
    JsonlLineError,
    LineageNode,
    MemoryExample,
    MemorySample,
    PlayStats,
    ReasonCount,
    merge_stats,
    normalise_source,
    source_hash,
)
from spade_rl.archive.sampling import frontier_closeness, pool_weight
from spade_rl.archive.schema import SCHEMA_VERSION
from spade_rl.archive.store import Archive

__all__ = [
    "ORIGINS",
    "SCHEMA_VERSION",
    "SETTINGS",
    "AddResult",
    "Archive",
    "ArchiveConfig",
    "ArchiveError",
    "EnvRecord",
    "ImportResult",
    "IterationStats",
    "JsonlLineError",
    "LineageNode",
    "MemoryExample",
    "MemorySample",
    "PlayStats",
    "ReasonCount",
    "frontier_closeness",
    "merge_stats",
    "normalise_source",
    "pool_weight",
    "source_hash",
]
