"""Source specs: the strings that say where grounding documents come from, and how their kind is told.

A spec is one of:

=================================  =========  ===============================================
spec                               kind       read as
=================================  =========  ===============================================
``builtin``                        builtin    documentation that ships with Python (no files)
``docs.jsonl``, ``docs.ndjson``    jsonl      one JSON object per line
``docs.parquet``, ``docs.pq``      parquet    one row per document (needs ``pyarrow``)
``notes/`` (a folder)              text       every ``*.txt`` / ``*.md`` file under it
``saved/`` (a ``save_to_disk``     hf         ``datasets.load_from_disk`` (needs ``datasets``)
folder with ``dataset_dict.json``
or ``state.json``)
``hf:<name>[:<split>]``            hf         ``datasets.load_dataset(name, split=split)``
``hf:<folder>[:<split>]``          hf         ``datasets.load_from_disk(folder)``
``<kind>:<path>``                  <kind>     explicit kind, whatever the suffix
=================================  =========  ===============================================

The split of a ``hf`` source defaults to ``train``. An ``hf:<name>`` that is not a local folder may
download from the Hugging Face hub; set ``HF_HUB_OFFLINE=1`` to forbid that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from spade_rl.corpus.config import CorpusError

KINDS = ("builtin", "jsonl", "text", "parquet", "hf")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
HF_DISK_MARKERS = ("dataset_dict.json", "state.json")  # written by Dataset(Dict).save_to_disk
DEFAULT_SPLIT = "train"

_ALLOWED = (
    "allowed: 'builtin', a .jsonl/.ndjson file, a .parquet/.pq file, a folder of .txt/.md files, "
    "'hf:<name>[:<split>]', or '<kind>:<path>' with kind one of " + ", ".join(KINDS)
)


@dataclass(frozen=True)
class SourceSpec:
    """A parsed spec: its ``kind``, a ``location`` (a path, or a dataset name) and an optional split."""

    spec: str
    kind: str
    location: str
    split: str | None = None


def parse_source(spec: str | os.PathLike[str]) -> SourceSpec:
    """Tell the kind of a source spec (see the module docstring). Raises ``CorpusError`` when the kind
    cannot be told or a path without a known suffix does not exist."""
    text = os.fspath(spec)
    if text == "builtin":
        return SourceSpec(text, "builtin", "")
    prefix, sep, rest = text.partition(":")
    if sep and prefix == "builtin":
        raise CorpusError(f"corpus source {text!r}: the built-in corpus takes no path; write 'builtin'")
    if sep and prefix in KINDS:
        if not rest:
            raise CorpusError(
                f"corpus source {text!r} names the kind {prefix!r} but no path or name after it"
            )
        if prefix == "hf":
            return _parse_hf(text, rest)
        return SourceSpec(text, prefix, rest)
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return SourceSpec(text, "jsonl", text)
    if suffix in PARQUET_SUFFIXES:
        return SourceSpec(text, "parquet", text)
    if path.is_dir():
        if any((path / marker).is_file() for marker in HF_DISK_MARKERS):
            return SourceSpec(text, "hf", text)
        return SourceSpec(text, "text", text)
    if not path.exists():
        if sep and prefix.isidentifier() and len(prefix) > 1:
            # 'foo:bar' reads as a kind prefix, not a path (a Windows drive letter is one character).
            raise CorpusError(f"corpus source {text!r} has the unknown kind {prefix!r}; {_ALLOWED}")
        raise CorpusError(f"corpus source {text!r}: no such file or folder ({path.resolve()}); {_ALLOWED}")
    raise CorpusError(
        f"corpus source {text!r}: cannot tell the kind of a file with suffix {suffix or '(none)'!r}; "
        f"{_ALLOWED} (for example 'jsonl:{text}')"
    )


def _parse_hf(text: str, rest: str) -> SourceSpec:
    if Path(rest).is_dir():
        return SourceSpec(text, "hf", rest)
    name, sep, split = rest.rpartition(":")
    if sep and name and split:
        return SourceSpec(text, "hf", name, split)
    return SourceSpec(text, "hf", rest)
