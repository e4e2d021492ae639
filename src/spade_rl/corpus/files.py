"""Plain-file sources: JSONL files and folders of text files.

Both are read lazily. Building the corpus scans each file once and keeps only ids and locations (the
byte offset of a JSONL line, the path of a text file); a document's text is read again when it is
asked for. A file that changed since the scan is reported, not silently misread.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from spade_rl.corpus.config import CorpusConfig, CorpusError
from spade_rl.corpus.document import Record, Skip, pick_id, pick_text, pick_title
from spade_rl.corpus.spec import SourceSpec

TEXT_SUFFIXES = (".txt", ".md")
_BOM = b"\xef\xbb\xbf"


def check_file(path: Path, spec: str, what: str) -> None:
    if not path.exists():
        raise CorpusError(f"corpus source {spec!r}: file not found ({path.resolve()})")
    if not path.is_file():
        raise CorpusError(f"corpus source {spec!r}: {path} is not a file; a {what} source must be a file")


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _not_utf8(exc: UnicodeDecodeError) -> str:
    return (
        f"not UTF-8 text ({exc.reason} at byte {exc.start}); corpus files must be UTF-8, "
        "convert it first (for example: iconv -f latin1 -t utf-8)"
    )


class JsonlSource:
    """One JSON object per line. Blank lines are ignored; any other line that does not hold a usable
    record is a :class:`Skip` (not UTF-8, not JSON, not an object, no text, a bad id)."""

    unit = "lines"

    def __init__(self, spec: SourceSpec, config: CorpusConfig):
        self.spec = spec
        self.path = Path(spec.location)
        check_file(self.path, spec.spec, "JSONL")
        self.text_fields = config.text_fields
        self.id_field = config.id_field
        self.title_field = config.title_field
        self.units_read = 0
        self._stem = self.path.stem
        self._stamp: tuple[int, int] | None = None

    def scan(self) -> Iterator[Record | Skip]:
        self._stamp = _stamp(self.path)
        offset = 0
        with self.path.open("rb") as file:
            for number, raw in enumerate(file, start=1):
                start, offset = offset, offset + len(raw)
                self.units_read = number
                if not raw.strip():
                    continue
                yield self._parse(raw, number, (start, number))

    def read(self, locator: tuple[int, int]) -> Record:
        if _stamp(self.path) != self._stamp:
            raise CorpusError(
                f"corpus source {self.spec.spec!r}: {self.path} changed after the corpus was built; "
                "build the corpus again"
            )
        start, number = locator
        with self.path.open("rb") as file:
            file.seek(start)
            raw = file.readline()
        result = self._parse(raw, number, locator)
        if isinstance(result, Skip):  # cannot happen for an unchanged file
            raise CorpusError(f"corpus source {self.spec.spec!r}: {result.where}: {result.detail}")
        return result

    def _parse(self, raw: bytes, number: int, locator: tuple[int, int]) -> Record | Skip:
        where = f"{self.path}:{number}"
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Skip("not_utf8", _not_utf8(exc), where)
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            return Skip("not_json", f"not JSON ({exc})", where)
        if not isinstance(row, dict):
            return Skip("not_object", f"a JSON {type(row).__name__}, not an object", where)
        text = pick_text(row, self.text_fields, where)
        if isinstance(text, Skip):
            return text
        doc_id = pick_id(row, self.id_field, f"{self._stem}:{number}", where)
        if isinstance(doc_id, Skip):
            return doc_id
        return Record(
            doc_id,
            text[0],
            locator,
            title=pick_title(row, self.title_field),
            where={"line": number, "text_field": text[1]},
        )


class TextFolderSource:
    """Every ``*.txt`` / ``*.md`` file under a folder (recursively, in sorted order of the relative
    path, skipping hidden files and folders), one document per file; the id is the relative path."""

    unit = "files"

    def __init__(self, spec: SourceSpec, config: CorpusConfig):
        self.spec = spec
        self.root = Path(spec.location)
        if not self.root.exists():
            raise CorpusError(f"corpus source {spec.spec!r}: folder not found ({self.root.resolve()})")
        if not self.root.is_dir():
            raise CorpusError(f"corpus source {spec.spec!r}: {self.root} is not a folder")
        self.units_read = 0

    def files(self) -> list[str]:
        found = []
        for folder, subfolders, names in os.walk(self.root):
            subfolders[:] = [name for name in subfolders if not name.startswith(".")]
            for name in names:
                if not name.startswith(".") and Path(name).suffix.lower() in TEXT_SUFFIXES:
                    found.append(Path(folder, name).relative_to(self.root).as_posix())
        return sorted(found)

    def scan(self) -> Iterator[Record | Skip]:
        files = self.files()
        if not files:
            raise CorpusError(
                f"corpus source {self.spec.spec!r}: no {' or '.join('*' + s for s in TEXT_SUFFIXES)} "
                f"files under {self.root.resolve()}"
            )
        for count, relative in enumerate(files, start=1):
            self.units_read = count
            yield self._load(relative)

    def read(self, locator: str) -> Record:
        result = self._load(locator)
        if isinstance(result, Skip):
            raise CorpusError(f"corpus source {self.spec.spec!r}: {result.where}: {result.detail}")
        return result

    def _load(self, relative: str) -> Record | Skip:
        path = self.root / relative
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            return Skip("not_utf8", _not_utf8(exc), str(path))
        except OSError as exc:
            return Skip("unreadable", f"cannot be read ({exc.strerror})", str(path))
        if not text.strip():
            return Skip("no_text", "the file is empty", str(path))
        return Record(relative, text, relative, title=_title(text, path), where={"path": relative})


def _title(text: str, path: Path) -> str:
    """A Markdown file's leading heading, else the file name without its suffix."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if path.suffix.lower() == ".md" and first.startswith("#"):
        return first.lstrip("#").strip() or path.stem
    return path.stem
