"""The grounding corpus: documents the designer builds environments around (step 1 of an iteration).

Documents come from JSONL files, folders of ``.txt``/``.md`` files, Parquet files (``pyarrow``),
Hugging Face ``datasets`` (when installed) and a built-in corpus made from the documentation that
ships with Python (see :mod:`spade_rl.corpus.builtin` for where that text comes from and its
licence). :mod:`spade_rl.corpus.spec` says how a source spec's kind is told. Use::

    from spade_rl.corpus import Corpus, CorpusConfig

    corpus = Corpus.from_config(CorpusConfig(sources=("docs.jsonl", "notes/"), max_words=2000))
    [document] = corpus.sample(random.Random(seed))
    for document in corpus.shuffled(random.Random(seed), cycle=True): ...

Only the standard library is needed; ``pyarrow`` and ``datasets`` are imported when a source needs them.
"""

from spade_rl.corpus.builtin import builtin_records
from spade_rl.corpus.config import CorpusConfig, CorpusError
from spade_rl.corpus.corpus import Corpus, SourceStats
from spade_rl.corpus.document import Document, count_words, truncate_words
from spade_rl.corpus.spec import KINDS, SourceSpec, parse_source

__all__ = [
    "KINDS",
    "Corpus",
    "CorpusConfig",
    "CorpusError",
    "Document",
    "SourceSpec",
    "SourceStats",
    "builtin_records",
    "count_words",
    "parse_source",
    "truncate_words",
]
