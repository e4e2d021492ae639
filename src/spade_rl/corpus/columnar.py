"""Column-store sources: Parquet files (``pyarrow``) and Hugging Face ``datasets``.

Both libraries are optional and imported only when such a source is used; without them the error
names the package to install. Text, id and title columns are chosen like the fields of a JSONL
record (see :class:`spade_rl.corpus.CorpusConfig`); a row whose text column is null falls back to
the next text column. Rows are numbered from 0. Building the corpus reads the columns once, keeping
only ids and row positions; a document's text is read again when it is asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spade_rl.corpus.config import DATASETS_PIN, PYARROW_PIN, CorpusConfig, CorpusError
from spade_rl.corpus.document import Record, Skip, pick_id, pick_text, pick_title
from spade_rl.corpus.files import check_file
from spade_rl.corpus.spec import DEFAULT_SPLIT, SourceSpec


class _ColumnarSource:
    """Shared row handling: which columns to read, and a row (a dict) to a record."""

    unit = "rows"

    def __init__(self, spec: SourceSpec, config: CorpusConfig, where: str, columns: list[str]):
        self.spec = spec
        self.where = where
        self.id_field = config.id_field
        self.title_field = config.title_field
        self.text_fields = tuple(name for name in config.text_fields if name in columns)
        if not self.text_fields:
            looked = ", then ".join(repr(f) for f in config.text_fields)
            raise CorpusError(
                f"corpus source {spec.spec!r}: {where} has no text column (looked for {looked}); "
                f"its columns are {columns}; set text_field to one of them"
            )
        wanted = (*self.text_fields, config.id_field, config.title_field)
        self.columns = [name for name in dict.fromkeys(wanted) if name in columns]
        self.units_read = 0

    def _record(self, row: dict[str, Any], index: int, derived_prefix: str, locator: Any) -> Record | Skip:
        where = f"{self.where} row {index}"
        text = pick_text(row, self.text_fields, where)
        if isinstance(text, Skip):
            return text
        doc_id = pick_id(row, self.id_field, f"{derived_prefix}:{index}", where)
        if isinstance(doc_id, Skip):
            return doc_id
        title = pick_title(row, self.title_field)
        return Record(doc_id, text[0], locator, title=title, where={"row": index, "text_field": text[1]})

    def _reread(self, result: Record | Skip) -> Record:
        if isinstance(result, Skip):  # cannot happen for unchanged data
            raise CorpusError(f"corpus source {self.spec.spec!r}: {result.where}: {result.detail}")
        return result


class ParquetSource(_ColumnarSource):
    """One document per row of a Parquet file, read one row group at a time."""

    def __init__(self, spec: SourceSpec, config: CorpusConfig):
        self.path = Path(spec.location)
        check_file(self.path, spec.spec, "Parquet")
        parquet = _import_pyarrow_parquet(spec.spec)
        try:
            self._file = parquet.ParquetFile(self.path)
        except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise CorpusError(
                f"corpus source {spec.spec!r}: {self.path} is not a Parquet file ({exc})"
            ) from None
        super().__init__(spec, config, str(self.path), list(self._file.schema_arrow.names))
        self._stamp = self.path.stat().st_mtime_ns
        self._cached: tuple[int, list[dict[str, Any]]] | None = None

    def scan(self) -> Iterator[Record | Skip]:
        index = 0
        for group in range(self._file.num_row_groups):
            for offset, row in enumerate(self._rows(group)):
                self.units_read = index + 1
                yield self._record(row, index, self.path.stem, (group, offset, index))
                index += 1
        self._cached = None

    def read(self, locator: tuple[int, int, int]) -> Record:
        if self.path.stat().st_mtime_ns != self._stamp:
            raise CorpusError(
                f"corpus source {self.spec.spec!r}: {self.path} changed after the corpus was built; "
                "build the corpus again"
            )
        group, offset, index = locator
        return self._reread(self._record(self._rows(group)[offset], index, self.path.stem, locator))

    def _rows(self, group: int) -> list[dict[str, Any]]:
        cached = self._cached  # one read of the attribute: another thread may replace it meanwhile
        if cached is None or cached[0] != group:
            cached = (group, self._file.read_row_group(group, columns=self.columns).to_pylist())
            self._cached = cached
        return cached[1]


class HfSource(_ColumnarSource):
    """One document per row of a Hugging Face dataset split: a local ``save_to_disk`` folder
    (``load_from_disk``) or a name for ``load_dataset``."""

    def __init__(self, spec: SourceSpec, config: CorpusConfig):
        datasets = _import_datasets(spec.spec)
        local = Path(spec.location).is_dir()
        try:
            if local:
                loaded = datasets.load_from_disk(spec.location)
            else:
                loaded = datasets.load_dataset(spec.location, split=spec.split or DEFAULT_SPLIT)
        except (OSError, ValueError) as exc:  # not found, offline, not a dataset folder
            raise CorpusError(f"corpus source {spec.spec!r}: could not load the dataset ({exc})") from None
        if isinstance(loaded, datasets.DatasetDict):
            split = spec.split or DEFAULT_SPLIT
            if split not in loaded:
                raise CorpusError(
                    f"corpus source {spec.spec!r} has no split {split!r}; its splits are {sorted(loaded)} "
                    f"(write 'hf:{spec.location}:<split>')"
                )
            loaded = loaded[split]
        elif local and spec.split is not None:
            raise CorpusError(
                f"corpus source {spec.spec!r}: {spec.location} holds a single dataset without splits; "
                f"write 'hf:{spec.location}'"
            )
        self._prefix = Path(spec.location).name if local else spec.location
        super().__init__(spec, config, f"dataset {spec.location}", list(loaded.column_names))
        self._data = loaded.select_columns(self.columns)

    def scan(self) -> Iterator[Record | Skip]:
        index = 0
        for batch in self._data.iter(batch_size=1000):
            for offset in range(len(batch[self.columns[0]])):
                self.units_read = index + 1
                row = {name: batch[name][offset] for name in self.columns}
                yield self._record(row, index, self._prefix, index)
                index += 1

    def read(self, locator: int) -> Record:
        return self._reread(self._record(self._data[locator], locator, self._prefix, locator))


def _import_pyarrow_parquet(spec: str) -> Any:
    try:
        import pyarrow.parquet as parquet  # optional: imported on use
    except ImportError:
        raise CorpusError(
            f"corpus source {spec!r} is a Parquet file, and reading Parquet needs pyarrow, which is not "
            f"installed: pip install {PYARROW_PIN} (or the extra: pip install 'spade-rl[corpus]')"
        ) from None
    return parquet


def _import_datasets(spec: str) -> Any:
    try:
        import datasets  # optional: imported on use
    except ImportError:
        raise CorpusError(
            f"corpus source {spec!r} is a Hugging Face dataset, and loading it needs the package "
            f"'datasets', which is not installed: pip install {DATASETS_PIN}"
        ) from None
    return datasets
