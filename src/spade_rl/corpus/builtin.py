"""The built-in corpus: documentation that ships with the Python standard library, read at run time.

Where the text comes from: the reference-manual topics of ``pydoc_data.topics`` (the text that
``help("assert")`` shows) and the docstrings of algorithmic and general-purpose standard modules
(``heapq``, ``itertools``, ``statistics``, ...) and of their public classes and functions. All of it
is the Python documentation, copyright the Python Software Foundation, under the PSF licence. It is
read from the user's own Python installation when the corpus is built; nothing of it is copied into
this repository, whose MIT licence it therefore does not touch.

Ids are ``pydoc:<topic>``, ``module:<name>`` and ``module:<name>.<member>``; they are stable for a
given Python version (another version may have a few more or fewer documents, or reworded ones).
This corpus needs no download, so the loop always has something to ground designs in; a real run
should use a larger, more varied corpus.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Iterator
from dataclasses import replace

from spade_rl.corpus.config import CorpusConfig
from spade_rl.corpus.document import Record
from spade_rl.corpus.spec import SourceSpec

logger = logging.getLogger(__name__)

# Modules about algorithms, data structures, maths, text and time: the kind of material a designer
# can turn into a puzzle or a game. Only side-effect-free imports belong here.
MODULES = (
    "abc",
    "argparse",
    "array",
    "base64",
    "bisect",
    "calendar",
    "cmath",
    "collections",
    "colorsys",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "graphlib",
    "hashlib",
    "heapq",
    "ipaddress",
    "itertools",
    "json",
    "math",
    "numbers",
    "operator",
    "pprint",
    "random",
    "re",
    "sched",
    "secrets",
    "shlex",
    "statistics",
    "string",
    "struct",
    "textwrap",
    "timeit",
    "typing",
    "unicodedata",
    "uuid",
    "zlib",
)


class BuiltinSource:
    """The built-in documents, held in memory (a few hundred of them, well under a megabyte)."""

    unit = "documents"

    def __init__(self, spec: SourceSpec, config: CorpusConfig):
        self.spec = spec
        self._records = [replace(record, locator=i) for i, record in enumerate(builtin_records())]
        self.units_read = 0

    def scan(self) -> Iterator[Record]:
        for count, record in enumerate(self._records, start=1):
            self.units_read = count
            yield record

    def read(self, locator: int) -> Record:
        return self._records[locator]


def builtin_records() -> Iterator[Record]:
    """Every built-in document, unfiltered and uncut, in a fixed order: topics, then modules.

    Blank texts and repeated texts are left out here; the corpus applies the word limits.
    """
    seen: set[str] = set()
    for record in (*_topic_records(), *_module_records()):
        if record.text.strip() and record.text not in seen:
            seen.add(record.text)
            yield record


def _topic_records() -> list[Record]:
    try:
        from pydoc_data.topics import topics  # part of the standard library, absent from some builds
    except ImportError:
        logger.warning("pydoc_data is not part of this Python build: the built-in corpus has no topics")
        return []
    records = []
    for name in sorted(topics):
        text = topics[name].strip()
        lines = text.splitlines()
        # A topic opens with its heading underlined by '*', e.g. 'The "assert" statement'.
        underlined = len(lines) > 1 and set(lines[1].strip()) <= {"*", "=", "-"} and lines[1].strip()
        title = lines[0].strip() if underlined else name
        records.append(Record(f"pydoc:{name}", text, None, title=title, where={"topic": name}))
    return records


def _module_records() -> list[Record]:
    records = []
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a build without the module (or its C accelerator)
            logger.debug("built-in corpus: module %s is not importable, skipped", module_name)
            continue
        doc = inspect.cleandoc(module.__doc__ or "")
        summary = doc.splitlines()[0].strip() if doc else ""
        title = f"Python module {module_name}: {summary}" if summary else f"Python module {module_name}"
        records.append(Record(f"module:{module_name}", doc, None, title=title, where={"module": module_name}))
        for member, text in _member_docs(module, module_name):
            qualified = f"{module_name}.{member}"
            records.append(
                Record(f"module:{qualified}", text, None, title=qualified, where={"module": qualified})
            )
    return records


def _member_docs(module: object, module_name: str) -> list[tuple[str, str]]:
    """The docstrings of the public classes and functions that ``module`` defines itself (or its C
    accelerator ``_<name>`` does), not those it imports from elsewhere."""
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    found = []
    for name in sorted(set(names)):
        obj = getattr(module, name, None)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        if getattr(obj, "__module__", None) not in (module_name, f"_{module_name}"):
            continue
        doc = obj.__doc__  # its own docstring: inspect.getdoc would inherit one from a base class
        if isinstance(doc, str) and doc.strip():
            found.append((name, inspect.cleandoc(doc)))
    return found
