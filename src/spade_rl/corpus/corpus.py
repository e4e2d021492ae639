"""The ``Corpus``: grounding documents from one or more sources, looked up by id and sampled with a seed.

Building a corpus scans every source once. It keeps each usable document's id and where to find it,
not its text: a JSONL file of a hundred thousand lines costs an index of offsets, and a document is
read again (and cut to the word budget) when it is asked for. Malformed records are skipped, logged
and counted per source (or raise at once with ``on_bad_record="error"``); documents shorter than
``min_words`` are left out; a source with no usable document at all is an error.

Documents keep the order of the sources and, within a source, of the file, so ids, sampling and
shuffling are the same for the same seed and the same corpus.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from spade_rl.corpus.builtin import BuiltinSource
from spade_rl.corpus.columnar import HfSource, ParquetSource
from spade_rl.corpus.config import CorpusConfig, CorpusError
from spade_rl.corpus.document import Document, Record, Skip, count_words, make_document
from spade_rl.corpus.files import JsonlSource, TextFolderSource
from spade_rl.corpus.spec import SourceSpec, parse_source

logger = logging.getLogger(__name__)

MAX_WARNINGS_PER_SOURCE = 5  # malformed records logged one by one; the rest only in the summary

# How each skip reason reads in a message ("3 lines not JSON").
REASONS = {
    "not_utf8": "not UTF-8",
    "not_json": "not JSON",
    "not_object": "not a JSON object",
    "no_text": "without text",
    "bad_text": "whose text is not a valid string",
    "bad_id": "with an unusable id",
    "duplicate_id": "with an id already used",
    "unreadable": "unreadable",
    "too_short": "shorter than min_words",
}


class Source(Protocol):
    """What every source kind provides (see ``files``, ``columnar`` and ``builtin``)."""

    spec: SourceSpec
    unit: str  # what units_read counts: lines, files, rows, documents
    units_read: int

    def scan(self) -> Iterator[Record | Skip]: ...

    def read(self, locator: Any) -> Record: ...


SOURCE_KINDS: dict[str, type] = {
    "builtin": BuiltinSource,
    "jsonl": JsonlSource,
    "text": TextFolderSource,
    "parquet": ParquetSource,
    "hf": HfSource,
}


@dataclass(frozen=True)
class SourceStats:
    """What building the corpus found in one source. ``skipped`` maps a reason code (see ``REASONS``)
    to how many records were left out for it."""

    source: str
    kind: str
    unit: str
    read: int
    documents: int
    truncated: int
    skipped: dict[str, int] = field(default_factory=dict, hash=False)


class Corpus:
    """Grounding documents, in a fixed order. Build one with :meth:`from_config`."""

    def __init__(self, config: CorpusConfig, sources: list[Source], ids: list[str], places: list[tuple]):
        self.config = config
        self._sources = sources
        self._ids = tuple(ids)
        self._places = places  # per document: (index of its source, locator within the source)
        self._positions = {doc_id: i for i, doc_id in enumerate(ids)}
        self.stats: tuple[SourceStats, ...] = ()

    @classmethod
    def from_config(cls, config: CorpusConfig | None = None) -> Corpus:
        """Scan every source of ``config`` (default: the built-in corpus) and index its documents."""
        config = CorpusConfig() if config is None else config
        sources: list[Source] = []
        ids: list[str] = []
        places: list[tuple] = []
        positions: dict[str, int] = {}
        stats = []
        for spec_text in config.sources:
            spec = parse_source(spec_text)
            source: Source = SOURCE_KINDS[spec.kind](spec, config)
            stats.append(_index_source(source, len(sources), config, ids, places, positions))
            sources.append(source)
        corpus = cls(config, sources, ids, places)
        corpus.stats = tuple(stats)
        logger.info("corpus: %d documents from %s", len(corpus), ", ".join(config.sources))
        return corpus

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._positions

    def __iter__(self) -> Iterator[Document]:
        return (self._document(i) for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Corpus({len(self)} documents from {list(self.config.sources)})"

    def ids(self) -> tuple[str, ...]:
        """Every document id, in corpus order."""
        return self._ids

    def get(self, doc_id: str) -> Document:
        """The document with this id (``KeyError`` if there is none)."""
        position = self._positions.get(doc_id)
        if position is None:
            examples = ", ".join(repr(i) for i in self._ids[:3])
            raise KeyError(
                f"no document with id {doc_id!r} in the corpus "
                f"({len(self)} documents; ids look like {examples})"
            )
        return self._document(position)

    def sample(self, rng: random.Random | int, k: int = 1) -> list[Document]:
        """``k`` distinct documents drawn uniformly with ``rng`` (a ``random.Random``, or a seed).

        The same seed and corpus give the same documents in the same order.
        """
        rng = _as_rng(rng)
        if type(k) is not int or not 1 <= k <= len(self):
            raise ValueError(
                f"sample size k must be an integer from 1 to the corpus size ({len(self)}), got {k!r}; "
                "a sample never repeats a document"
            )
        return [self._document(i) for i in rng.sample(range(len(self)), k)]

    def shuffled(self, rng: random.Random | int, *, cycle: bool = False) -> Iterator[Document]:
        """Every document once, in an order drawn with ``rng``; with ``cycle``, then again in a new order,
        forever. No document repeats before all have been seen (nor right at the turn of a pass)."""
        rng = _as_rng(rng)
        return self._shuffled(rng, cycle)

    def _shuffled(self, rng: random.Random, cycle: bool) -> Iterator[Document]:
        last = None
        while True:
            order = list(range(len(self)))
            rng.shuffle(order)
            if len(order) > 1 and order[0] == last:
                order[0], order[-1] = order[-1], order[0]
            for position in order:
                yield self._document(position)
            if not cycle:
                return
            last = order[-1]

    def _document(self, position: int) -> Document:
        source_index, locator = self._places[position]
        source = self._sources[source_index]
        record = source.read(locator)
        if record.id != self._ids[position]:
            raise CorpusError(
                f"corpus source {source.spec.spec!r} changed after the corpus was built "
                f"(expected id {self._ids[position]!r}, found {record.id!r}); build the corpus again"
            )
        return make_document(record, source.spec.spec, self.config.max_words)


def _index_source(
    source: Source,
    source_index: int,
    config: CorpusConfig,
    ids: list[str],
    places: list[tuple],
    positions: dict[str, int],
) -> SourceStats:
    """Scan one source, appending its usable documents to ``ids``/``places``; return its statistics."""
    spec = source.spec.spec
    skipped: Counter[str] = Counter()
    documents = truncated = 0
    for item in source.scan():
        if isinstance(item, Record):
            words = count_words(item.text)
            if words < config.min_words:
                skipped["too_short"] += 1
                continue
            if item.id in positions:
                item = Skip(
                    "duplicate_id", f"id {item.id!r} is already used by an earlier document", _at(item)
                )
            else:
                positions[item.id] = len(ids)
                ids.append(item.id)
                places.append((source_index, item.locator))
                documents += 1
                truncated += config.max_words is not None and words > config.max_words
                continue
        if config.on_bad_record == "error":
            raise CorpusError(
                f"corpus source {spec!r}: {item.where}: {item.detail} "
                "(on_bad_record='error'; set it to 'skip' to leave such records out)"
            )
        skipped[item.reason] += 1
        bad = sum(skipped.values()) - skipped["too_short"]
        if bad <= MAX_WARNINGS_PER_SOURCE:
            logger.warning("corpus source %r: skipped %s: %s", spec, item.where, item.detail)
    stats = SourceStats(
        spec, source.spec.kind, source.unit, source.units_read, documents, truncated, dict(skipped)
    )
    if documents == 0:
        raise CorpusError(_nothing_usable(source, stats, config))
    bad = sum(skipped.values()) - skipped.get("too_short", 0)
    if bad:
        logger.warning(
            "corpus source %r: skipped %d malformed record(s): %s", spec, bad, _counts(stats, config)
        )
    return stats


def _at(record: Record) -> str:
    return ", ".join(f"{key} {value}" for key, value in record.where.items() if key != "text_field")


def _counts(stats: SourceStats, config: CorpusConfig) -> str:
    parts = []
    for reason, count in stats.skipped.items():
        text = REASONS.get(reason, reason)
        if reason == "too_short":
            text += f"={config.min_words}"
        parts.append(f"{count} {stats.unit} {text}")
    return ", ".join(parts)


def _nothing_usable(source: Source, stats: SourceStats, config: CorpusConfig) -> str:
    message = f"corpus source {stats.source!r} has no usable documents"
    if stats.read == 0:
        return f"{message}: it is empty"
    message += f": of {stats.read} {stats.unit} read, {_counts(stats, config) or 'none held a record'}"
    if stats.kind in ("jsonl", "parquet", "hf"):
        fields = getattr(source, "text_fields", config.text_fields)
        message += f"; text is looked for in the field(s) {', then '.join(repr(f) for f in fields)}"
        message += " (set text_field to the field that holds it)"
    return message


def _as_rng(rng: random.Random | int) -> random.Random:
    if isinstance(rng, random.Random):
        return rng
    if type(rng) is int:
        return random.Random(rng)
    raise TypeError(f"rng must be a random.Random or an int seed, got {type(rng).__name__}")
