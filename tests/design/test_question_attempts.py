"""Several attempts at a question of the kit (design.question_attempts, issue 40): feedback after a wrong
answer, the episode's end, validation with the attempts training plays with (the trivial-policy search
tries other seeds' answers in turn), the designer's prompt, and one attempt exactly as before."""

from __future__ import annotations

import random

import pytest

from spade_rl.archive import Archive
from spade_rl.corpus import Corpus
from spade_rl.design import ValidationSettings, validate_source
from spade_rl.design.parse import parse_question_design
from spade_rl.designer.phase import DesignPhaseConfig, design_environments
from spade_rl.designer.prompts import ShownExample, edit_chat, question_designer_chat
from spade_rl.envs import kits
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.policy import FakePolicy, default_tokenizer
from spade_rl.sandbox import Sandbox, SandboxConfig

SUM = """\
class SumEnv(QuestionTask):
    def make(self, rng):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        return f"What is {a} + {b}?", a + b

    hint = "Add the hundreds, the tens and the ones."
"""
NAME = "class NameEnv(QuestionTask):\n    def make(self, rng):\n        return 'Say Ana.', 'Ana'\n"
SETTINGS = ValidationSettings(max_turns=4, call_timeout_s=2.0, seed=12345)


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0, load_timeout_s=4.0)) as p:
        yield p


def play(pool, code: str, kwargs: dict, actions: list[str], seed: int = 3) -> list:
    env = pool.open(kits.compose("question", code), kwargs).value
    try:
        transcript = [env.reset(seed=seed).value]
        for action in actions:
            transcript.append(env.step(action).value)
            if transcript[-1][2] or transcript[-1][3]:
                break
        return transcript
    finally:
        env.close()


def test_one_attempt_plays_exactly_as_before(pool):
    """The transcript of the one-shot kit, pinned: no word of attempts, one answer ends the episode."""
    start = play(pool, NAME, {"max_turns": 2}, [])[0]
    assert start == [
        "Say Ana.\n\nAnswer with only the answer inside \\boxed{}.",
        {"turn": 0, "status": "start"},
    ]
    wrong = play(pool, NAME, {"max_turns": 2}, ["\\boxed{Bo}", "\\boxed{Ana}"])
    assert wrong[1:] == [["Wrong answer.", 0.0, True, False, {"turn": 1, "status": "wrong"}]]
    wasted = play(pool, NAME, {"max_turns": 2}, ["none", "none"])
    assert wasted[1:] == [
        [
            "No answer in \\boxed{}. Answer inside \\boxed{}.",
            0.0,
            False,
            False,
            {"turn": 1, "status": "no_answer"},
        ],
        ["No answer in \\boxed{}. No turns left.", 0.0, False, True, {"turn": 2, "status": "no_answer"}],
    ]
    assert DesignPhaseConfig(form="question").question_kwargs == {}  # nothing recorded: as before


def test_a_wrong_answer_is_followed_by_another_try_until_none_is_left(pool):
    kwargs = {"max_turns": 8, "attempts": 3}
    first = play(pool, NAME, kwargs, [])[0][0]
    assert first.endswith("\nYou have 3 attempts: a wrong answer is followed by another try.")
    won = play(pool, NAME, kwargs, ["\\boxed{Bo}", "no box", "\\boxed{ana}"])
    assert [step[0] for step in won[1:]] == [
        "Wrong answer. Try again (2 attempts left).",
        "No answer in \\boxed{}. Answer inside \\boxed{}.",  # a wasted turn uses no attempt, as before
        "Correct.",
    ]
    assert won[-1][1:4] == [1.0, True, False] and won[1][4]["status"] == "wrong"
    lost = play(pool, NAME, kwargs, ["\\boxed{Bo}", "\\boxed{Cy}", "\\boxed{Di}", "\\boxed{Ana}"])
    assert len(lost) == 4 and lost[-1][:4] == ["Wrong answer. No attempts left.", 0.0, True, False]
    short = play(pool, NAME, {"max_turns": 2, "attempts": 3}, ["\\boxed{Bo}", "\\boxed{Cy}"])
    assert "You have 2 attempts" in short[0][0]  # the turn limit comes first
    assert short[1][0] == "Wrong answer. Try again (1 attempts left)."
    assert short[2][:4] == ["Wrong answer. Out of turns.", 0.0, False, True]


def test_direction_feedback_says_too_high_or_too_low_for_numbers(pool):
    kwargs = {"max_turns": 8, "attempts": 4, "feedback": "direction"}
    transcript = play(pool, SUM, kwargs, [])
    question = transcript[0][0]
    a, b = (int(x) for x in question.split("What is ")[1].split("?")[0].split(" + "))
    steps = play(pool, SUM, kwargs, ["\\boxed{1}", "\\boxed{5000}", "\\boxed{lots}", f"\\boxed{{{a + b}}}"])
    assert "(a wrong number is called too high or too low)." in steps[0][0]
    assert [s[0] for s in steps[1:]] == [
        "Wrong answer: too low. Try again (3 attempts left).",
        "Wrong answer: too high. Try again (2 attempts left).",
        "Wrong answer. Try again (1 attempts left).",  # not a number: no direction
        "Correct.",
    ]
    words = play(pool, NAME, kwargs, ["\\boxed{7}"])  # a word answer: no direction, said or asked
    assert (
        words[0][0].endswith("another try.") and words[1][0] == "Wrong answer. Try again (3 attempts left)."
    )


def test_a_question_with_two_attempts_is_valid_and_recorded_with_them(pool):
    settings = DesignPhaseConfig(
        form="question", question_attempts=2, validation=SETTINGS
    ).question_validation
    parsed = parse_question_design(f"```python\n{SUM}```")
    report = validate_source(pool, parsed.source, settings, hint=parsed.hint)
    assert report.valid, report
    assert report.env_kwargs == {"max_turns": 4, "attempts": 2, "feedback": "wrong"}
    assert "trivial_policies" in report.checks


@pytest.mark.parametrize("attempts", [2, 3])
def test_a_choice_of_three_is_refused_with_several_attempts(pool, attempts):
    parsed = parse_question_design(f"```python\n{kits.EXAMPLES['optimisation']}```")  # cheapest of three
    one = validate_source(pool, parsed.source, SETTINGS, hint=parsed.hint)
    assert one.valid, one  # one answer: a third of the seeds by chance, left to the designer's reward
    config = DesignPhaseConfig(form="question", question_attempts=attempts, validation=SETTINGS)
    report = validate_source(pool, parsed.source, config.question_validation, hint=parsed.hint)
    assert not report.valid and report.reason == "trivial_policy_wins", report
    assert "one a turn" in report.message and f"takes {attempts} answers" in report.message


def test_the_settings_are_refused_where_they_cannot_work():
    with pytest.raises(ValueError, match=r"question_attempts must be a whole number from 1"):
        DesignPhaseConfig(form="question", question_attempts=0)
    with pytest.raises(ValueError, match=r"form is 'module'"):
        DesignPhaseConfig(form="module", question_attempts=2)
    with pytest.raises(ValueError, match=r"question_feedback 'loud'; allowed: \['wrong', 'direction'\]"):
        DesignPhaseConfig(form="question", question_attempts=2, question_feedback="loud")
    with pytest.raises(ConfigError, match=r"question_attempts = 1 gives none"):
        load_config(None, ["design.question_feedback=direction"])
    config = load_config(None, ["design.question_attempts=3", "design.question_feedback=direction"])
    validation = config.design_phase.question_validation
    assert validation.env_kwargs == {"attempts": 3, "feedback": "direction"}
    assert validation.max_turns == config.rollout.max_turns


def test_the_prompts_say_how_many_attempts_only_when_there_are_several():
    one = question_designer_chat("", "math", kits.EXAMPLES["math"])[0]["content"]
    assert "attempts" not in one
    three = question_designer_chat("", "math", kits.EXAMPLES["math"], attempts=3, feedback="direction")
    assert "The agent gets 3 attempts at each question" in three[0]["content"]
    assert "too high or too low" in three[0]["content"]
    parent = ShownExample(kits.EXAMPLES["math"], "", "math", 0.5, None, True)
    edit = edit_chat(parent, "question", attempts=2)[0]["content"]
    assert "The agent gets 2 attempts" in edit and "too high" not in edit


@pytest.mark.slow
def test_the_design_phase_asks_validates_and_records_with_the_attempts(pool, tmp_path):
    tokenizer = default_tokenizer()
    bodies = [
        SUM.removeprefix("class ").strip() + "\n```",
        kits.EXAMPLES["optimisation"].removeprefix("class "),
    ]
    policy = FakePolicy([bodies[0], bodies[1] + "\n```"], tokenizer=tokenizer)
    config = DesignPhaseConfig(
        n=2, form="question", validation=SETTINGS, max_new_tokens=400, question_attempts=3
    )
    with Archive(tmp_path / "archive.sqlite") as archive:
        outcomes = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1
        )
        assert [o.reason for o in outcomes] == ["ok", "trivial_policy_wins"]
        record = archive.get(outcomes[0].env_id)
        assert record.env_kwargs == {"max_turns": 4, "attempts": 3, "feedback": "wrong"}
    prompt, _ = policy.calls[0]
    assert "The agent gets 3 attempts at each question" in tokenizer.decode(prompt[0])
