"""`spade-rl envs list|show|validate`, run as a user runs them (a subprocess of the installed command).

`envs export` and `envs import` go through an archive that `spade-rl design` fills:
tests/design/test_designs.py."""

from __future__ import annotations

import json
import random

import pytest

from spade_rl.envs import heldout, reference


@pytest.mark.slow
def test_envs_validate_json_on_references_and_files(spade, tmp_path):
    broken = tmp_path / "broken_env.py"
    broken.write_text("class BrokenEnv(:\n")
    done = spade("envs", "validate", *reference.NAMES, str(broken), "--json")
    assert done.returncode == 1, done.stderr
    reports = {r["path"]: r for r in json.loads(done.stdout)}
    assert all(reports[name]["valid"] for name in reference.NAMES)
    assert (reports[str(broken)]["valid"], reports[str(broken)]["reason"]) == (False, "syntax_error")


def test_envs_validate_all_valid_exits_zero(spade):
    done = spade("envs", "validate", "guess")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "guess" in done.stdout


LEAKY = """
import random

class DigitEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
    def reset(self, seed=None):
        self.answer = str(random.Random(seed).randrange(100, 1000))
        self.turn = 0
        return "Guess my three-digit number, in \\\\boxed{}.", {}
    def step(self, action):
        self.turn += 1
        won = action == "\\\\boxed{" + self.answer + "}"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}
    def solution(self):
        return "\\\\boxed{" + self.answer + "}"
"""


def test_envs_validate_with_a_hint_checks_it_as_the_loop_does(spade, tmp_path):
    path = tmp_path / "digit_env.py"
    path.write_text(LEAKY)
    answer = str(random.Random(0).randrange(100, 1000))  # the answer at seed 0, which --seed 0 plays first
    fine = spade("envs", "validate", str(path), "--hint", "Start in the middle of the range.", "--json")
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "hint_no_leak" in json.loads(fine.stdout)[0]["checks"]
    leaky = spade("envs", "validate", str(path), "--hint", f"It is {answer}.", "--seed", "0", "--json")
    report = json.loads(leaky.stdout)[0]
    assert leaky.returncode == 1 and report["reason"] == "hint_leaks_answer", report
    assert report["seed"] == 0 and isinstance(json.loads(fine.stdout)[0]["seed"], int)
    long = spade("envs", "validate", str(path), "--hint", "word " * 150, "--json")
    assert long.returncode == 1 and json.loads(long.stdout)[0]["reason"] == "hint_too_long"
    empty = spade("envs", "validate", str(path), "--hint", "  ", "--json")
    assert empty.returncode == 1 and json.loads(empty.stdout)[0]["reason"] == "missing_hint"


def test_envs_validate_missing_file_is_a_clear_error(spade):
    done = spade("envs", "validate", "/nonexistent/env.py")
    assert done.returncode == 2
    assert "neither a file nor a named environment" in done.stderr
    assert "guess" in done.stderr  # the allowed names are listed


def test_envs_list_and_show(spade):
    listed = spade("envs", "list")
    assert listed.returncode == 0 and all(name in listed.stdout for name in reference.NAMES)
    shown = spade("envs", "show", "maze")
    assert shown.returncode == 0 and "class MazeEnv" in shown.stdout
    unknown = spade("envs", "show", "nope")
    assert unknown.returncode == 2 and "allowed names" in unknown.stderr


def test_the_held_out_families_are_listed_shown_and_validated_by_name(spade):
    """The families of spade_rl.envs.heldout (the primary yardstick) are named environments too: listed
    with their role, shown, validated; the pool's games and the held-out ones are told apart."""
    listed = spade("envs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    roles = {row["name"]: row["role"] for row in json.loads(listed.stdout)}
    assert {name: roles[name] for name in heldout.NAMES} == dict.fromkeys(heldout.NAMES, "held-out family")
    assert {roles[name] for name in reference.NAMES} == {"pool"}
    assert {roles[name] for name in reference.HELD_OUT} == {"held-out"}
    shown = spade("envs", "show", "tally")
    assert shown.returncode == 0 and shown.stdout.strip() == heldout.source("tally").strip()
    done = spade("envs", "validate", "sequence", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)[0]["valid"] is True
    unknown = spade("envs", "validate", "chess")
    assert unknown.returncode == 2 and "held-out families sequence" in unknown.stderr
