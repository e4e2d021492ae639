"""The graded warm-up with several attempts per question (design.question_attempts, issue 40): prompts
that state them, candidates that validation refuses left out, the others measured with the attempts the
loop plays, and a cache key of its own."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spade_rl.corpus import Corpus
from spade_rl.design.validate import ValidationSettings
from spade_rl.designer.phase import DesignPhaseConfig
from spade_rl.designer.warmup import (
    Candidate,
    WarmupConfig,
    WarmupPlay,
    cache_key,
    graded_examples,
    measure_candidates,
    playable_candidates,
    warm_up,
    warmup_examples,
)
from spade_rl.policy import FakePolicy, default_tokenizer, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rollout import RolloutConfig
from spade_rl.sandbox import SandboxConfig

ONE = DesignPhaseConfig(form="question")
THREE = DesignPhaseConfig(form="question", question_attempts=3)
PLAY = WarmupPlay(
    SandboxConfig(pool_size=2, call_timeout_s=4.0, load_timeout_s=8.0),
    RolloutConfig(max_turns=3, max_new_tokens=8, max_context_tokens=1024),
)


def candidate(name: str, answer: str, level: str = "easy") -> Candidate:
    code = f"class {name}Env(QuestionTask):\n    def make(self, rng):\n"
    code += f"        return 'Say a number.', {answer}\n"
    return Candidate("math", level, "", "", code + "\n    hint = 'Say it.'\n", "Say it.")


def test_the_measurement_plays_the_attempts_of_the_loop():
    """A policy that answers 7, then 8: a coin of the two is won every time with two attempts."""

    def answer(chat):
        return "\\boxed{8}" if "Wrong answer" in chat[-1]["content"] else "\\boxed{7}"  # a token prompt

    policy = FakePolicy(answer, tokenizer=default_tokenizer())
    coin = [candidate("Coin", "rng.choice([7, 8])")]
    once = measure_candidates(policy, coin, 16, PLAY, seed=0)
    twice = measure_candidates(
        policy,
        coin,
        16,
        PLAY,
        seed=0,
        kit_kwargs=DesignPhaseConfig(form="question", question_attempts=2).question_kwargs,
    )
    assert 0.15 <= once[0] <= 0.85 and twice == [1.0]


def test_the_prompts_state_the_attempts_and_the_key_holds_them():
    corpus = Corpus.from_config()
    config = WarmupConfig(designs=2)
    assert all("attempts" not in chat[0]["content"] for chat, _ in warmup_examples(config, ONE, corpus))
    stated = [chat[0]["content"] for chat, _ in warmup_examples(config, THREE, corpus)]
    assert all("The agent gets 3 attempts at each question" in system for system in stated)
    picked = [candidate("Seven", "7"), candidate("Nine", "9")]
    graded = graded_examples(WarmupConfig(designs=2), THREE, picked, [0.5, 0.5], [0, 1])
    assert all("3 attempts" in chat[0]["content"] for chat, _ in graded)
    policy = TransformersPolicy(*tiny_random_model(seed=0))
    measured = WarmupConfig(designs=2, measure_plays=2)
    keys = {
        cache_key(policy, measured, design, corpus.config, PLAY)
        for design in (
            ONE,
            THREE,
            DesignPhaseConfig(form="question", question_attempts=3, question_feedback="direction"),
        )
    }
    assert len(keys) == 3
    assert cache_key(policy, measured, ONE, corpus.config, PLAY) == cache_key(
        policy, measured, DesignPhaseConfig(form="question", question_attempts=1), corpus.config, PLAY
    )


def test_candidates_that_validation_refuses_with_the_attempts_are_left_out():
    """With three attempts a choice of three is refused (the known answers in turn win it); with one, these
    questions, which do not say their answer ('Say a number.'), are refused as undetermined (on by default:
    a wrong answer ends the episode, so two seeds' answers refute each other); with that check off, a
    choice of three is the designer's reward's."""
    wide = candidate("Wide", "rng.randint(100, 999)")
    three = candidate("Three", "rng.choice([7, 8, 9])")
    kept, refused = playable_candidates([wide, three], THREE, PLAY, seed=0)
    assert kept == [wide] and refused == {"trivial_policy_wins": 1}
    one = DesignPhaseConfig(form="question", question_attempts=1)
    kept, refused = playable_candidates([wide, three], one, PLAY, 0)
    assert kept == [] and refused == {"undetermined_answer": 2}
    loose = dataclasses.replace(one, validation=ValidationSettings(refuse_undetermined_answers=False))
    kept, refused = playable_candidates([wide, three], loose, PLAY, 0)
    assert kept == [wide, three] and refused == {}


@pytest.mark.slow
def test_a_graded_warm_up_with_attempts_end_to_end_with_a_tiny_model(tmp_path, monkeypatch):
    """Candidates validated and played with two attempts by a real tiny model through the real sandbox."""
    model, tokenizer = tiny_random_model(seed=0)
    monkeypatch.setenv("SPADE_RL_CACHE", str(tmp_path / "cache"))
    design = DesignPhaseConfig(form="question", question_attempts=2, question_feedback="direction")
    config = WarmupConfig(designs=2, candidates_per_design=3, measure_plays=2, epochs=1, learning_rate=1e-3)
    stats = warm_up(TransformersPolicy(model, tokenizer), config, design, Corpus.from_config(), PLAY)
    assert stats["warmup/cached"] == 0.0 and stats["warmup/designs"] == 2.0
    assert stats["warmup/candidates"] + stats["warmup/refused"] == 6.0
    [folder] = (tmp_path / "cache" / "warmup").iterdir()
    rows = json.loads((folder / "designs.json").read_text())
    assert len(rows) == stats["warmup/candidates"] and sum(r["kept"] for r in rows) == 2


def test_the_unmeasured_warm_up_teaches_only_what_validation_accepts():
    from spade_rl.designer.warmup import _examples

    examples, refused = _examples(WarmupConfig(designs=4), THREE, Corpus.from_config(), PLAY)
    assert len(examples) == 4 and refused  # seeded: some drawn designs refused, the draws went on
    assert set(refused) == {"trivial_policy_wins"}
    assert not any("OrderingEnv(QuestionTask)" in answer for _, answer in examples)  # a chain of 3 to 4 names
    unvalidated = warmup_examples(WarmupConfig(designs=4), THREE, Corpus.from_config())  # no sandbox given
    assert len(unvalidated) == 4
    assert warmup_examples(WarmupConfig(designs=4), ONE, Corpus.from_config(), PLAY) == warmup_examples(
        WarmupConfig(designs=4), ONE, Corpus.from_config()
    )  # one attempt: nothing validated, the examples of before
