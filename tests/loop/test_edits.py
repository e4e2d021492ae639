"""Edits of frontier entries (design.edit_share, issue 40): which proposals are asked to edit, what they are
shown, and what the archive records; with a scripted designer and the real sandbox."""

from __future__ import annotations

import random

import pytest

from fixture_envs import PARITY, designer_output
from spade_rl.archive import Archive, PlayStats
from spade_rl.corpus import Corpus
from spade_rl.design.validate import ValidationSettings
from spade_rl.designer.phase import DesignPhaseConfig, design_environments, frontier_entries
from spade_rl.envs import kits
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.policy import FakePolicy
from spade_rl.sandbox import Sandbox, SandboxConfig

CHANCE_GAMES = ValidationSettings(trivial_seeds=0)  # the parity game is won by chance (fixture_envs.py)
OTHER = PARITY.replace("ParityEnv", "OtherEnv")


def stats(win: float, episodes: int = 8) -> PlayStats:
    return PlayStats(episodes, episodes, win, min(1.0, win + 0.25), 0.25, 1.0, win, min(1.0, win + 0.25))


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2)) as p:
        yield p


@pytest.fixture()
def archive(tmp_path):
    with Archive(tmp_path / "archive.sqlite") as a:
        yield a


def add_parity(archive: Archive, win: float | None) -> int:
    env_id = archive.add(
        PARITY, valid=True, reason="ok", skill="logic", setting="games", iteration=0, hint="Count."
    ).env_id
    if win is not None:
        archive.record_stats(env_id, 1, stats(win))
    return env_id


def run_phase(archive, pool, config: DesignPhaseConfig, seed: int = 0):
    seen: list[str] = []
    policy = FakePolicy(lambda chat: (seen.append(chat[-1]["content"]), designer_output(OTHER))[1])
    designs = design_environments(policy, Corpus.from_config(), archive, pool, config, random.Random(seed), 2)
    return designs, seen


def test_every_proposal_edits_a_frontier_entry_when_the_share_is_one(archive, pool):
    parent = add_parity(archive, 0.75)
    config = DesignPhaseConfig(n=2, edit_share=1.0, validation=CHANCE_GAMES)
    designs, seen = run_phase(archive, pool, config)
    assert len(designs) == 2 and all(d.valid for d in designs)
    for design, user in zip(designs, seen, strict=True):
        assert design.proposal.parents == (parent,) and design.proposal.document_id is None
        assert design.skill == "logic"  # the parent's skill
        assert "(at the frontier: the agent won it 75% of the time; 100% with the hint)" in user
        assert "a little harder: it wins it often" in user and "class ParityEnv" in user
        assert "<document>" not in user
    record = archive.get(designs[0].env_id)
    assert record.parents == (parent,)
    assert record.metadata["prompt"] == "edit" and record.metadata["edit_of"] == parent
    assert record.metadata["edit_win_rate"] == 0.75


@pytest.mark.parametrize("win", [None, 0.0, 0.1, 0.9])
def test_without_a_frontier_entry_the_usual_prompt_is_asked_and_counted(archive, pool, win):
    add_parity(archive, win)
    designs, seen = run_phase(archive, pool, DesignPhaseConfig(n=1, edit_share=1.0, validation=CHANCE_GAMES))
    assert "edited version" not in seen[0] and "<document>" in seen[0]
    assert archive.get(designs[0].env_id).metadata["prompt"] == "edit_fallback"


def test_the_share_is_drawn_per_proposal_and_zero_asks_for_no_edit(archive, pool):
    add_parity(archive, 0.25)
    designs, seen = run_phase(archive, pool, DesignPhaseConfig(n=8, edit_share=0.5, validation=CHANCE_GAMES))
    edits = sum("edited version" in user for user in seen)
    assert 0 < edits < 8  # seeded: the same split every time
    assert all("a little easier: it wins it rarely" in u for u in seen if "edited version" in u)
    _, plain = run_phase(archive, pool, DesignPhaseConfig(n=4, validation=CHANCE_GAMES))
    assert not any("edited version" in user for user in plain)
    assert all(archive.get(d.env_id).metadata.get("prompt") is None for d in designs if d.env_id > 8)


def test_frontier_entries_leave_out_flagged_invalid_and_off_frontier_environments(archive):
    on = add_parity(archive, 0.5)
    other = archive.add(OTHER, valid=True, reason="ok", skill="math", setting="games", iteration=0).env_id
    archive.record_stats(other, 1, stats(0.5))
    off = archive.add(
        PARITY.replace("ParityEnv", "OffEnv"),
        valid=True,
        reason="ok",
        skill="math",
        setting="games",
        iteration=0,
    )
    archive.record_stats(off.env_id, 1, stats(0.0))
    bad = archive.add(
        "broken", valid=False, reason="syntax_error", skill="math", setting="games", iteration=0
    )
    assert [i for i, _ in frontier_entries(archive, "games", "module")] == [on, other]
    archive.flag(other, 1, "empty_action_won", "won by an empty action")
    [(env_id, entry)] = frontier_entries(archive, "games", "module")
    assert env_id == on and entry.win_rate == 0.5 and entry.label == "at the frontier"
    assert bad.env_id not in [i for i, _ in frontier_entries(archive, "games", "module")]
    assert frontier_entries(archive, "tool_use", "module") == []
    assert frontier_entries(archive, "games", "question") == []  # no question designs: nothing to edit


def test_in_the_question_form_an_entry_is_shown_as_its_class(archive):
    code = kits.EXAMPLES["math"]
    source = kits.compose("question", code)
    env_id = archive.add(source, valid=True, reason="ok", skill="math", setting="games", iteration=0).env_id
    archive.record_stats(env_id, 1, stats(0.5))
    [(found, entry)] = frontier_entries(archive, "games", "question")
    assert found == env_id and entry.source.strip() == kits.design_part(source, "question").strip()
    assert "class QuestionTask" not in entry.source


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["design.edit_share=1.5"], r"design edit_share must be a number in \[0, 1\].*got 1.5"),
        (["design.edit_share=true"], r"design.edit_share"),
        (["design.edit_share=0.5", "design.memory=false"], r"design.memory = false hides"),
        (
            ["design.edit_share=0.5", "design.setting='tool_use'", "design.form='tool_kit'"],
            r"edits in the forms \['module', 'question'\]; form is 'tool_kit'",
        ),
    ],
)
def test_bad_edit_settings_say_what_is_allowed(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
    assert load_config(None, ["design.edit_share=0.5"]).design.edit_share == 0.5


@pytest.mark.slow
def test_a_run_edits_what_its_agent_won_sometimes_end_to_end(tmp_path):
    """Two iterations with the tiny model as agent, the learnability reward and every proposal drawn for an
    edit: the first finds no frontier entry (nothing played yet) and asks as usual; iteration 1's play of
    one design is then set to a win rate on the frontier (the tiny random model wins the parity game at
    chance, rarely inside it), and iteration 2 edits that design, validates and plays the edits."""
    from fixture_envs import SMALL, scripted_roles
    from spade_rl.loop.run import SelfPlay
    from spade_rl.policy import tiny_random_model

    model, tokenizer = tiny_random_model(seed=0)
    roles = scripted_roles(model, tokenizer, [])
    asked: list[str] = []
    sources = iter(PARITY.replace("ParityEnv", f"Parity{i}Env") for i in range(100))
    roles["designer_policy"] = FakePolicy(
        lambda chat: (asked.append(chat[-1]["content"]), designer_output(next(sources)))[1],
        tokenizer=tokenizer,
    )
    overrides = [*SMALL, "pool.reference=[]", "design.edit_share=1.0", "rewards.mode='learnability'"]
    with SelfPlay(load_config(None, overrides), tmp_path / "run", **roles) as run:
        iterations = run.iterations()
        first = next(iterations)
        [parent, *_] = run.archive.ids(origin="designer", valid=True)
        run.archive.record_stats(parent, 1, stats(0.75))
        second = next(iterations)
        records = {i: run.archive.get(i) for i in run.archive.ids(origin="designer")}
        played = run.archive.latest_stats()
    assert "designer/reward_mean" in first and "designer/reward_mean" in second
    assert [r.metadata["prompt"] for r in records.values() if r.iteration == 1] == ["edit_fallback"] * 2
    edits = [r for r in records.values() if r.iteration == 2]
    assert len(edits) == 2 and all(r.metadata["prompt"] == "edit" for r in edits)
    assert all(r.metadata["edit_of"] == parent and r.parents == (parent,) and r.valid for r in edits)
    assert all(played[r.env_id].iteration == 2 for r in edits)  # the edits were played
    assert sum("a little harder: it wins it often" in user for user in asked) == 2
