"""Baselines and ablations as configurations of the loop: each switch changes what the loop does.

Design-level switches (memory, grounding, the hint's author) are checked on ``design_environments``
with a scripted policy and the real sandbox; loop-level ones (fixed pool, frozen designer, no designer
training, the designer reward's mode) on one iteration of ``SelfPlay`` with the tiny model as agent
and scripted designer answers, as in test_selfplay.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_selfplay import HANGS, PARITY, SMALL, designer_output

from fixture_envs import scripted_roles
from spade_rl.archive import Archive
from spade_rl.corpus import Corpus
from spade_rl.design.validate import ValidationSettings
from spade_rl.designer.phase import DesignPhaseConfig, design_environments
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.loop.run import SelfPlay, frozen_copy
from spade_rl.policy import FakePolicy, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rewards import plateau
from spade_rl.sandbox import Sandbox, SandboxConfig

ONE = [*SMALL, "loop.iterations=1"]
CHANCE_GAMES = ValidationSettings(trivial_seeds=0)  # the parity game is won by chance (fixture_envs.py)
POOL_ONLY = [*ONE, "rollout.max_turns=1", "pool.reference=[]"]  # one try: the parity env is a coin flip


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2)) as p:
        yield p


@pytest.fixture()
def archive(tmp_path):
    with Archive(tmp_path / "archive.sqlite") as a:
        a.add(PARITY, valid=True, reason="ok", skill="math", setting="games", iteration=0, origin="reference")
        yield a


def parity_pool(tmp_path: Path) -> Path:
    """A JSONL pool holding the parity environment (which the tiny model sometimes wins)."""
    path = tmp_path / "pool.jsonl"
    with Archive(tmp_path / "export.sqlite") as source:
        source.add(
            PARITY, valid=True, reason="ok", skill="parity", setting="games", iteration=0, hint="Count."
        )
        source.export_jsonl(path)
    return path


def spy_updates(run: SelfPlay) -> list:
    seen: list = []
    update = run.learner.step
    run.learner.step = lambda samples: (seen.extend(samples), update(samples))[1]
    return seen


# --- design-level switches -------------------------------------------------------------------------------
@pytest.mark.parametrize(("memory", "grounding"), [(True, True), (False, True), (True, False)])
def test_memory_and_grounding_switches_shape_the_designer_prompt(archive, pool, memory, grounding):
    policy = FakePolicy(lambda chat: designer_output(PARITY.replace("ParityEnv", "OtherEnv")))
    config = DesignPhaseConfig(n=1, memory=memory, grounding=grounding, validation=CHANCE_GAMES)
    [outcome] = design_environments(policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1)
    user = policy.calls[0][0][0][1]["content"]
    assert ("Example 1 [" in user and "class ParityEnv" in user) == memory  # the archive's environment
    assert ("<document>" in user) == grounding
    assert (outcome.parents != ()) == memory
    assert (outcome.document_id is not None) == grounding
    assert archive.get(outcome.env_id).document_id == outcome.document_id
    assert outcome.valid


@pytest.mark.parametrize("mode", ["inline", "separate"])
def test_hint_written_by_the_designer_or_by_a_second_call(archive, pool, mode):
    def script(chat):
        if chat[0]["content"].startswith("You write short hints"):
            return "<hint>Count the characters of your answer.</hint>"
        code = f"```python\n{PARITY.replace('ParityEnv', 'HintedEnv')}```"
        return code + ("\n<hint>Mind the parity.</hint>" if mode == "inline" else "")

    policy = FakePolicy(script)
    config = DesignPhaseConfig(n=1, hint_mode=mode, validation=CHANCE_GAMES)
    [outcome] = design_environments(policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1)
    assert len(policy.calls) == (1 if mode == "inline" else 2)
    assert ("<hint>" in policy.calls[0][0][0][1]["content"]) == (mode == "inline")
    expected = "Mind the parity." if mode == "inline" else "Count the characters of your answer."
    assert archive.get(outcome.env_id).hint == expected
    assert (outcome.hint_generation is not None) == (mode == "separate")


def test_the_hint_call_samples_at_its_own_temperature(archive, pool):
    def script(chat):
        if chat[0]["content"].startswith("You write short hints"):
            return "<hint>Count the characters of your answer.</hint>"
        return f"```python\n{PARITY.replace('ParityEnv', 'WarmEnv')}```"

    policy = FakePolicy(script)
    config = DesignPhaseConfig(n=1, hint_mode="separate", hint_temperature=0.3, validation=CHANCE_GAMES)
    design_environments(policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1)
    (_, design_settings), (_, hint_settings) = policy.calls
    assert design_settings.temperature == 0.6 and hint_settings.temperature == 0.3
    with pytest.raises(ValueError, match="hint_temperature must be None"):
        DesignPhaseConfig(hint_temperature=-1.0)


def test_skill_rotation_proposes_for_a_few_skills_per_phase(archive, pool):
    """design.skills_per_phase = 2: each phase (regeneration window) draws 2 of the 6 game skills and
    proposes only for them; another phase may draw others."""
    policy = FakePolicy(lambda chat: "no code at all")  # invalid designs: only the skills matter here
    config = DesignPhaseConfig(n=8, skills_per_phase=2, validation=CHANCE_GAMES)
    per_phase = []
    for seed in range(4):
        outcomes = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(seed), 1
        )
        per_phase.append({o.skill for o in outcomes})
    assert all(1 <= len(skills) <= 2 for skills in per_phase)
    assert len(set().union(*per_phase)) > 2  # the phases rotate through more than two skills
    everything = design_environments(
        policy,
        Corpus.from_config(),
        archive,
        pool,
        DesignPhaseConfig(n=24, validation=CHANCE_GAMES),
        random.Random(0),
        1,
    )
    assert len({o.skill for o in everything}) > 2
    with pytest.raises(ValueError, match=r"skills_per_phase must be None \(every skill\) or 1 to 6"):
        DesignPhaseConfig(skills_per_phase=7)


# --- loop-level switches ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_fixed_pool_never_calls_the_designer(tmp_path):
    model, tokenizer = tiny_random_model(seed=0)
    policy = TransformersPolicy(model, tokenizer)
    overrides = [*POOL_ONLY, "designer.source='none'", f"pool.jsonl='{parity_pool(tmp_path)}'"]
    with SelfPlay(load_config(None, overrides), tmp_path / "run", policy=policy) as run:
        assert run.designer_policy is None
        seen = spy_updates(run)
        [metrics] = list(run.iterations())
        [imported] = run.archive.ids(origin="import")
        played = run.archive.latest_stats()
    assert metrics["designer/proposed"] == 0 and metrics["samples/designer"] == 0
    assert seen and {s.role for s in seen} == {"agent"}  # the agent trained on the pool
    assert set(played) == {imported} and played[imported].iteration == 1


@pytest.mark.slow
@pytest.mark.parametrize("train", [True, False])
def test_designer_training_switch(tmp_path, train):
    model, tokenizer = tiny_random_model(seed=0)
    roles = scripted_roles(model, tokenizer, [designer_output(PARITY), designer_output(HANGS)])
    overrides = [*ONE, f"designer.train={str(train).lower()}", "pool.reference=[]"]
    with SelfPlay(load_config(None, overrides), tmp_path / "run", **roles) as run:
        seen = spy_updates(run)
        [metrics] = list(run.iterations())
    assert metrics["designer/reasons"] == {"ok": 1, "timeout": 1}  # the designer was asked all the same
    designer_samples = [s for s in seen if s.role == "designer"]
    if train:
        assert designer_samples and metrics["samples/designer"] == 2
    else:
        assert designer_samples == [] and metrics["samples/designer"] == 0
        assert metrics["samples/designer_untrained"] == 2  # rewarded (a valid and a timed-out design), unused


@pytest.mark.slow
def test_frozen_designer_designs_and_is_never_trained(tmp_path):
    model, tokenizer = tiny_random_model(seed=0)
    policy = TransformersPolicy(model, tokenizer)
    designer = FakePolicy([designer_output(PARITY)] * 2, tokenizer=tokenizer)  # e.g. an endpoint
    # groups without reward spread kept: whether the coin-flip game gives a group spread depends on the
    # tiny model's samples (and so on the CPU's arithmetic); the agent's rows reach the update either way
    overrides = [*ONE, "designer.source='frozen'", "pool.reference=[]", "loop.drop_zero_signal_groups=false"]
    with SelfPlay(
        load_config(None, overrides), tmp_path / "run", policy=policy, designer_policy=designer
    ) as run:
        seen = spy_updates(run)
        [metrics] = list(run.iterations())
        origins = {run.archive.get(i).origin for i in run.archive.ids(valid=True)}
    assert len(designer.calls) == 1 and run.designer_policy is designer
    assert metrics["designer/proposed"] == 2 and origins == {"designer"}
    assert seen and all(s.role == "agent" for s in seen)


@pytest.mark.slow
def test_frozen_copy_keeps_the_starting_weights(tmp_path):
    model, tokenizer = tiny_random_model(seed=0)
    policy = TransformersPolicy(model, tokenizer)
    overrides = [
        *ONE,
        "designer.source='frozen'",
        "pool.reference=[]",
        f"pool.jsonl='{parity_pool(tmp_path)}'",
    ]
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with SelfPlay(load_config(None, overrides), tmp_path / "run", policy=policy) as run:
        frozen = run.designer_policy.model
        assert frozen is not model and not any(p.requires_grad for p in frozen.parameters())
        [metrics] = list(run.iterations())
    assert "train/loss" in metrics  # the agent was updated...
    assert any(not (start[k] == v).all() for k, v in model.state_dict().items())
    assert all((start[k] == v).all() for k, v in frozen.state_dict().items())  # ...the designer not


def test_frozen_copy_needs_an_in_process_model():
    with pytest.raises(ConfigError, match=r"\[designer.policy\]"):
        frozen_copy(FakePolicy(["x"]))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["regret", "plateau"])
def test_designer_reward_mode_reaches_the_designer(tmp_path, mode):
    model, tokenizer = tiny_random_model(seed=0)
    roles = scripted_roles(model, tokenizer, [designer_output(PARITY), designer_output(HANGS)])
    overrides = [*ONE, f"rewards.mode='{mode}'", "rewards.progress_bonus=0.0", "pool.reference=[]"]
    with SelfPlay(load_config(None, overrides), tmp_path / "run", **roles) as run:
        [metrics] = list(run.iterations())
        [valid] = run.archive.ids(valid=True, origin="designer")
        stats = run.archive.latest_stats([valid])[valid].stats
    expected = stats.regret if mode == "regret" else plateau(stats.win_rate_nohint)
    assert metrics["designer/reward_mean"] == pytest.approx((expected + -0.5) / 2)  # -0.5: the timeout


def test_switches_are_validated_before_anything_runs(tmp_path):
    cases = {
        "designer.source='human'": r"designer.source 'human'; allowed: \['policy', 'frozen', 'none'\]",
        "designer.train='no'": r"designer.train must be true or false",
        "design.memory=1": r"design.memory must be true or false",
        "design.grounding='off'": r"design.grounding must be true or false",
        "pool.reference=['chess']": r"unknown reference environment\(s\) \['chess'\]; allowed: \['guess'",
        "pool.jsonl='missing.jsonl'": r"pool.jsonl: no such file",
        "pool.reasoning_gym=['no_such_task']": r"unknown Reasoning Gym task\(s\) \['no_such_task'\]; known",
        "pool.reasoning_gym_items=0": r"reasoning_gym_items must be at least 1",
        "designer.policy.backend='openai'": r"designer.policy is only used with designer.source = 'frozen'",
        "designer.colour='red'": r"unknown key designer.colour; allowed keys of \[designer\]: policy, source",
        "rewards.mode='mixed'": r"designer reward mode 'mixed' is not one of \['blend', 'regret', 'plat",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, [override])
    with pytest.raises(ConfigError, match=r"\[pool\] adds nothing"):
        load_config(None, ["designer.source='none'", "pool.reference=[]"])
    # Without designer training an update of all groups at once needs no room for a designer group
    # (16 rows: 2 groups of 8).
    whole = ["loop.groups_per_step=0", "loop.envs_per_iteration=2"]
    assert load_config(None, ["designer.source='none'", *whole]).loop.envs_per_iteration == 2
    with pytest.raises(ConfigError, match="rows"):
        load_config(None, whole)


@pytest.mark.parametrize(("grounding", "tries"), [(False, 9), (True, 4)])
def test_invalid_designs_are_retried_as_the_reference_retries_them(archive, pool, grounding, tries):
    """design.invalid = "retry": a slot whose design fails is asked again, up to retries (8) times, or
    retries_grounded (3) with a document; every try is in the archive, and what still fails trains nothing."""
    policy = FakePolicy(lambda chat: "no code at all")
    config = DesignPhaseConfig(n=1, invalid="retry", grounding=grounding, validation=CHANCE_GAMES)
    designs = design_environments(policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1)
    assert len(designs) == tries and not any(d.valid for d in designs) and len(policy.calls) == tries
    assert len(archive.ids(valid=False, origin="designer")) >= 1  # recorded (the same text: one row)


def test_a_retried_slot_stops_at_its_first_valid_design(archive, pool):
    answers = iter(["no code at all", "still none", designer_output(PARITY.replace("ParityEnv", "ThirdEnv"))])
    policy = FakePolicy(lambda chat: next(answers))
    config = DesignPhaseConfig(n=1, invalid="retry", validation=CHANCE_GAMES)
    designs = design_environments(policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1)
    assert [d.valid for d in designs] == [False, False, True]
    assert archive.get(designs[-1].env_id).metadata["attempt"] == 2
    with pytest.raises(ValueError, match="design invalid 'drop'; allowed"):
        DesignPhaseConfig(invalid="drop")
