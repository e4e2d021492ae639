"""The grounding corpus: every source kind, truncation, the built-in corpus, seeded sampling, bad input.

Test files are written into ``tmp_path``; Parquet tests need ``pyarrow`` and the ``datasets`` tests
need ``datasets`` (both skip without them, and nothing is ever downloaded).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_rl.corpus import (
    Corpus,
    CorpusConfig,
    CorpusError,
    Document,
    parse_source,
    truncate_words,
)


def words(n: int, word: str = "word") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def build(*sources, **settings_) -> Corpus:
    settings_.setdefault("min_words", 1)
    return Corpus.from_config(CorpusConfig(sources=tuple(str(s) for s in sources), **settings_))


def error_of(*sources, **settings_) -> str:
    with pytest.raises(CorpusError) as info:
        build(*sources, **settings_)
    return str(info.value)


# --- configuration ------------------------------------------------------------------------------


def test_config_defaults_and_normalisation(tmp_path):
    config = CorpusConfig()
    assert config.sources == ("builtin",) and config.max_words == 2000 and config.min_words == 50
    assert config.text_fields == ("text", "orig_doc", "content")
    config = CorpusConfig(sources=[tmp_path / "a.jsonl"], text_fallbacks=["content"], text_field="content")
    assert config.sources == (str(tmp_path / "a.jsonl"),)
    assert config.text_fields == ("content",)


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"sources": "builtin"}, "sources must be a list of source specs"),
        ({"sources": ()}, "sources must be a non-empty list"),
        ({"sources": ("builtin", "")}, "each spec must be a non-empty path"),
        ({"sources": ("builtin", 3)}, "each spec must be a non-empty path"),
        ({"text_field": ""}, "text_field must be a non-empty string"),
        ({"id_field": None}, "id_field must be a non-empty string"),
        ({"text_fallbacks": ("ok", "")}, "text_fallbacks must be a list of non-empty field names"),
        ({"max_words": 0}, "max_words must be a positive integer or None"),
        ({"max_words": True}, "max_words must be a positive integer or None"),
        ({"max_words": 2.5}, "max_words must be a positive integer or None"),
        ({"min_words": -1}, "min_words must be an integer >= 0"),
        ({"min_words": 10, "max_words": 5}, "min_words (10) cannot exceed max_words (5)"),
        ({"on_bad_record": "ignore"}, "on_bad_record is 'ignore'; allowed: ['skip', 'error']"),
    ],
)
def test_config_rejects_bad_settings(settings_, message):
    with pytest.raises(CorpusError, match="corpus setting") as info:
        CorpusConfig(**settings_)
    assert message in str(info.value)


# --- source specs -------------------------------------------------------------------------------


def test_parse_source_kinds(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "dataset_dict.json").write_text("{}")
    (tmp_path / "odd.data").write_text("x")
    cases = {
        "builtin": ("builtin", "", None),
        "docs.jsonl": ("jsonl", "docs.jsonl", None),
        "docs.NDJSON": ("jsonl", "docs.NDJSON", None),
        "docs.parquet": ("parquet", "docs.parquet", None),
        "docs.pq": ("parquet", "docs.pq", None),
        str(tmp_path / "notes"): ("text", str(tmp_path / "notes"), None),
        str(tmp_path / "saved"): ("hf", str(tmp_path / "saved"), None),
        "hf:user/wiki": ("hf", "user/wiki", None),
        "hf:user/wiki:validation": ("hf", "user/wiki", "validation"),
        f"hf:{tmp_path / 'saved'}": ("hf", str(tmp_path / "saved"), None),
        f"hf:{tmp_path / 'saved'}:test": ("hf", str(tmp_path / "saved"), "test"),
        f"jsonl:{tmp_path / 'odd.data'}": ("jsonl", str(tmp_path / "odd.data"), None),
        f"text:{tmp_path / 'saved'}": ("text", str(tmp_path / "saved"), None),
    }
    for spec, (kind, location, split) in cases.items():
        parsed = parse_source(spec)
        assert (parsed.kind, parsed.location, parsed.split) == (kind, location, split), spec
        assert parsed.spec == spec
    assert parse_source(tmp_path / "notes").kind == "text"  # a Path works too


def test_parse_source_errors(tmp_path):
    (tmp_path / "odd.data").write_text("x")
    with pytest.raises(CorpusError, match="unknown kind 'foo'; allowed: 'builtin'"):
        parse_source("foo:bar")
    with pytest.raises(CorpusError, match="no such file or folder") as info:
        parse_source(tmp_path / "missing")
    assert "'hf:<name>[:<split>]'" in str(info.value)
    with pytest.raises(CorpusError, match=r"cannot tell the kind of a file with suffix '\.data'.*jsonl:"):
        parse_source(tmp_path / "odd.data")
    with pytest.raises(CorpusError, match="names the kind 'jsonl' but no path"):
        parse_source("jsonl:")
    with pytest.raises(CorpusError, match="the built-in corpus takes no path; write 'builtin'"):
        parse_source("builtin:x")


# --- JSONL --------------------------------------------------------------------------------------


def test_jsonl_ids_titles_and_lookup(tmp_path):
    path = write_jsonl(
        tmp_path / "docs.jsonl",
        [
            {"id": "a", "text": "first document text", "title": "First"},
            "",
            {"id": 7, "text": "second document"},
            {"text": "third, without an id"},
        ],
    )
    corpus = build(path)
    assert corpus.ids() == ("a", "7", "docs:4")  # derived ids count lines from 1, blank lines included
    assert len(corpus) == 3 and "a" in corpus and "b" not in corpus
    first = corpus.get("a")
    assert first == Document(
        id="a",
        text="first document text",
        source=str(path),
        title="First",
        metadata={"words": 3, "truncated": False, "kept_words": 3, "line": 1, "text_field": "text"},
    )
    assert corpus.get("docs:4").title is None
    assert [d.id for d in corpus] == list(corpus.ids())
    assert corpus.stats[0].documents == 3 and corpus.stats[0].read == 4 and corpus.stats[0].skipped == {}


def test_jsonl_custom_fields(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"key": "k1", "body": "the body", "name": "N", "text": "not me"}]
    )
    doc = build(path, text_field="body", id_field="key", title_field="name").get("k1")
    assert (doc.text, doc.title, doc.metadata["text_field"]) == ("the body", "N", "body")


def test_spice_orig_doc_fallback(tmp_path):
    path = write_jsonl(
        tmp_path / "spice.jsonl",
        [
            {"orig_doc": "a SPICE document", "question": "q?", "answer": "a"},
            {"content": "only a content field"},
            {"text": "", "orig_doc": "empty text falls back"},
            {"text": "text wins", "orig_doc": "not used"},
        ],
    )
    docs = list(build(path))
    assert [d.text for d in docs] == [
        "a SPICE document",
        "only a content field",
        "empty text falls back",
        "text wins",
    ]
    assert [d.metadata["text_field"] for d in docs] == ["orig_doc", "content", "orig_doc", "text"]


def test_truncate_words_keeps_whole_words_and_layout():
    text = "one two\n  three\tfour   five"
    assert truncate_words(text, 3) == ("one two\n  three", True)
    assert truncate_words(text, 5) == (text, False)
    assert truncate_words(text, 100) == (text, False)
    assert truncate_words(text, None) == (text, False)
    assert truncate_words("  lead ing ", 1) == ("  lead", True)


def test_documents_are_truncated_with_a_flag(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"id": "long", "text": words(30)}, {"id": "short", "text": words(5)}]
    )
    corpus = build(path, max_words=10)
    long, short = corpus.get("long"), corpus.get("short")
    assert long.text == words(10) and long.text.split() == words(30).split()[:10]
    assert (long.metadata["words"], long.metadata["truncated"], long.metadata["kept_words"]) == (30, True, 10)
    assert short.text == words(5) and short.metadata["truncated"] is False
    assert corpus.stats[0].truncated == 1
    assert build(path, max_words=None).get("long").text == words(30)


def test_min_words_leaves_short_documents_out(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"id": "long", "text": words(50)}, {"id": "short", "text": words(49)}]
    )
    corpus = build(path, min_words=50)
    assert corpus.ids() == ("long",)
    assert corpus.stats[0].skipped == {"too_short": 1}
    message = error_of(write_jsonl(tmp_path / "s.jsonl", [{"text": "too short"}]), min_words=50)
    assert "has no usable documents: of 1 lines read, 1 lines shorter than min_words=50" in message


# --- text folders -------------------------------------------------------------------------------


def test_text_folder(tmp_path):
    root = tmp_path / "notes"
    (root / "b" / "deep").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "z.md").write_text("\n# Heading of z\n\nbody of z\n", encoding="utf-8")
    (root / "a.txt").write_text("plain text a", encoding="utf-8")
    (root / "b" / "deep" / "c.TXT").write_text("deep c", encoding="utf-8")
    (root / "b" / "skip.rst").write_text("not a text file kind", encoding="utf-8")
    (root / ".hidden" / "h.txt").write_text("hidden", encoding="utf-8")
    (root / ".dot.txt").write_text("hidden file", encoding="utf-8")
    corpus = build(root)
    assert corpus.ids() == ("a.txt", "b/deep/c.TXT", "z.md")
    assert corpus.get("z.md").title == "Heading of z"
    assert corpus.get("a.txt").title == "a"
    assert corpus.get("b/deep/c.TXT").metadata["path"] == "b/deep/c.TXT"
    assert corpus.get("a.txt").text == "plain text a" and corpus.get("a.txt").source == str(root)


def test_text_folder_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.rst").write_text("x")
    assert "no *.txt or *.md files under" in error_of(tmp_path / "empty")
    assert "folder not found" in error_of(f"text:{tmp_path / 'nope'}")
    (tmp_path / "f.txt").write_text("x")
    assert "is not a folder" in error_of(f"text:{tmp_path / 'f.txt'}")


def test_text_folder_non_utf8_file(tmp_path, caplog):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "good.txt").write_text("good text", encoding="utf-8")
    (root / "latin.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (root / "zblank.txt").write_text("  \n")
    with caplog.at_level(logging.WARNING, logger="spade_rl.corpus"):
        corpus = build(root)
    assert corpus.ids() == ("good.txt",)
    assert corpus.stats[0].skipped == {"not_utf8": 1, "no_text": 1}
    assert "latin.txt: not UTF-8 text (invalid continuation byte at byte 3)" in caplog.text
    message = error_of(root, on_bad_record="error")
    assert "latin.txt: not UTF-8 text" in message and "corpus files must be UTF-8" in message


# --- Parquet ------------------------------------------------------------------------------------


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {
            "id": ["p0", None, "p2", "p3", "p4"],
            "text": ["zero", None, "two", None, "four words are here"],
            "orig_doc": [None, "one from orig_doc", None, None, "unused"],
            "title": ["T0", None, None, None, None],
        }
    )
    path = tmp_path / "docs.parquet"
    parquet.write_table(table, path, row_group_size=2)  # three row groups
    corpus = build(path)
    assert corpus.ids() == ("p0", "docs:1", "p2", "p4")
    assert corpus.stats[0].skipped == {"no_text": 1} and corpus.stats[0].read == 5
    assert corpus.get("docs:1").text == "one from orig_doc"
    assert corpus.get("docs:1").metadata["text_field"] == "orig_doc"
    assert corpus.get("p4").metadata["row"] == 4 and corpus.get("p0").title == "T0"
    # Random access across row groups, back and forth.
    assert [d.text for d in corpus.sample(random.Random(3), 4)] == [
        corpus.get(i).text for i in random.Random(3).sample(list(corpus.ids()), 4)
    ]
    assert build(f"parquet:{path}", max_words=2).get("p4").text == "four words"


def test_parquet_errors(tmp_path):
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "cols.parquet"
    parquet.write_table(pa.table({"body": ["x"], "n": [1]}), path)
    message = error_of(path)
    assert "has no text column (looked for 'text', then 'orig_doc', then 'content')" in message
    assert "its columns are ['body', 'n']; set text_field" in message
    assert build(path, text_field="body").get("cols:0").text == "x"
    (tmp_path / "fake.parquet").write_text("not parquet at all")
    assert "is not a Parquet file" in error_of(tmp_path / "fake.parquet")
    assert "file not found" in error_of(tmp_path / "missing.parquet")


def test_parquet_without_pyarrow(tmp_path, monkeypatch):
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow` fail
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    message = error_of(tmp_path / "d.parquet")
    assert "reading Parquet needs pyarrow, which is not installed: pip install pyarrow==" in message


# --- Hugging Face datasets ------------------------------------------------------------------------


def test_hf_dataset_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    single = datasets.Dataset.from_dict({"text": ["alpha doc", "beta doc"], "id": ["a", "b"]})
    single.save_to_disk(str(tmp_path / "single"))
    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"orig_doc": ["train one", "train two"]}),
            "test": datasets.Dataset.from_dict({"orig_doc": ["test one"]}),
        }
    )
    splits.save_to_disk(str(tmp_path / "splits"))
    corpus = build(tmp_path / "single")
    assert corpus.ids() == ("a", "b") and corpus.get("b").text == "beta doc"
    assert build(f"hf:{tmp_path / 'splits'}").ids() == ("splits:0", "splits:1")
    test = build(f"hf:{tmp_path / 'splits'}:test")
    assert test.ids() == ("splits:0",) and test.get("splits:0").text == "test one"
    assert "has no split 'dev'; its splits are ['test', 'train']" in error_of(f"hf:{tmp_path / 'splits'}:dev")
    assert "holds a single dataset without splits" in error_of(f"hf:{tmp_path / 'single'}:train")


def test_hf_without_datasets(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    message = error_of("hf:someone/some-corpus")
    assert (
        "loading it needs the package 'datasets', which is not installed: pip install datasets==" in message
    )


def test_optional_libraries_are_not_imported_eagerly():
    code = "import sys, spade_rl.corpus; print(sorted({'pyarrow', 'datasets'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the built-in corpus ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builtin() -> Corpus:
    return Corpus.from_config()


def test_builtin_corpus(builtin):
    assert len(builtin) >= 100
    ids = builtin.ids()
    assert len(set(ids)) == len(ids)
    assert {"pydoc:assert", "pydoc:for", "module:heapq", "module:itertools"} <= set(ids)
    assert all(i.startswith(("pydoc:", "module:")) for i in ids)
    docs = list(builtin)
    assert all(d.metadata["kept_words"] >= 50 and d.title and d.source == "builtin" for d in docs)
    assert all(len(d.text.split()) <= 2000 for d in docs)
    assert builtin.get("pydoc:assert").title == 'The "assert" statement'
    assert builtin.get("module:heapq").title.startswith("Python module heapq: ")
    assert any(d.metadata["truncated"] for d in docs)  # some reference topics run past 2000 words


def test_builtin_corpus_is_deterministic(builtin):
    again = Corpus.from_config(CorpusConfig(sources=("builtin",)))
    assert again.ids() == builtin.ids()
    assert list(again) == list(builtin)


def test_builtin_corpus_respects_word_limits():
    small = Corpus.from_config(CorpusConfig(max_words=100, min_words=100))
    assert all(d.metadata["kept_words"] == 100 == len(d.text.split()) for d in small)


# --- sampling -----------------------------------------------------------------------------------


def test_sample_is_seeded_and_without_replacement(builtin):
    first = builtin.sample(random.Random(7), k=10)
    assert [d.id for d in first] == [d.id for d in builtin.sample(random.Random(7), k=10)]
    assert [d.id for d in builtin.sample(7, k=10)] == [d.id for d in first]  # a seed works too
    assert len({d.id for d in first}) == 10
    others = [tuple(d.id for d in builtin.sample(random.Random(seed), k=10)) for seed in range(8, 12)]
    assert tuple(d.id for d in first) not in others and len(set(others)) == 4
    everything = builtin.sample(random.Random(0), k=len(builtin))
    assert sorted(d.id for d in everything) == sorted(builtin.ids())
    rng = random.Random(1)
    assert builtin.sample(rng)[0].id != builtin.sample(rng)[0].id  # the generator moves on


def test_sample_rejects_bad_arguments(builtin):
    for k in (0, -1, len(builtin) + 1, 1.0, True):
        with pytest.raises(ValueError, match=f"from 1 to the corpus size \\({len(builtin)}\\), got {k!r}"):
            builtin.sample(random.Random(0), k=k)
    with pytest.raises(TypeError, match=r"rng must be a random\.Random or an int seed, got str"):
        builtin.sample("seed")


def test_shuffled_never_repeats_until_exhausted(tmp_path):
    corpus = build(write_jsonl(tmp_path / "d.jsonl", [{"id": f"d{i}", "text": f"doc {i}"} for i in range(7)]))
    once = [d.id for d in corpus.shuffled(random.Random(5))]
    assert sorted(once) == sorted(corpus.ids()) and once != list(corpus.ids())
    assert once == [d.id for d in corpus.shuffled(5)]
    assert once != [d.id for d in corpus.shuffled(random.Random(6))]
    stream = corpus.shuffled(random.Random(5), cycle=True)
    seen = [next(stream).id for _ in range(7 * 20)]
    assert seen[:7] == once
    for epoch in range(20):
        assert sorted(seen[epoch * 7 : epoch * 7 + 7]) == sorted(corpus.ids())
    assert all(a != b for a, b in itertools.pairwise(seen))  # not even at the turn of an epoch
    assert len({tuple(seen[e * 7 : e * 7 + 7]) for e in range(20)}) > 1  # each epoch in a new order


def test_shuffled_checks_rng_at_once(builtin):
    with pytest.raises(TypeError, match="rng must be"):
        builtin.shuffled(None)


# --- bad input ----------------------------------------------------------------------------------


def test_missing_and_empty_files(tmp_path):
    assert f"file not found ({tmp_path / 'nope.jsonl'})" in error_of(tmp_path / "nope.jsonl")
    (tmp_path / "dir.jsonl").mkdir()
    assert "is not a file; a JSONL source must be a file" in error_of(tmp_path / "dir.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    assert error_of(tmp_path / "empty.jsonl").endswith("has no usable documents: it is empty")
    (tmp_path / "blank.jsonl").write_text("\n \n")
    assert "of 2 lines read, none held a record" in error_of(tmp_path / "blank.jsonl")


def test_unknown_spec_kind():
    message = error_of("wiki:enwiki")
    assert "unknown kind 'wiki'" in message and "'<kind>:<path>' with kind one of builtin, jsonl" in message


def test_bad_jsonl_lines_are_skipped_logged_and_counted(tmp_path, caplog):
    path = tmp_path / "mixed.jsonl"
    lines = [
        b'{"id": "ok1", "text": "fine"}',
        b"this is not json",
        b'["a", "list"]',
        b'{"id": "x", "body": "no text field"}',
        b'{"id": "y", "text": 42}',
        b'{"id": {"no": 1}, "text": "bad id"}',
        b'{"id": "ok1", "text": "duplicate id"}',
        '{"id": "latin", "text": "caf\xe9"}'.encode("latin-1"),
        b'{"id": "sur", "text": "\\ud800 lone surrogate"}',
        b'{"id": "ok2", "text": "also fine"}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.WARNING, logger="spade_rl.corpus"):
        corpus = build(path)
    assert corpus.ids() == ("ok1", "ok2")
    assert corpus.stats[0].skipped == {
        "not_json": 1,
        "not_object": 1,
        "no_text": 1,
        "bad_text": 2,
        "bad_id": 1,
        "duplicate_id": 1,
        "not_utf8": 1,
    }
    assert f"skipped {path}:2: not JSON" in caplog.text
    assert (
        f"{path}:4: no non-empty text field (looked for 'text', then 'orig_doc', then 'content')"
        in caplog.text
    )
    assert "skipped 8 malformed record(s): 1 lines not JSON, 1 lines not a JSON object" in caplog.text
    individual = [r for r in caplog.records if "skipped /" in r.getMessage()]
    assert len(individual) == 5  # one by one up to five, then only the summary


def test_nothing_usable_names_file_and_field(tmp_path):
    path = write_jsonl(tmp_path / "wrong.jsonl", [{"body": "x"}, {"body": "y"}, "not json"])
    message = error_of(path)
    assert f"corpus source '{path}' has no usable documents: of 3 lines read" in message
    assert "2 lines without text, 1 lines not JSON" in message
    assert "text is looked for in the field(s) 'text', then 'orig_doc', then 'content'" in message
    assert "set text_field" in message
    message = error_of(path, text_field="title", text_fallbacks=())
    assert "text is looked for in the field(s) 'title' (set text_field" in message


def test_on_bad_record_error_stops_at_the_first(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "good"}, "{broken"])
    message = error_of(path, on_bad_record="error")
    assert f"{path}:2: not JSON" in message and "on_bad_record='error'" in message


def test_non_utf8_jsonl_line(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes('{"text": "na\xefve"}\n'.encode("latin-1"))
    message = error_of(path)
    assert "1 lines not UTF-8" in message
    message = error_of(path, on_bad_record="error")
    assert "not UTF-8 text (invalid continuation byte at byte 12)" in message and "iconv" in message
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"id": "b", "text": "with a byte order mark"}\n')
    assert build(bom).ids() == ("b",)


def test_get_unknown_id(builtin):
    with pytest.raises(KeyError, match=r"no document with id 'nope' in the corpus .* ids look like 'pydoc:"):
        builtin.get("nope")


def test_file_changed_after_build(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "first"}])
    corpus = build(path)
    write_jsonl(path, [{"id": "a", "text": "something else entirely"}])
    os.utime(path, ns=(1, 1))
    with pytest.raises(CorpusError, match="changed after the corpus was built; build the corpus again"):
        corpus.get("a")


def test_several_sources_in_order(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "j", "text": words(60)}])
    corpus = build(path, "builtin", min_words=50)
    assert corpus.ids()[0] == "j" and corpus.ids()[1].startswith("pydoc:")
    assert [s.kind for s in corpus.stats] == ["jsonl", "builtin"]
    assert corpus.get("pydoc:assert").source == "builtin" and corpus.get("j").source == str(path)


# --- property: arbitrary lines never crash loading ----------------------------------------------

_line = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    st.builds(
        json.dumps, st.dictionaries(st.sampled_from(["text", "id", "orig_doc", "x"]), st.text(max_size=10))
    ),
    st.builds(
        json.dumps,
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=6,
        ),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_line, max_size=12))
def test_arbitrary_jsonl_lines_never_crash(lines):
    data = b"\n".join(
        line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass") for line in lines
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "fuzz.jsonl")
        path.write_bytes(data)
        records = [raw for raw in data.split(b"\n") if raw.strip()]
        try:
            corpus = build(path, min_words=0, max_words=3)
        except CorpusError as exc:
            assert "has no usable documents" in str(exc)
            return
        stats = corpus.stats[0]
        assert stats.documents == len(corpus) and stats.documents + sum(stats.skipped.values()) == len(
            records
        )
        for doc in corpus:
            assert doc.text.strip() and len(doc.text.split()) <= 3
