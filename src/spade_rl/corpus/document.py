"""The grounding ``Document``, word counting and truncation, and the records that sources yield.

A source (JSONL, text folder, Parquet, ``datasets``, built-in) yields a :class:`Record` for every
usable entry and a :class:`Skip` for every malformed one; the corpus turns records into documents,
cut to a word budget. A word is a maximal run of non-whitespace characters (``str.split``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Document:
    """One grounding document.

    ``source`` is the spec it came from; ``metadata`` holds at least ``words`` (the word count of
    the original text), ``truncated`` (whether ``text`` was cut to the word budget) and
    ``kept_words`` (the word count of ``text``), plus where it was found (``line``, ``row``, ``path``).
    """

    id: str
    text: str
    source: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Record:
    """A usable entry as a source found it. ``locator`` lets the source read it again later."""

    id: str
    text: str
    locator: Any
    title: str | None = None
    where: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skip:
    """A malformed entry: ``reason`` is a stable code, ``detail`` says what was wrong, ``where`` where."""

    reason: str
    detail: str
    where: str


def count_words(text: str) -> int:
    return len(text.split())


def truncate_words(text: str, max_words: int | None) -> tuple[str, bool]:
    """Cut ``text`` after its first ``max_words`` words, keeping whole words and the whitespace between
    them (line breaks, indentation). Returns the text and whether it was cut."""
    if max_words is None:
        return text, False
    end = None
    for count, match in enumerate(_WORD.finditer(text), start=1):
        if count > max_words:
            return text[:end], True
        end = match.end()
    return text, False


def make_document(record: Record, source: str, max_words: int | None) -> Document:
    text, truncated = truncate_words(record.text, max_words)
    words = count_words(record.text)
    metadata = {
        "words": words,
        "truncated": truncated,
        "kept_words": max_words if truncated else words,
        **record.where,
    }
    return Document(id=record.id, text=text, source=source, title=record.title, metadata=metadata)


def pick_text(row: Mapping[str, Any], fields: Sequence[str], where: str) -> tuple[str, str] | Skip:
    """The text of a record: the first of ``fields`` that holds a non-blank string, and its name."""
    for name in fields:
        value = row.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            return Skip("bad_text", f"field {name!r} holds {type(value).__name__}, not a string", where)
        if value.strip():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a JSON "\ud800" escape decodes to a lone surrogate
                return Skip(
                    "bad_text", f"field {name!r} holds a lone surrogate, not valid Unicode text", where
                )
            return value, name
    looked = ", then ".join(repr(f) for f in fields)
    return Skip("no_text", f"no non-empty text field (looked for {looked})", where)


def pick_id(row: Mapping[str, Any], id_field: str, derived: str, where: str) -> str | Skip:
    """The id of a record: ``row[id_field]`` (a string or an integer), else ``derived``."""
    value = row.get(id_field)
    if value is None:
        return derived
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return Skip(
            "bad_id", f"id field {id_field!r} holds {type(value).__name__}, not a string or int", where
        )
    value = str(value)
    if not value.strip():
        return Skip("bad_id", f"id field {id_field!r} is blank", where)
    return value


def pick_title(row: Mapping[str, Any], title_field: str) -> str | None:
    value = row.get(title_field)
    return (value.strip() or None) if isinstance(value, str) else None
