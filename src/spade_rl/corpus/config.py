"""Configuration of the grounding corpus, and the one error type for bad corpus input."""

from __future__ import annotations

import os
from dataclasses import dataclass

ON_BAD_RECORD = ("skip", "error")
DEFAULT_TEXT_FALLBACKS = ("orig_doc", "content")  # SPICE-style files keep the document in orig_doc

# The pins named in messages about optional dependencies that are not installed.
PYARROW_PIN = "pyarrow==26.0.1"
DATASETS_PIN = "datasets==5.2.0"


class CorpusError(ValueError):
    """Bad corpus input from the user: a missing file, an unknown source kind, no usable documents.

    The message says what was wrong (naming the file and the field looked for) and what is allowed.
    """


@dataclass(frozen=True)
class CorpusConfig:
    """Where grounding documents come from and how they are cut to size.

    ``sources`` are source specs (see :func:`spade_rl.corpus.parse_source`): ``"builtin"``, a
    ``.jsonl`` or ``.parquet`` file, a folder of ``.txt``/``.md`` files, ``hf:<name>[:<split>]``, or
    any of these with an explicit ``<kind>:`` prefix. Records take their text from ``text_field``,
    else from the first of ``text_fallbacks`` present; their id from ``id_field``, else one is
    derived from the file and line (or row). Documents with fewer than ``min_words`` words are left
    out; longer ones are cut to ``max_words`` whole words (``None``: never cut). ``on_bad_record``
    says what a malformed record does: ``skip`` (logged and counted) or ``error`` (raise at once).
    """

    sources: tuple[str, ...] = ("builtin",)
    text_field: str = "text"
    text_fallbacks: tuple[str, ...] = DEFAULT_TEXT_FALLBACKS
    id_field: str = "id"
    title_field: str = "title"
    max_words: int | None = 2000
    min_words: int = 50
    on_bad_record: str = "skip"

    def __post_init__(self) -> None:
        sources = self.sources
        if isinstance(sources, (str, os.PathLike)):
            raise CorpusError(
                f"corpus setting sources must be a list of source specs, got the single value {sources!r}; "
                f"write sources=({str(sources)!r},)"
            )
        if not isinstance(sources, (list, tuple)) or not sources:
            raise CorpusError(
                f"corpus setting sources must be a non-empty list of source specs, got {sources!r}; "
                "allowed specs: 'builtin', a .jsonl or .parquet file, a folder, 'hf:<name>[:<split>]'"
            )
        for spec in sources:
            if not isinstance(spec, (str, os.PathLike)) or not str(spec).strip():
                raise CorpusError(
                    f"corpus setting sources holds {spec!r}; each spec must be a non-empty path"
                )
        # Normalise (a list from a YAML/JSON file, Path objects) to a tuple of strings.
        object.__setattr__(self, "sources", tuple(os.fspath(spec) for spec in sources))
        for name in ("text_field", "id_field", "title_field"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise CorpusError(f"corpus setting {name} must be a non-empty string, got {value!r}")
        fallbacks = self.text_fallbacks
        if not isinstance(fallbacks, (list, tuple)) or not all(isinstance(f, str) and f for f in fallbacks):
            raise CorpusError(
                f"corpus setting text_fallbacks must be a list of non-empty field names, got {fallbacks!r}"
            )
        object.__setattr__(self, "text_fallbacks", tuple(fallbacks))
        if self.max_words is not None and (type(self.max_words) is not int or self.max_words < 1):
            raise CorpusError(
                "corpus setting max_words must be a positive integer or None (never cut), "
                f"got {self.max_words!r}"
            )
        if type(self.min_words) is not int or self.min_words < 0:
            raise CorpusError(f"corpus setting min_words must be an integer >= 0, got {self.min_words!r}")
        if self.max_words is not None and self.min_words > self.max_words:
            raise CorpusError(
                f"corpus setting min_words ({self.min_words}) cannot exceed max_words ({self.max_words})"
            )
        if self.on_bad_record not in ON_BAD_RECORD:
            raise CorpusError(
                f"corpus setting on_bad_record is {self.on_bad_record!r}; allowed: {list(ON_BAD_RECORD)}"
            )

    @property
    def text_fields(self) -> tuple[str, ...]:
        """The fields a record's text is looked for in, in order (no field twice)."""
        return tuple(dict.fromkeys((self.text_field, *self.text_fallbacks)))
