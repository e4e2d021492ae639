"""Designer outputs of every verdict, through parsing, the battery, the archive and the CLI.

Each file in ``designs/`` is an environment a designer might write, with its expected reason on its
first line (``# expect: <reason>``). The hostile ones are the attack files of the sandbox suite.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spade_rl.archive import Archive
from spade_rl.corpus import Corpus
from spade_rl.design import ValidationSettings, validate_source
from spade_rl.designer.phase import DesignPhaseConfig, design_environments
from spade_rl.envs import reference
from spade_rl.loop.pool import seed_reference_environments
from spade_rl.policy import FakePolicy
from spade_rl.sandbox import Sandbox, SandboxConfig

HERE = Path(__file__).parent
DESIGNS = sorted((HERE / "designs").glob("*.py"))
# Attacks that pass validation on purpose (PASSES_VALIDATION: the play-time guard catches them) left out.
ATTACKS = sorted(
    p
    for p in (HERE.parent / "sandbox" / "attacks").glob("*.py")
    if "\nPASSES_VALIDATION = True" not in p.read_text(encoding="utf-8")
)
SETTINGS = ValidationSettings(call_timeout_s=1.0)


def expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path
    return first.removeprefix("# expect: ").strip()


def as_designer_output(source: str, hint: str = "Think before you act.") -> str:
    return f"Here is my environment.\n```python\n{source}```\n<hint>{hint}</hint>\n"


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=1.0, load_timeout_s=2.0)) as p:
        yield p


@pytest.mark.parametrize("path", DESIGNS, ids=[p.stem for p in DESIGNS])
def test_each_design_gets_its_reason(pool, path):
    report = validate_source(pool, path.read_text(), SETTINGS)
    assert report.reason == expected(path), report
    assert report.valid == (expected(path) == "ok")


@pytest.mark.skipif(not ATTACKS, reason="the attack files are not there")
@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_hostile_designs_are_invalid(pool, path):
    # an attack whose refusal is statistical names the seed the suite validates it from
    pinned = re.search(r"^VALIDATION_SEED = (\d+)", path.read_text(), re.MULTILINE)
    settings = dataclasses.replace(SETTINGS, seed=int(pinned.group(1)) if pinned else None)
    report = validate_source(pool, path.read_text(), settings)
    assert not report.valid and report.reason not in ("", "ok"), report


@pytest.mark.slow
def test_design_phase_records_every_verdict(pool, tmp_path):
    texts = [as_designer_output(p.read_text()) for p in DESIGNS] + ["I would rather not write code."]
    # FakePolicy without a tokenizer counts bytes as tokens: leave room for the longest design.
    config = DesignPhaseConfig(n=len(texts), validation=SETTINGS, max_new_tokens=8192)
    with Archive(tmp_path / "archive.sqlite") as archive:
        assert seed_reference_environments(archive, pool, SETTINGS) == len(reference.NAMES)
        assert seed_reference_environments(archive, pool, SETTINGS) == 0  # idempotent
        outcomes = design_environments(
            FakePolicy(texts), Corpus.from_config(), archive, pool, config, random.Random(0), iteration=1
        )
        reasons = [o.reason for o in outcomes]
        assert reasons == [expected(p) for p in DESIGNS] + ["no_code_block"]
        for outcome in outcomes:
            record = archive.get(outcome.env_id)
            assert (record.valid, record.reason, record.iteration) == (outcome.valid, outcome.reason, 1)
            assert record.document_id == outcome.document_id and record.origin == "designer"
            # No positives have stats yet: the memory falls back to the reference environments.
            refs = set(archive.ids(origin="reference"))
            assert record.parents and set(record.parents) <= refs
        valid = [o for o in outcomes if o.valid]
        assert len(valid) == 3 and all(archive.get(o.env_id).hint == "Think before you act." for o in valid)
        assert all(o.generation.text and o.chat[0]["role"] == "system" for o in outcomes)


def test_separate_hint_mode_asks_a_second_call(pool, tmp_path):
    source = (HERE / "designs" / "valid_multi_turn.py").read_text()
    answers = iter([f"```python\n{source}```", "<hint>Count how far you are from the target.</hint>"])
    policy = FakePolicy(lambda chat: next(answers))
    config = DesignPhaseConfig(n=1, hint_mode="separate", validation=SETTINGS, max_new_tokens=8192)
    with Archive(tmp_path / "a.sqlite") as archive:
        [outcome] = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(1), 1
        )
        assert outcome.valid and outcome.hint_chat is not None
        assert archive.get(outcome.env_id).hint == "Count how far you are from the target."
    assert len(policy.calls) == 2


def spade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spade_rl", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_cli_design_from_jsonl_then_list_show_export_import(tmp_path):
    outputs = tmp_path / "outputs.jsonl"
    picked = [
        HERE / "designs" / name for name in ("valid_single_turn.py", "nan_reward.py", "syntax_error.py")
    ]
    outputs.write_text(
        "".join(json.dumps({"text": as_designer_output(p.read_text())}) + "\n" for p in picked)
    )
    run = tmp_path / "run"
    done = spade("design", "--from-jsonl", str(outputs), "--n", "3", "--out", str(run), "--seed", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "valid: 1 of 3" in done.stdout

    listed = json.loads(spade("envs", "list", "--archive", str(run), "--json").stdout)
    designed = [row for row in listed if row["origin"] == "designer"]
    assert sorted(r["reason"] for r in designed) == ["ok", "reward_not_finite", "syntax_error"]
    valid_id = next(r["id"] for r in designed if r["valid"])
    shown = spade("envs", "show", str(valid_id), "--archive", str(run))
    assert (
        shown.returncode == 0 and "class SumEnv" in shown.stdout and "Think before you act." in shown.stdout
    )

    exported = tmp_path / "pool.jsonl"
    assert spade("envs", "export", str(exported), "--archive", str(run), "--valid-only").returncode == 0
    lines = exported.read_text().splitlines()
    assert len(lines) == len(reference.NAMES) + 1
    other = tmp_path / "other"
    imported = spade("envs", "import", str(exported), "--archive", str(other))
    assert imported.returncode == 0 and f"imported {len(lines)} new" in imported.stdout, imported.stderr
    again = spade("envs", "import", str(exported), "--archive", str(other))
    assert f"{len(lines)} duplicates" in again.stdout


def test_cli_design_bad_inputs(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": 1}\n')
    done = spade("design", "--from-jsonl", str(bad), "--n", "1", "--out", str(tmp_path / "r"))
    assert done.returncode == 2 and '"text" string field' in done.stderr
    few = tmp_path / "few.jsonl"
    few.write_text('"just one"\n')
    done = spade("design", "--from-jsonl", str(few), "--n", "2", "--out", str(tmp_path / "r"))
    assert done.returncode == 2 and "holds 1 designer outputs" in done.stderr
    done = spade(
        "design", "--from-jsonl", str(few), "--n", "1", "--out", str(tmp_path / "r"), "--setting", "x"
    )
    assert done.returncode == 2 and "games" in done.stderr
    missing = spade("envs", "list", "--archive", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no archive" in missing.stderr
