"""The environment archive: duplicates, lineage, statistics, memory and pool sampling, JSONL, files.

The last tests run writers and readers as separate processes (scripts written to tmp_path) and kill a
writer with SIGKILL in the middle of a batch.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import pytest

from spade_rl.archive import (
    Archive,
    ArchiveConfig,
    ArchiveError,
    JsonlLineError,
    PlayStats,
    frontier_closeness,
    merge_stats,
    pool_weight,
    source_hash,
)
from spade_rl.archive.sampling import probabilities, weighted_sample

GUESS = '''
class GuessEnv:
    """Guess the number."""

    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.target = 3
        return "guess a number from 1 to 5", {}

    def step(self, action):
        won = action.strip() == str(self.target)
        return ("right" if won else "wrong"), (1.0 if won else 0.0), won, False, {}

    def solution(self):
        return "3"
'''

# The same program: other quotes, spacing, blank lines, comments and parentheses.
GUESS_REFORMATTED = """
class GuessEnv:
    '''Guess the number.'''
    def __init__(self, max_turns = 5):   # default budget
        self.max_turns = (max_turns)
    def reset(self, seed=None):
        # always the same target
        self.target = 3
        return ('guess a number from 1 to 5', {})
    def step(self, action):
        won = action.strip() == str(self.target)
        return ('right' if won else 'wrong'), (1.0 if won else 0.0), won, False, {}
    def solution(self):
        return '3'
"""


def env_source(i: int) -> str:
    return f"class Gen{i}Env:\n    def reset(self, seed=None):\n        return 'obs {i}', {{}}\n"


def play(win: float, regret: float = 0.0, *, n: int = 8, turns: float = 3.0) -> PlayStats:
    """Stats whose hint return is the no-hint return plus the regret."""
    return PlayStats(
        episodes_nohint=n,
        episodes_hint=n,
        win_rate_nohint=win,
        win_rate_hint=min(1.0, win + regret),
        regret=regret,
        mean_turns=turns,
        mean_return_nohint=win,
        mean_return_hint=min(1.0, win + regret),
    )


def add(archive: Archive, source: str, *, valid: bool = True, skill: str = "logic", **extra) -> int:
    reason = "ok" if valid else "timeout"
    fields = {"setting": "games", "iteration": 0, **extra}
    return archive.add(source, valid=valid, reason=reason, skill=skill, **fields).env_id


@pytest.fixture
def archive(tmp_path):
    with Archive(tmp_path / "archive.sqlite") as a:
        yield a


# -- duplicates and records -------------------------------------------------------------------------


def test_source_hash_ignores_formatting_and_comments_but_not_code():
    assert source_hash(GUESS) == source_hash(GUESS_REFORMATTED)
    assert source_hash(GUESS) != source_hash(GUESS.replace("self.target = 3", "self.target = 4"))
    assert source_hash(GUESS) != source_hash(GUESS.replace("Guess the number.", "Guess a number."))
    # Sources that do not parse compare by whitespace-collapsed text.
    assert source_hash("class (:\n  x") == source_hash("class   (:\n\n x  ")
    assert source_hash("class (:\n  x") != source_hash("class (:\n  y")


def test_add_stores_every_field_and_get_reads_it_back(archive):
    parent = add(archive, env_source(0), valid=False)
    result = archive.add(
        GUESS,
        valid=True,
        reason="ok",
        skill="math",
        setting="tool_use",
        iteration=4,
        hint="it is odd",
        message="",
        class_name="GuessEnv",
        document_id="doc-7",
        parents=[parent],
        origin="reference",
        metadata={"size": 12, "tags": ["a"]},
    )
    assert not result.duplicate
    record = archive.get(result.env_id)
    assert (record.source, record.hint, record.valid, record.reason) == (GUESS, "it is odd", True, "ok")
    assert (record.skill, record.setting, record.document_id) == ("math", "tool_use", "doc-7")
    assert record.iteration == 4
    assert (record.class_name, record.origin, record.parents) == ("GuessEnv", "reference", (parent,))
    assert record.metadata == {"size": 12, "tags": ["a"]} and record.times_proposed == 1
    assert record.source_hash == source_hash(GUESS) and record.created_at > 0
    assert archive.get(parent).reason == "timeout" and not archive.get(parent).valid
    assert archive.find(GUESS_REFORMATTED) == result.env_id and archive.find("x = 1") is None
    with pytest.raises(KeyError, match="no environment with id 99"):
        archive.get(99)


def test_duplicate_is_recognised_not_stored_twice_and_still_counted(archive):
    first = archive.add(GUESS, valid=True, reason="ok", skill="logic", setting="games", iteration=0)
    again = archive.add(
        GUESS_REFORMATTED, valid=True, reason="ok", skill="logic", setting="games", iteration=2, hint="new"
    )
    other = archive.add(env_source(1), valid=True, reason="ok", skill="logic", setting="games", iteration=2)
    assert again.duplicate and again.env_id == first.env_id
    assert not other.duplicate and other.env_id != first.env_id
    assert len(archive) == 2
    record = archive.get(first.env_id)
    assert record.times_proposed == 2 and record.hint == "" and record.source == GUESS  # first one kept
    per_iteration = {(c.group, c.reason): c.count for c in archive.reason_counts("iteration")}
    assert per_iteration == {(0, "ok"): 1, (2, "ok"): 2}
    unique = {(c.group, c.reason): c.count for c in archive.reason_counts("iteration", unique=True)}
    assert unique == {(0, "ok"): 1, (2, "ok"): 1}


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"setting": "chess"}, ValueError, "allowed: \\['games', 'tool_use'\\]"),
        ({"origin": "web"}, ValueError, "allowed: \\['designer', 'reference', 'import'\\]"),
        ({"reason": "timeout"}, ValueError, "does not match reason"),
        ({"valid": False}, ValueError, "does not match reason"),
        ({"iteration": -1}, ValueError, "iteration must be an integer >= 0"),
        ({"skill": ""}, ValueError, "skill must be a non-empty str"),
        ({"parents": [5]}, KeyError, "no environment with id 5"),
        ({"parents": [1, 1]}, ValueError, "parents must be distinct"),
        ({"metadata": {"x": math.nan}}, ValueError, "metadata must be JSON-serialisable"),
        ({"metadata": [1]}, ValueError, "metadata must be a dict"),
    ],
)
def test_add_rejects_bad_input_and_writes_nothing(archive, change, error, match):
    add(archive, env_source(0))
    fields = {"valid": True, "reason": "ok", "skill": "logic", "setting": "games", "iteration": 0, **change}
    with pytest.raises(error, match=match):
        archive.add(GUESS, **fields)
    assert len(archive) == 1 and archive.get(1).times_proposed == 1


def test_lineage_and_children(archive):
    a, b = add(archive, env_source(0)), add(archive, env_source(1))
    c = add(archive, env_source(2), parents=[b, a])
    d = add(archive, env_source(3), parents=[c, a])
    nodes = [(n.env_id, n.depth, n.parents) for n in archive.lineage(d)]
    assert nodes == [(d, 0, (c, a)), (c, 1, (b, a)), (a, 1, ()), (b, 2, ())]
    assert archive.children(a) == [c, d] and archive.children(d) == []
    # A duplicate proposal with other parents does not change the lineage.
    again = archive.add(env_source(2), valid=True, reason="ok", skill="x", setting="games", iteration=1)
    assert again.duplicate and archive.get(c).parents == (b, a)


# -- statistics -------------------------------------------------------------------------------------


def test_merge_stats_by_hand():
    old = PlayStats(4, 4, 0.5, 1.0, 0.5, 3.0, 0.5, 1.0)
    new = PlayStats(4, 0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0)
    merged = merge_stats(old, new)
    assert (merged.episodes_nohint, merged.episodes_hint) == (8, 4)
    assert merged.win_rate_nohint == pytest.approx(0.25) and merged.win_rate_hint == pytest.approx(1.0)
    assert merged.mean_return_nohint == pytest.approx(0.25) and merged.mean_return_hint == pytest.approx(1.0)
    assert merged.regret == pytest.approx(0.75)  # max(0, 1.0 - 0.25)
    assert merged.mean_turns == pytest.approx((3.0 * 8 + 5.0 * 4) / 12)
    # Without any hint episode the regret is unknown, stored as 0.
    assert merge_stats(new, new).regret == 0.0


def test_stats_one_row_per_iteration_replaced_by_default(archive):
    env = add(archive, GUESS)
    archive.record_stats(env, 1, play(0.2, 0.1))
    archive.record_stats(env, 1, play(0.4, 0.3))  # a resumed iteration records again: replaced
    archive.record_stats(env, 3, play(0.6, 0.0))
    history = archive.stats_history(env)
    assert [(h.iteration, h.stats.win_rate_nohint) for h in history] == [(1, 0.4), (3, 0.6)]
    assert history[0].stats.episodes_nohint == 8  # not 16
    assert archive.latest_stats()[env].iteration == 3
    merged = archive.record_stats(env, 3, play(0.2, 0.2), mode="merge")
    assert merged.episodes_nohint == 16 and merged.win_rate_nohint == pytest.approx(0.4)
    assert archive.latest_stats([env])[env].stats == merged


def test_record_stats_rejects_bad_input(archive):
    valid, invalid = add(archive, GUESS), add(archive, env_source(1), valid=False)
    with pytest.raises(ValueError, match="invalid \\(timeout\\); only valid ones are played"):
        archive.record_stats(invalid, 0, play(0.5))
    with pytest.raises(KeyError, match="no environment with id 42"):
        archive.record_stats(42, 0, play(0.5))
    with pytest.raises(ValueError, match="allowed: \\['replace', 'merge'\\]"):
        archive.record_stats(valid, 0, play(0.5), mode="add")
    with pytest.raises(ValueError, match="win_rate_nohint must lie in \\[0, 1\\]"):
        PlayStats(1, 1, 1.5, 0.0, 0.0, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="at least one episode"):
        PlayStats(0, 0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0)
    assert archive.latest_stats() == {}


def test_config_validation_says_what_is_allowed():
    with pytest.raises(ValueError, match="need 0 <= frontier_low < frontier_high <= 1"):
        ArchiveConfig(frontier_low=0.9, frontier_high=0.1)
    with pytest.raises(ValueError, match="weight_floor must lie in \\(0, 1\\]"):
        ArchiveConfig(weight_floor=0.0)
    with pytest.raises(ValueError, match="memory_positives must be an integer >= 0"):
        ArchiveConfig(memory_positives=-1)
    with pytest.raises(ValueError, match="allowed: \\['FULL', 'EXTRA', 'NORMAL'\\]"):
        ArchiveConfig(synchronous="OFF")


# -- training pool ----------------------------------------------------------------------------------


def test_frontier_weights_by_hand():
    assert frontier_closeness(0.5, 0.15, 0.85) == pytest.approx(1.0)
    assert frontier_closeness(0.325, 0.15, 0.85) == pytest.approx(0.5)
    assert frontier_closeness(0.15, 0.15, 0.85) == 0.0 and frontier_closeness(0.95, 0.15, 0.85) == 0.0
    config = ArchiveConfig()  # floor 0.05, mix 0.5
    assert pool_weight(0.5, 0.4, config) == pytest.approx(0.05 + 0.5 * 1.0 + 0.5 * 0.4)  # 0.75
    assert pool_weight(0.325, 0.0, config) == pytest.approx(0.05 + 0.5 * 0.5)  # 0.30
    assert pool_weight(0.95, 0.0, config) == pytest.approx(0.05)  # the floor
    assert pool_weight(0.95, 2.0, config) == pytest.approx(0.05 + 0.5 * 1.0)  # regret clipped to 1
    assert pool_weight(None, None, config) == 0.5  # never played


def test_training_pool_weights_probabilities_and_draws(archive):
    ids = [add(archive, env_source(i)) for i in range(4)]
    for env, (win, regret) in zip(ids, [(0.5, 0.4), (0.325, 0.0), (0.95, 0.0)], strict=False):
        archive.record_stats(env, 0, play(win, regret))
    invalid = add(archive, env_source(9), valid=False)
    weights = archive.pool_weights()
    assert set(weights) == set(ids)  # ids[3] was never played; the invalid one is absent
    expected = {ids[0]: 0.75, ids[1]: 0.30, ids[2]: 0.05, ids[3]: 0.5}
    assert weights == pytest.approx(expected)
    probs = dict(zip(weights, probabilities(list(weights.values())), strict=True))
    assert probs == pytest.approx({ids[0]: 0.46875, ids[1]: 0.1875, ids[2]: 0.03125, ids[3]: 0.3125})
    draws = archive.sample_pool(20_000, random.Random(0), replace=True)
    counts = Counter(draws)
    assert invalid not in counts and set(counts) == set(ids)
    for env in ids:
        assert counts[env] / len(draws) == pytest.approx(probs[env], abs=0.015)
    distinct = archive.sample_pool(10, 3)
    assert sorted(distinct) == ids  # without replacement: every valid env, once
    assert archive.sample_pool(2, 7) == archive.sample_pool(2, random.Random(7))
    assert archive.sample_pool(3, 1, skill="none") == []


def test_weighted_sample_is_deterministic_and_distinct():
    items = list(range(10))
    weights = [0.05] * 9 + [100.0]
    first = weighted_sample(items, weights, 4, random.Random(1))
    assert first == weighted_sample(items, weights, 4, random.Random(1))
    assert len(set(first)) == 4 and first[0] == 9  # the heavy item almost surely first
    assert sorted(weighted_sample(items, weights, 50, random.Random(2))) == items


# -- memory -----------------------------------------------------------------------------------------


@pytest.fixture
def known(archive):
    """An archive of known win rates: four on the frontier, one too hard, one too easy, and distractors."""
    band = {}
    for i, (win, regret) in enumerate([(0.5, 0.4), (0.3, 0.2), (0.7, 0.0), (0.15, 0.1)]):
        band[add(archive, env_source(i))] = (win, regret)
    too_hard, too_easy = add(archive, env_source(10)), add(archive, env_source(11))
    other_skill = add(archive, env_source(12), skill="spatial")
    unplayed, invalid = add(archive, env_source(13)), add(archive, env_source(14), valid=False)
    for env, (win, regret) in band.items():
        archive.record_stats(env, 0, play(0.95, 0.0))  # an old iteration: only the latest counts
        archive.record_stats(env, 1, play(win, regret))
    archive.record_stats(too_hard, 1, play(0.05, 0.0))
    archive.record_stats(too_easy, 1, play(0.9, 0.05))
    archive.record_stats(other_skill, 1, play(0.5, 0.5))
    return archive, set(band), too_hard, too_easy, {other_skill, unplayed, invalid}


def test_memory_positives_from_band_negative_from_outside(known):
    archive, band, too_hard, too_easy, never = known
    seen_positive, seen_negative = set(), set()
    for seed in range(40):
        memory = archive.sample_memory(random.Random(seed), skill="logic", setting="games")
        assert memory.complete and not memory.fallback and memory.message == "ok"
        positives, negatives = memory.positives, memory.negatives
        assert len(positives) == 2 and len(negatives) == 1
        assert {e.record.env_id for e in positives} <= band and all(e.kind == "frontier" for e in positives)
        negative = negatives[0]
        assert negative.record.env_id in (too_hard, too_easy)
        assert negative.kind == ("too_hard" if negative.record.env_id == too_hard else "too_easy")
        assert 0.15 <= positives[0].stats.win_rate_nohint <= 0.85
        assert not set(memory.parent_ids) & never
        seen_positive |= {e.record.env_id for e in positives}
        seen_negative.add(negative.record.env_id)
    assert seen_positive == band and seen_negative == {too_hard, too_easy}


def test_memory_is_deterministic_per_seed_and_configurable(known):
    archive, band, *_ = known
    draw = [archive.sample_memory(seed).parent_ids for seed in range(10)]
    assert draw == [archive.sample_memory(random.Random(seed)).parent_ids for seed in range(10)]
    assert len(set(draw)) > 1
    big = archive.sample_memory(0, skill="logic", positives=3, negatives=2)
    assert len(big.positives) == 3 and len(big.negatives) == 2
    # memory_size=1 keeps only the best in-band environment (win 0.5, regret 0.4).
    narrow = Archive(archive.path, ArchiveConfig(memory_size=1))
    memory = narrow.sample_memory(5, skill="logic", positives=2)
    assert [e.record.env_id for e in memory.positives] == [min(band)]
    assert not memory.complete and "found 1 of 2 positive" in memory.message
    narrow.close()


def test_memory_falls_back_to_references_then_to_fewer_examples(archive):
    empty = archive.sample_memory(0)
    assert empty.examples == () and not empty.complete and "found 0 of 2 positive" in empty.message
    easy = add(archive, env_source(0))
    archive.record_stats(easy, 0, play(1.0))
    refs = [add(archive, env_source(i), origin="reference") for i in (1, 2, 3)]
    memory = archive.sample_memory(random.Random(3), skill="logic")
    assert memory.fallback and not memory.complete
    assert "no played environment has a win rate on the frontier" in memory.message
    assert {e.kind for e in memory.positives} == {"reference"} and len(memory.positives) == 2
    assert {e.record.env_id for e in memory.positives} <= set(refs)
    assert [(e.record.env_id, e.kind) for e in memory.negatives] == [(easy, "too_easy")]
    none_left = archive.sample_memory(0, skill="math")
    assert none_left.examples == () and "0 reference environment" in none_left.message


# -- export and import ------------------------------------------------------------------------------


def test_export_import_round_trip_remaps_ids_and_keeps_statistics(tmp_path, archive):
    a = add(archive, GUESS, metadata={"size": 3}, document_id="d1", hint="odd")
    b = add(archive, env_source(1), parents=[a], iteration=1)
    bad = add(archive, env_source(2), valid=False, parents=[a, b], iteration=1)
    archive.record_stats(a, 0, play(0.5, 0.25))
    archive.record_stats(a, 1, play(0.6, 0.0))
    archive.record_stats(b, 1, play(0.3, 0.1))
    out = tmp_path / "pool.jsonl"
    assert archive.export_jsonl(out) == 3 and not (tmp_path / "pool.jsonl.tmp").exists()

    with Archive(tmp_path / "other.sqlite") as other:
        add(other, env_source(99))  # shift ids so the remapping shows
        result = other.import_jsonl(out)
        assert (result.added, result.duplicates, result.stats_added, result.skipped) == (3, 0, 3, ())
        new_a, new_b, new_bad = (result.id_map[i] for i in (a, b, bad))
        assert new_a != a and other.get(new_b).parents == (new_a,)
        assert other.get(new_bad).parents == (new_a, new_b)
        got = other.get(new_a)
        assert (got.source, got.hint, got.metadata, got.document_id) == (GUESS, "odd", {"size": 3}, "d1")
        assert got.origin == "import" and got.times_proposed == 0
        assert [s.stats for s in other.stats_history(new_a)] == [s.stats for s in archive.stats_history(a)]
        assert not other.get(new_bad).valid and other.get(new_bad).reason == "timeout"
        assert other.check_integrity() == []


def test_import_into_an_archive_that_holds_some_of_the_environments(tmp_path, archive):
    a = add(archive, GUESS)
    b = add(archive, env_source(1), parents=[a])
    archive.record_stats(a, 1, play(0.5, 0.2))
    archive.record_stats(a, 2, play(0.6, 0.1))
    out = tmp_path / "pool.jsonl"
    archive.export_jsonl(out)
    with Archive(tmp_path / "other.sqlite") as other:
        mine = add(other, GUESS_REFORMATTED, origin="reference")  # the same environment, reformatted
        other.record_stats(mine, 1, play(0.9, 0.0))
        result = other.import_jsonl(out, origin=None)
        assert (result.added, result.duplicates) == (1, 1) and result.id_map[a] == mine
        assert (result.stats_added, result.stats_ignored) == (1, 1)  # iteration 1 was already here
        assert [s.stats.win_rate_nohint for s in other.stats_history(mine)] == [0.9, 0.6]
        new_b = other.get(result.id_map[b])
        assert new_b.parents == (mine,) and new_b.origin == "designer"  # origin=None keeps the file's
        again = other.import_jsonl(out)  # importing twice adds nothing
        assert (again.added, again.duplicates, again.stats_added) == (0, 2, 0) and len(other) == 2


def test_export_of_valid_only_drops_links_to_missing_parents(tmp_path, archive):
    bad = add(archive, env_source(0), valid=False)
    good = add(archive, env_source(1), parents=[bad])
    out = tmp_path / "valid.jsonl"
    assert archive.export_jsonl(out, valid_only=True) == 1
    with Archive(tmp_path / "other.sqlite") as other:
        result = other.import_jsonl(out)
        assert result.dropped_parents == 1 and other.get(result.id_map[good]).parents == ()


def test_bad_jsonl_lines_raise_with_line_number_or_are_skipped(tmp_path, archive):
    add(archive, GUESS)
    archive.export_jsonl(tmp_path / "good.jsonl")
    good_line = (tmp_path / "good.jsonl").read_text().strip()
    other_line = json.dumps({**json.loads(good_line), "env_id": 5, "source": env_source(5)})
    lines = [
        good_line.encode(),
        b"{not json",
        json.dumps({"format": "spade-rl-env/1", "env_id": 2}).encode(),
        json.dumps({**json.loads(good_line), "format": "something/9"}).encode(),
        b"",
        b'"\xff\xfe"',
        json.dumps({**json.loads(good_line), "setting": "chess"}).encode(),
        other_line.encode(),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with Archive(tmp_path / "other.sqlite") as other:
        with pytest.raises(JsonlLineError, match=r"bad\.jsonl:2: not valid JSON") as caught:
            other.import_jsonl(path)
        assert caught.value.line == 2 and len(other) == 0  # nothing imported
        result = other.import_jsonl(path, on_error="skip")
        assert [n for n, _ in result.skipped] == [2, 3, 4, 6, 7]
        why = dict(result.skipped)
        assert "missing required field" in why[3] and "this version reads 'spade-rl-env/1'" in why[4]
        assert "utf-8" in why[6] and "allowed: ['games', 'tool_use']" in why[7]
        assert result.added == 2 and len(other) == 2
        with pytest.raises(ValueError, match="allowed: \\['raise', 'skip'\\]"):
            other.import_jsonl(path, on_error="ignore")


# -- files, versions, transactions ------------------------------------------------------------------


def test_archive_file_is_wal_and_checked_on_open(tmp_path, archive):
    raw = sqlite3.connect(archive.path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(ArchiveError, match=r"junk\.sqlite is not a spade-rl archive: SQLite cannot read it"):
        Archive(junk)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(ArchiveError, match=r"a SQLite database but not a spade-rl archive .*users"):
        Archive(foreign)
    with pytest.raises(ArchiveError, match="is a directory"):
        Archive(tmp_path)
    with pytest.raises(FileNotFoundError, match="no archive at"):
        Archive(tmp_path / "missing.sqlite", readonly=True)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        Archive(tmp_path / "nowhere" / "archive.sqlite")


def test_unknown_schema_version_is_refused(tmp_path):
    path = tmp_path / "archive.sqlite"
    Archive(path).close()
    for version, word in ((99, "newer"), (0, "older")):
        db = sqlite3.connect(path)
        db.execute(f"PRAGMA user_version = {version}")
        db.close()
        with pytest.raises(ArchiveError, match=f"schema version {version}, written by an? {word} spade-rl"):
            Archive(path)


def test_batch_commits_atomically_and_readers_see_only_commits(tmp_path, archive):
    reader = Archive(archive.path, readonly=True)
    with pytest.raises(RuntimeError), archive.batch():
        add(archive, env_source(0))
        add(archive, env_source(1))
        raise RuntimeError("designer crashed")
    assert len(archive) == 0
    with archive.batch():
        add(archive, env_source(2))
        with pytest.raises(KeyError):  # a failed add inside a batch undoes only itself
            add(archive, env_source(3), parents=[77])
        add(archive, env_source(4))
        assert len(reader) == 0  # not committed yet
    assert len(reader) == 2 and [reader.get(i).source for i in reader.ids()] == [env_source(2), env_source(4)]
    with pytest.raises(ArchiveError, match="opened read-only"):
        add(reader, env_source(5))
    reader.close()


def journal_mode(path) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        db.close()


def side_files(path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))


def test_a_closed_archive_is_one_file_that_reading_leaves_alone(tmp_path):
    path = tmp_path / "archive.sqlite"
    with Archive(path) as writer:
        add(writer, env_source(0))
        assert journal_mode(path) == "wal"  # readers elsewhere read while it writes
        assert side_files(path) == ["archive.sqlite-shm", "archive.sqlite-wal"]
    assert side_files(path) == [] and journal_mode(path) == "delete"
    with Archive(path, readonly=True) as reader:  # spade-rl envs list/show --archive
        assert [reader.get(i).source for i in reader.ids()] == [env_source(0)]
    assert side_files(path) == []
    with Archive(path) as writer:  # a resumed run writes in WAL mode again
        assert journal_mode(path) == "wal"
        add(writer, env_source(1))
    assert side_files(path) == [] and len(Archive(path, readonly=True)) == 2


def test_a_writer_closing_beside_an_open_reader_keeps_wal_and_loses_nothing(tmp_path):
    path = tmp_path / "archive.sqlite"
    writer = Archive(path)
    add(writer, env_source(0))
    reader = Archive(path, readonly=True)
    assert len(reader) == 1
    second = Archive(path)  # another writer (another process, or a resumed run beside an old handle)
    writer.close()  # SQLite refuses to leave WAL while others have the file open: no error, no wait
    assert journal_mode(path) == "wal"
    add(second, env_source(1))
    assert len(reader) == 2  # the reader still reads the live WAL
    reader.close()
    second.close()  # the last writer out checkpoints it
    assert side_files(path) == [] and journal_mode(path) == "delete"
    with Archive(path, readonly=True) as again:
        assert [again.get(i).source for i in again.ids()] == [env_source(0), env_source(1)]
        assert again.check_integrity() == []


# -- processes --------------------------------------------------------------------------------------

WRITER = """
import sys, time
from spade_rl.archive import Archive, PlayStats, source_hash

path, mode = sys.argv[1], sys.argv[2]

def source(i):
    return f"class Gen{i}Env:\\n    def reset(self, seed=None):\\n        return 'obs {i}', {{}}\\n"

def add(archive, i, iteration):
    kind = {"valid": True, "reason": "ok", "skill": "logic", "setting": "games"}
    return archive.add(source(i), iteration=iteration, **kind)

with Archive(path) as archive:
    for i in range(10):  # single adds, each its own transaction
        print("committed", add(archive, i, 0).env_id, source_hash(source(i)), flush=True)
    i, batch = 10, 0
    while True:
        done = []
        with archive.batch():
            for j in range(5):
                done.append((add(archive, i, batch).env_id, source_hash(source(i))))
                i += 1
                if mode == "pause" and batch == 5 and j == 2:
                    print("mid-batch", flush=True)
                    time.sleep(60)
        for env_id, digest in done:
            print("committed", env_id, digest, flush=True)
        batch += 1
"""


@pytest.mark.parametrize("mode", ["pause", "run"])
def test_kill_9_mid_batch_loses_nothing_committed(tmp_path, mode):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    path = tmp_path / "archive.sqlite"
    child = subprocess.Popen(
        [sys.executable, str(script), str(path), mode], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    committed: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            assert line, f"writer exited early with {child.poll()}"
            if line.startswith("committed"):
                _, env_id, digest = line.split()
                committed[int(env_id)] = digest
            if (mode == "pause" and line.startswith("mid-batch")) or (mode == "run" and len(committed) >= 60):
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    with Archive(path) as archive:
        assert archive.check_integrity() == []
        for env_id, digest in committed.items():
            record = archive.get(env_id)
            assert record.source_hash == digest == source_hash(record.source)
        # Batches are all or nothing: 10 single adds, then whole batches of 5.
        assert (len(archive) - 10) % 5 == 0 and len(archive) >= len(committed)
        if mode == "pause":
            assert len(archive) == len(committed) == 10 + 5 * 5
        add(archive, GUESS)  # the file is writable again
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()


SLOW_WRITER = """
import sys, time, pathlib
from spade_rl.archive import Archive, PlayStats

path, ready, n = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
while not ready.exists():
    time.sleep(0.005)
with Archive(path) as archive:
    for i in range(n):
        with archive.batch():  # an environment and its statistics become visible together
            env = archive.add(f"x = {i}", valid=True, reason="ok", skill="math", setting="games", iteration=i)
            archive.record_stats(env.env_id, i, PlayStats(4, 4, 0.5, 0.75, 0.25, 2.0, 0.5, 0.75))
        time.sleep(0.002)
"""

READER = """
import json, sqlite3, sys, time, pathlib
from spade_rl.archive import Archive

path, ready, n = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
counts, errors = [], []
archive = Archive(path, readonly=True)
raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
ready.touch()
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        counts.append(len(archive))
        weights = archive.pool_weights()
        if any(w == 0.5 for w in weights.values()):  # 0.5 is the weight of an unplayed environment
            errors.append("saw an environment without its statistics")
        orphans = raw.execute(
            "SELECT COUNT(*) FROM environments e "
            "WHERE NOT EXISTS (SELECT 1 FROM stats s WHERE s.env_id = e.id)"
        ).fetchone()[0]
        if orphans:
            errors.append(f"{orphans} environments without statistics")
    except Exception as exc:
        errors.append(repr(exc))
    if counts and counts[-1] == n:
        break
print(json.dumps({"counts": counts, "errors": errors}))
"""


def test_concurrent_reader_process_reads_while_writer_process_writes(tmp_path):
    path, ready, n = tmp_path / "archive.sqlite", tmp_path / "ready", 150
    Archive(path).close()
    (tmp_path / "writer.py").write_text(SLOW_WRITER)
    (tmp_path / "reader.py").write_text(READER)
    args = [str(path), str(ready), str(n)]
    python = sys.executable
    reader = subprocess.Popen([python, str(tmp_path / "reader.py"), *args], stdout=subprocess.PIPE, text=True)
    writer = subprocess.Popen([python, str(tmp_path / "writer.py"), *args])
    try:
        assert writer.wait(timeout=60) == 0
        out, _ = reader.communicate(timeout=60)
    finally:
        for proc in (reader, writer):
            if proc.poll() is None:
                proc.kill()
    result = json.loads(out)
    counts = result["counts"]
    assert result["errors"] == []
    assert counts[-1] == n and counts == sorted(counts)  # never went backwards
    assert any(0 < c < n for c in counts)  # it really read during the writes


def test_discard_after_forgets_an_interrupted_iteration(tmp_path):
    from spade_rl.archive import Archive, PlayStats

    stats = PlayStats(2, 2, 0.5, 1.0, 0.5, 3.0, 0.5, 1.0)
    with Archive(tmp_path / "a.sqlite") as archive:
        kept = archive.add(
            "class KeptEnv: pass", valid=True, reason="ok", skill="math", setting="games", iteration=1
        )
        archive.record_stats(kept.env_id, 1, stats)
        later = archive.add(
            "class LaterEnv: pass",
            valid=True,
            reason="ok",
            skill="math",
            setting="games",
            iteration=2,
            parents=(kept.env_id,),
        )
        archive.record_stats(kept.env_id, 2, stats)
        archive.record_stats(later.env_id, 2, stats)
        archive.add(
            "class KeptEnv: pass", valid=True, reason="ok", skill="math", setting="games", iteration=2
        )
        assert archive.discard_after(1) == 1
        assert archive.ids() == [kept.env_id]
        assert [row.iteration for row in archive.stats_history(kept.env_id)] == [1]
        assert archive.get(kept.env_id).times_proposed == 1
        assert archive.check_integrity() == []
        again = archive.add(
            "class LaterEnv: pass", valid=True, reason="ok", skill="math", setting="games", iteration=2
        )
        assert not again.duplicate


def test_memory_never_shows_an_environment_twice(tmp_path):
    from spade_rl.archive import Archive, PlayStats

    hard = PlayStats(4, 4, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0)
    with Archive(tmp_path / "a.sqlite") as archive:
        refs = [
            archive.add(
                f"class R{i}Env: pass",
                valid=True,
                reason="ok",
                skill="s",
                setting="games",
                iteration=0,
                origin="reference",
            ).env_id
            for i in range(2)
        ]
        for env_id in refs:
            archive.record_stats(env_id, 1, hard)  # every reference is too hard: negatives only
        for seed in range(20):
            sample = archive.sample_memory(seed, positives=2, negatives=1)
            assert len(sample.parent_ids) == len(set(sample.parent_ids))


def test_reference_memory_keeps_the_latest_window_top_regret_seeds_and_extreme_negatives():
    """memory_mode = "reference" (spade-rl/spade, spade/core/env_memory.py): the FIFO window, positives
    from the top max(3 n, 10) frontier environments by regret, negatives below 0.1 or above 0.9 only."""
    from spade_rl.archive.sampling import Candidate, pick_memory

    frontier = [Candidate(i, 0.5, float(i)) for i in range(1, 16)]  # regret = id
    easy, hard, mild = Candidate(16, 0.95, 0.0), Candidate(17, 0.05, 0.0), Candidate(18, 0.88, 0.0)
    unplayed = Candidate(19, None, None)
    config = ArchiveConfig(memory_mode="reference")
    seen_positive, seen_negative = set(), set()
    for seed in range(200):
        pick = pick_memory([*frontier, easy, hard, mild, unplayed], [100], random.Random(seed), config, 2, 1)
        assert len(pick.positives) == 2 and len(pick.negatives) == 1 and not pick.fallback and pick.complete
        seen_positive |= set(pick.positives)
        seen_negative |= set(pick.negatives)
    assert seen_positive == set(range(6, 16))  # the top 10 by regret, drawn uniformly
    assert seen_negative == {16, 17}  # 0.88 is off the frontier but not extreme: never a negative
    window = ArchiveConfig(memory_mode="reference", memory_window=5)
    pick = pick_memory([*frontier, easy, hard, mild], [100], random.Random(0), window, 2, 1)
    assert set(pick.positives) <= {14, 15} and set(pick.negatives) <= {16, 17}  # only ids 14-18 count
    empty = pick_memory([easy], [100], random.Random(0), config, 2, 1)
    assert empty.positives == () and not empty.fallback and "found 0 of 2 positive" in empty.message
    with pytest.raises(ValueError, match="memory_mode 'fifo' is not one of"):
        ArchiveConfig(memory_mode="fifo")
    with pytest.raises(ValueError, match="memory_negative_below and memory_negative_above"):
        ArchiveConfig(memory_negative_below=0.95, memory_negative_above=0.9)
