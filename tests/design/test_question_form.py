"""The "question" design form: a QuestionTask subclass composed with its kit, parsed, validated in the
sandbox, and designed through the design phase with a forced opening and a stop at the end of the block."""

from __future__ import annotations

import random

import pytest

from spade_rl.archive import Archive
from spade_rl.corpus import Corpus
from spade_rl.design import ValidationSettings, validate_source
from spade_rl.design.parse import parse_question_design
from spade_rl.designer.phase import DesignPhaseConfig, design_environments
from spade_rl.designer.prompts import QUESTION_PREFIX, question_designer_chat
from spade_rl.envs import kits
from spade_rl.policy import FakePolicy, default_tokenizer
from spade_rl.sandbox import Sandbox, SandboxConfig

SETTINGS = ValidationSettings(max_turns=2, call_timeout_s=2.0)


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0, load_timeout_s=4.0)) as p:
        yield p


def answer(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


@pytest.mark.parametrize("skill", sorted(kits.EXAMPLES))
def test_every_built_in_example_is_a_valid_environment(pool, skill):
    parsed = parse_question_design(answer(kits.EXAMPLES[skill]))
    assert parsed.ok and parsed.hint, parsed
    report = validate_source(pool, parsed.source, SETTINGS, hint=parsed.hint)
    assert report.valid, report
    assert report.env_kwargs == {"max_turns": 2}
    assert kits.design_part(parsed.source) == kits.EXAMPLES[skill].strip()


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("class AEnv(QuestionTask):\n    def make(self, rng:\n", "syntax_error"),
        ("class AEnv:\n    def make(self, rng):\n        return 'q', 1\n    hint = 'h.'\n", "no_env_class"),
        (
            "class A(QuestionTask):\n    def make(self, rng):\n        return 'q', 1\n    hint = 'h.'\n",
            "no_env_class",
        ),
        ("class AEnv(QuestionTask):\n    def make(self, rng):\n        return 'q', 1\n", "missing_hint"),
        ("class AEnv(QuestionTask):\n    hint = 'One. Two. Three. Four.'\n", "hint_too_long"),
    ],
)
def test_parse_reasons(code, reason):
    assert parse_question_design(answer(code)).reason == reason


def test_an_unfinished_block_at_the_token_limit_is_truncated():
    assert parse_question_design("```python\nclass AEnv(QuestionTask):\n    def", truncated=True).reason == (
        "truncated"
    )
    assert parse_question_design("no code here").reason == "no_code_block"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        ("return 'What is 2 + 2?', '{4}'", "reset_raised"),  # braces cannot be boxed
        ("return '', 4", "reset_raised"),
        ("return 'What is 1 / 0?', 1 / 0", "reset_raised"),
        ("return 'Pick one', __import__('time').time_ns()", "nondeterministic"),
    ],
)
def test_broken_designs_fail_validation_with_their_reason(pool, make, reason):
    code = f"class BadEnv(QuestionTask):\n    def make(self, rng):\n        {make}\n\n    hint = 'Think.'\n"
    parsed = parse_question_design(answer(code))
    assert parsed.ok
    report = validate_source(pool, parsed.source, SETTINGS, hint=parsed.hint)
    assert not report.valid and report.reason == reason, report


def test_kit_judges_numbers_as_numbers_and_words_ignoring_case(pool):
    code = "class EchoEnv(QuestionTask):\n    def make(self, rng):\n        return 'Say Ana.', 'Ana'\n"
    opened = pool.open(kits.compose("question", code), {"max_turns": 2})
    env = opened.value
    try:
        env.reset(seed=0)
        assert env.step("\\boxed{ ana }").value[1:3] == [1.0, True]
        env.reset(seed=0)
        assert env.step("no box").value[1:4] == [0.0, False, False]  # a wasted turn
        assert env.step("still none").value[1:4] == [0.0, False, True]  # out of turns: truncated
    finally:
        env.close()
    number = "class NumEnv(QuestionTask):\n    def make(self, rng):\n        return 'Ten?', 10\n"
    env = pool.open(kits.compose("question", number)).value
    try:
        env.reset(seed=1)
        assert env.step("\\boxed{10.0}").value[1] == 1.0
    finally:
        env.close()


def test_prompt_shows_the_document_the_example_and_the_skill():
    chat = question_designer_chat("Bees visit flowers.", "pattern", kits.EXAMPLES["pattern"], title="bees")
    user = chat[1]["content"]
    assert "Bees visit flowers." in user and "(bees)" in user and "NextNumberEnv" in user
    assert "skill pattern" in user and "QuestionTask" in chat[0]["content"]
    assert "Bees" not in question_designer_chat("", "math", kits.EXAMPLES["math"])[1]["content"]


@pytest.mark.slow
def test_design_phase_forces_the_opening_and_stops_at_the_block(pool, tmp_path):
    """Through the token path: the policy continues the forced opening; the text it returns is the
    rest of the class, and a stop string ends the block."""
    tokenizer = default_tokenizer()
    body = kits.EXAMPLES["math"].removeprefix("class ").strip()
    policy = FakePolicy([body + "\n```\nAnd then some chatter.", "oops"], tokenizer=tokenizer)
    config = DesignPhaseConfig(n=2, form="question", validation=SETTINGS, max_new_tokens=400)
    with Archive(tmp_path / "archive.sqlite") as archive:
        outcomes = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1
        )
        assert [o.reason for o in outcomes] == ["ok", "syntax_error"]  # "class oops" does not parse
        record = archive.get(outcomes[0].env_id)
        assert record.valid and record.hint.startswith("Multiply") and record.env_kwargs == {"max_turns": 2}
        assert kits.design_part(record.source) == kits.EXAMPLES["math"].strip()
    prompt, settings = policy.calls[0]
    assert settings.stop == ("```",)
    assert tokenizer.decode(prompt[0]).endswith(QUESTION_PREFIX)
    assert outcomes[0].generation.text.startswith(QUESTION_PREFIX)


def test_question_form_is_refused_where_it_cannot_work():
    with pytest.raises(ValueError, match="tool use"):
        DesignPhaseConfig(form="question", setting="tool_use")
    with pytest.raises(ValueError, match="allowed"):
        DesignPhaseConfig(form="essay")
    with pytest.raises(ValueError, match="example designs"):
        DesignPhaseConfig(form="question", skills=("chess",))
