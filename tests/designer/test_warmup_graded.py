"""The graded warm-up (issue 40): synthetic designs at three levels, measured with the base agent, kept as a
balanced mix by measured band; with a scripted policy, and end to end with a real tiny model."""

from __future__ import annotations

import json
import random

import pytest

from spade_rl.corpus import Corpus
from spade_rl.design.parse import parse_question_design
from spade_rl.designer.phase import DesignPhaseConfig
from spade_rl.designer.prompts import QUESTION_PREFIX
from spade_rl.designer.synthetic import LEVELS, synthetic_design
from spade_rl.designer.warmup import (
    Candidate,
    WarmupConfig,
    WarmupError,
    WarmupPlay,
    band_of,
    cache_key,
    draw_candidates,
    edit_example,
    graded_examples,
    measure_candidates,
    select_graded,
    warm_up,
)
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.policy import FakePolicy, default_tokenizer, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rollout import RolloutConfig
from spade_rl.sandbox import SandboxConfig

QUESTION = DesignPhaseConfig(form="question")
PLAY = WarmupPlay(
    SandboxConfig(pool_size=2, call_timeout_s=4.0, load_timeout_s=8.0),
    RolloutConfig(max_turns=1, max_new_tokens=8, max_context_tokens=1024),
)


def candidate(name: str, answer: str) -> Candidate:
    code = f"class {name}Env(QuestionTask):\n    def make(self, rng):\n"
    code += f"        return 'Say a number.', {answer}\n"
    return Candidate("math", "easy", "", "", code + "\n    hint = 'Say it.'\n", "Say it.")


def test_the_levels_grade_the_numbers():
    rng = random.Random(0)
    easy = synthetic_design(rng, "math", "", "easy")[0]
    hard = synthetic_design(rng, "math", "", "hard")[0]
    assert "rng.randint(1, 3)" in easy or "each = rng.randint(10, 10)" in easy or "rng.randint(1, 2)" in easy
    assert "rng.randint(100," in hard or "rng.randint(12," in hard or "rng.randint(200," in hard
    with pytest.raises(ValueError, match=r"level 'impossible'; allowed: \['easy', 'medium', 'hard'\]"):
        synthetic_design(rng, "math", "", "impossible")


def test_bands_and_the_balanced_selection():
    assert [band_of(w) for w in (0.0, 0.1, 0.15, 0.85, 0.9)] == [
        "never_won",
        "too_hard",
        "frontier",
        "frontier",
        "too_easy",
    ]
    assert select_graded([0, 0.5, 0.9, 0.1, 0.6, 0], 4) == [1, 3, 2, 4]
    # a band that runs out is skipped; never-won candidates only after all the others
    assert select_graded([0, 0.9, 0.95, 0, 1.0], 4) == [1, 2, 4, 0]
    assert select_graded([0.5, 0.5], 5) == [0, 1]
    assert select_graded([0.0, 0.0], 1) == [0]


def test_candidates_take_the_levels_in_turn_and_parse():
    candidates = draw_candidates(
        WarmupConfig(designs=3, candidates_per_design=2), QUESTION, Corpus.from_config()
    )
    assert [c.level for c in candidates] == [*LEVELS, *LEVELS]
    for c in candidates:
        assert parse_question_design(f"```python\n{c.code}```").ok


def test_measurement_plays_each_candidate_at_distinct_seeds_with_the_agent():
    policy = FakePolicy(lambda chat: "\\boxed{7}", tokenizer=default_tokenizer())
    candidates = [candidate("Seven", "7"), candidate("Coin", "rng.choice([7, 8])"), candidate("Nine", "9")]
    rates = measure_candidates(policy, candidates, 16, PLAY, seed=0)
    assert rates[0] == 1.0 and rates[2] == 0.0
    assert 0.15 <= rates[1] <= 0.85  # 16 distinct seeds of a coin (seeded: the same every time)
    assert select_graded(rates, 2) == [1, 0]


def test_graded_examples_show_another_kept_design_with_its_measured_label():
    candidates = [candidate("Seven", "7"), candidate("Coin", "rng.choice([7, 8])"), candidate("Nine", "9")]
    examples = graded_examples(WarmupConfig(designs=3), QUESTION, candidates, [1.0, 0.5, 0.0], [1, 0, 2])
    assert len(examples) == 3
    labelled = [chat[1]["content"] for chat, _ in examples if "the agent won it" in chat[1]["content"]]
    assert labelled  # seeded: some prompts show a kept candidate, labelled
    assert any(
        "(too easy: the agent won it 100% of the time)" in u or "at the frontier" in u for u in labelled
    )
    for _, answer in examples:
        assert parse_question_design(QUESTION_PREFIX + answer).ok


def test_measurement_needs_the_play_settings_and_settles_the_cache_key():
    with pytest.raises(WarmupError, match=r"measure_plays > 0 .*WarmupPlay"):
        warm_up(
            TransformersPolicy(*tiny_random_model(seed=0)),
            WarmupConfig(designs=2, measure_plays=2),
            QUESTION,
            Corpus.from_config(),
        )
    with pytest.raises(ConfigError, match=r"warmup.measure_plays must be a whole number >= 0, got -1"):
        load_config(None, ["warmup.measure_plays=-1"])
    with pytest.raises(ConfigError, match=r"warmup.candidates_per_design must be a whole number >= 1"):
        load_config(None, ["warmup.candidates_per_design=0"])
    policy = TransformersPolicy(*tiny_random_model(seed=0))
    corpus = Corpus.from_config().config
    measured = WarmupConfig(designs=2, measure_plays=2)
    other_rollout = PLAY._replace(
        rollout=RolloutConfig(max_turns=2, max_new_tokens=8, max_context_tokens=1024)
    )
    assert cache_key(policy, measured, QUESTION, corpus, PLAY) != cache_key(
        policy, measured, QUESTION, corpus, other_rollout
    )
    plain = WarmupConfig(designs=2)  # unmeasured: the rollout is not part of the key
    assert cache_key(policy, plain, QUESTION, corpus, PLAY) == cache_key(
        policy, plain, QUESTION, corpus, other_rollout
    )


@pytest.mark.slow
def test_a_graded_warm_up_end_to_end_with_a_tiny_model(tmp_path, monkeypatch):
    """Candidates played by a real tiny model through the real sandbox, a graded mix kept, trained and
    cached with what was measured."""
    model, tokenizer = tiny_random_model(seed=0)
    monkeypatch.setenv("SPADE_RL_CACHE", str(tmp_path / "cache"))
    config = WarmupConfig(designs=3, candidates_per_design=2, measure_plays=2, epochs=1, learning_rate=1e-3)
    stats = warm_up(TransformersPolicy(model, tokenizer), config, QUESTION, Corpus.from_config(), PLAY)
    assert stats["warmup/cached"] == 0.0 and stats["warmup/candidates"] == 6.0
    assert stats["warmup/designs"] == 3.0
    kept = sum(stats[f"warmup/kept_{b}"] for b in ("frontier", "too_hard", "too_easy", "never_won"))
    measured = sum(stats[f"warmup/measured_{b}"] for b in ("frontier", "too_hard", "too_easy", "never_won"))
    assert (kept, measured) == (3.0, 6.0)
    [folder] = (tmp_path / "cache" / "warmup").iterdir()
    rows = json.loads((folder / "designs.json").read_text())
    assert len(rows) == 6 and sum(r["kept"] for r in rows) == 3
    assert {r["level"] for r in rows} == set(LEVELS)
    assert all(r["win_rate"] in (0.0, 0.5, 1.0) for r in rows)  # two plays each
    again, _ = tiny_random_model(seed=0)
    cached = warm_up(TransformersPolicy(again, tokenizer), config, QUESTION, Corpus.from_config(), PLAY)
    assert (
        cached["warmup/cached"] == 1.0 and cached["warmup/kept_never_won"] == stats["warmup/kept_never_won"]
    )


def test_with_an_edit_share_the_warm_up_teaches_the_edit_prompt_one_level_over():
    config = WarmupConfig(designs=3, candidates_per_design=1)
    candidates = draw_candidates(config, QUESTION, Corpus.from_config())  # easy, medium, hard
    editing = DesignPhaseConfig(form="question", edit_share=1.0)
    rates = [
        0.9,
        0.25,
        0.5,
    ]  # easy won often: harder; medium won rarely: easier; hard won half: no level above
    examples = graded_examples(config, editing, candidates, rates, [0, 1, 2])
    users = [chat[1]["content"] for chat, _ in examples]
    assert "a little harder: it wins it often" in users[0] and "class " in users[0]
    assert "a little easier: it wins it rarely" in users[1]
    assert "edited version" not in users[2]  # hard and won half the time: the usual prompt
    first, second = (QUESTION_PREFIX + answer for _, answer in examples[:2])
    assert "HarderEnv(QuestionTask)" in first and "EasierEnv(QuestionTask)" in second
    assert parse_question_design(first).ok and parse_question_design(second).ok
    assert edit_example(candidates[0], 0.0, editing, random.Random(0)) is None  # never won: no edit
