"""The trivial-policy search of the battery (design/trivial_search.py, design/answer_space.py): the answer
space by hand, and no sound environment refused because of it. The sound ones are the reference games,
the warm-up's synthetic designs, Reasoning Gym tasks and (slow) GEM and TextArena games; each is
validated at pinned seeds with the search at its defaults and with its new policies off
(``answer_space_constants=0``, ``shaped_guesses=0``): the verdicts must be the same. (A task one fixed
guess wins often, a "0" answer at a quarter of its questions, is refused or not by the trivial policies
depending on the seeds drawn, with or without the search: that is the check working, not the search.)"""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from spade_rl.design.answer_space import (
    FIXED,
    answer_key,
    constant_candidates,
    neighbours,
    shaped_guess,
    source_literals,
    undeserved,
    wrap_like,
)
from spade_rl.design.validate import ValidationSettings, validate_source
from spade_rl.designer.synthetic import FAMILIES, synthetic_design
from spade_rl.envs import external, kits, reference
from spade_rl.sandbox import Sandbox, SandboxConfig

PINNED = (0, 1)  # the seeds each sound environment is validated from, both ways
OFF = {"answer_space_constants": 0, "shaped_guesses": 0}
RG_TASKS = (
    "chain_sum", "basic_arithmetic", "leg_counting", "number_sorting", "word_sorting", "spell_backward",
    "family_relationships", "prime_factorization", "base_conversion", "caesar_cipher", "letter_jumble",
    "fraction_simplification", "count_bits", "group_anagrams", "time_intervals",
)  # fmt: skip


# --- the answer space, by hand ----------------------------------------------------------------------
def test_answer_key_spells_one_answer_one_way():
    assert answer_key("\\boxed{ 42.0 }") == answer_key("42") == answer_key("<answer>4.2e1</answer>") == "42"
    assert answer_key("\\boxed{Paris.}") == answer_key("paris") == "paris"
    assert answer_key("1,000") == "1000" and answer_key("(A)") == "a"
    assert answer_key("nan") == "nan" and answer_key("") == ""
    assert undeserved("-42", "\\boxed{56}") and not undeserved("56.0", "\\boxed{56}")


def test_shapes_of_answers():
    rng = random.Random(3)
    for answer, pattern in (
        ("42", r"[1-9]\d"),
        ("-7", r"-\d"),
        ("3.14", r"\d\.\d\d"),
        ("Yes", r"[A-Z][a-z]{2}"),
        ("ABC", r"[A-Z]{3}"),
        ("", r"[a-z]"),
    ):
        for _ in range(20):
            guess = shaped_guess(answer, rng)
            assert re.fullmatch(pattern, guess) and answer_key(guess) != answer_key(answer), (answer, guess)
    assert shaped_guess("5", rng, avoid={str(d) for d in range(10) if d != 8}) == "8"
    assert wrap_like("The answer is \\boxed{7}") == "\\boxed{%s}"
    assert wrap_like("<answer>7</answer>") == "<answer>%s</answer>" and wrap_like("go") == "%s"


def test_neighbours_and_literals():
    assert neighbours("42") == ["41", "43", "-42", "420", "4"]
    assert neighbours("-3.5") == ["3.5"]
    source = 'MAGIC = 42\nWORD = "\\\\boxed{-7}"\nDOC = "' + "x" * 30 + '"\nclass XEnv:\n    flag = True\n'
    assert source_literals(source) == ["42", "-42", "-7"]  # no long prose, no bool
    assert source_literals("class (:") == []


def test_constant_candidates_take_every_tier_and_stop_at_the_limit():
    answers, shown = ["56", "12", "yes"], ["What is seven times eight? hint words"]
    literals = ["42", "-42", "secret"]
    chosen = constant_candidates(answers, shown, literals, 96, random.Random(0))
    assert chosen[: len(FIXED)] == list(FIXED)
    for expected in ("55", "-56", "560", "56", "yes", "-42", "secret", "seven", "hint"):
        assert expected in chosen, expected
    assert len({answer_key(c) for c in chosen}) == len(chosen)
    few = constant_candidates(answers, shown, literals * 50, len(FIXED) + 6, random.Random(0))
    assert len(few) == len(FIXED) + 6 and len(set(few) & {"42", "-42", "secret"}) <= 2  # one per tier in turn


# --- sound environments: the search refuses none -----------------------------------------------------
@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=1.0, load_timeout_s=2.0)) as p:
        yield p


def same_verdict(pool, source: str, settings: ValidationSettings) -> None:
    for seed in PINNED:
        full = validate_source(pool, source, dataclasses.replace(settings, seed=seed))
        off = validate_source(pool, source, dataclasses.replace(settings, seed=seed, **OFF))
        assert (full.valid, full.reason) == (off.valid, off.reason), (seed, full.message, off.message)


@pytest.mark.parametrize("name", reference.NAMES)
def test_reference_games_stay_valid(pool, name):
    for seed in PINNED:
        report = validate_source(pool, reference.source(name), ValidationSettings(seed=seed))
        assert report.valid, report


@pytest.mark.parametrize("skill", sorted(FAMILIES))
def test_synthetic_designs_keep_their_verdict(pool, skill):
    rng = random.Random(skill)
    for _ in range(2):
        same_verdict(pool, kits.compose("question", synthetic_design(rng, skill)[0]), ValidationSettings())


@pytest.mark.parametrize("task", RG_TASKS)
def test_reasoning_gym_tasks_keep_their_verdict(pool, task):
    pytest.importorskip("reasoning_gym")
    from spade_rl.envs.external.reasoning_gym_source import reasoning_gym_env_source

    same_verdict(pool, reasoning_gym_env_source(task, items=20, seed=0), ValidationSettings(max_turns=4))


GAMES = [
    ("gem", external.gem_source, "game:GuessTheNumber-v0-hard"),
    ("gem", external.gem_source, "game:Mastermind-v0-easy"),
    ("gem", external.gem_source, "game:TowerofHanoi-v0-easy"),
    ("gem", external.gem_source, "game:Sudoku-v0-easy"),
    ("textarena", external.textarena_source, "GuessTheNumber-v0"),
    ("textarena", external.textarena_source, "Mastermind-v0"),
    ("textarena", external.textarena_source, "TowerOfHanoi-v0"),
    ("textarena", external.textarena_source, "FrozenLake-v0"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("package", "make", "game_id"), GAMES)
def test_gem_and_textarena_games_stay_valid(package, make, game_id):
    if not external.installed(package):
        pytest.skip(external.INSTALL[package])
    config = external.external_sandbox_config(SandboxConfig(pool_size=2), [package])
    settings = ValidationSettings(
        max_turns=25, extra_imports=external.needed_imports(package), total_timeout_s=90
    )
    with Sandbox(config) as games:
        for seed in PINNED:
            report = validate_source(games, make(game_id), dataclasses.replace(settings, seed=seed))
            assert report.valid, f"seed {seed}: {report.reason}: {report.message}"


# --- a policy over the cap at the first seeds plays again before a verdict ---------------------------
LUCKY = '''import random

RATE = %r


class LuckyZeroEnv:
    """What is the seed's remainder modulo 900, plus 100? A zero also wins at a share RATE of seeds."""

    def __init__(self, max_turns=4):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.seed = seed
        self.answer = str(seed %% 900 + 100)
        return f"Seed {seed}: what is its remainder modulo 900, plus 100? Answer in \\\\boxed{{}}.", {}

    def step(self, action):
        action, lucky = action.strip(), random.Random(self.seed * 7 + 1).random() < RATE
        won = action == "\\\\boxed{" + self.answer + "}" or (action == "\\\\boxed{0}" and lucky)
        return ("right" if won else "wrong"), float(won), True, False, {}

    def solution(self):
        return "\\\\boxed{" + self.answer + "}"
'''


def lucky_seeds(rate: float, seeds: list[int]) -> int:
    return sum(random.Random(seed * 7 + 1).random() < rate for seed in seeds)


def first_and_pooled(source: str, rate: float, seed: int, confirm: int) -> tuple[int, int]:
    from spade_rl.design.transcripts import derived_seeds

    first = lucky_seeds(rate, derived_seeds(source, "trivial", seed, 16))
    return first, first + lucky_seeds(rate, derived_seeds(source, "trivial_confirm", seed, confirm))


def test_a_policy_over_the_cap_by_luck_plays_more_seeds_before_a_verdict(pool):
    """A sound task that the answer 0 wins at 10% of seeds, validated from a seed whose first 16 trivial
    seeds hold 3 of those (over 15%): refused with no confirmation, valid once 48 more seeds bring the
    rate under the cap; one that 0 wins half the time is refused with the counts of both stages."""
    source = LUCKY % 0.1
    seed = next(
        s for s in range(5000) if (lambda f, p: f >= 3 and p <= 9)(*first_and_pooled(source, 0.1, s, 48))
    )
    settings = ValidationSettings(max_turns=4, seed=seed, answer_space_constants=0)
    alone = validate_source(pool, source, dataclasses.replace(settings, trivial_confirm_seeds=0))
    assert alone.reason == "trivial_policy_wins" and "'repeat \\boxed{0}'" in alone.message, alone
    assert "more" not in alone.message
    confirmed = validate_source(pool, source, settings)
    assert confirmed.valid, confirmed

    source = LUCKY % 0.5
    seed = next(s for s in range(5000) if first_and_pooled(source, 0.5, s, 48)[0] >= 3)
    first, pooled = first_and_pooled(source, 0.5, seed, 48)
    report = validate_source(pool, source, dataclasses.replace(settings, seed=seed))
    assert report.reason == "trivial_policy_wins", report
    assert f"wins {first} of 16 seeds, and {pooled} of 64 with 48 more seeds;" in report.message


# --- one answer right too often (design.validation.max_common_answer_win_rate) ---------------------------
# A design of experiments/results/cpu-curriculum (spade, seed 0: environment 9 of its archive) as the
# designer wrote it (its question shortened): the answer is 2 or 3 at random, and the question says
# nothing of which. The answer replay's half lets it through; its plays taught the agent to answer small
# numbers without reading.
COIN_FLIP = """class SequenceOfDoublingEnv(QuestionTask):
    def make(self, rng):
        start = rng.randint(10, 20)
        one = rng.randint(1, 1)
        one_times = rng.randint(2, 3)
        question = f"A sequence of {start} steps doubles every second. How many steps in half of the time?"
        return question, one * one_times

    hint = "Each second adds the same amount: multiply it by the seconds and add the start."
"""


def test_one_answer_right_half_the_time_is_refused(pool):
    """Without the common-answer cap the verdict is the luck of the seeds (the answer replay allows half:
    "3" wins 8 of 16 or fewer about 60% of the time); with it (on by default) it is refused at every
    seed, the answer replay's constant winning about half of 16 seeds and of 240 more, the message
    giving both; and at the experiments' 0.15 too."""
    source = kits.compose("question", COIN_FLIP)
    uncapped, capped = [], 0
    for seed in range(6):
        settings = ValidationSettings(max_turns=8, seed=seed)
        uncapped.append(validate_source(pool, source, dataclasses.replace(
            settings, max_common_answer_win_rate=None, refuse_undetermined_answers=False
        )).valid)  # fmt: skip
        for cap in (None, 0.15):
            strict = (
                settings if cap is None else dataclasses.replace(settings, max_common_answer_win_rate=cap)
            )
            report = validate_source(
                pool, source, dataclasses.replace(strict, refuse_undetermined_answers=False)
            )
            assert report.reason == "answer_replay_wins", report
            if cap is None and "one answer is right too often" in report.message:  # (else over the half)
                capped += 1
                assert re.search(
                    r"wins \d+ of 16 other seeds, and \d+ of 256 with 240 more seeds; at most 43%",
                    report.message,
                )
                assert "max_common_answer_win_rate" in report.message
    assert any(uncapped), "valid at some seeds without the cap: the hole the cap closes"
    assert capped


@pytest.mark.parametrize("name", reference.NAMES)
def test_reference_games_stay_valid_with_the_common_answer_cap(pool, name):
    for seed in PINNED:
        settings = ValidationSettings(seed=seed, max_common_answer_win_rate=0.15)
        report = validate_source(pool, reference.source(name), settings)
        assert report.valid, report


def test_the_common_answer_cap_is_checked():
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(ValueError, match="max_common_answer_win_rate must be None"):
            ValidationSettings(max_common_answer_win_rate=bad)
    assert ValidationSettings().max_common_answer_win_rate == 0.43  # on by default (its comment says why)


# --- the answer printed in the question (design.validation.max_copy_win_rate) ----------------------------
# Designs of experiments/results/cpu-curriculum (spade-no-designer-training, seed 1: environments 37 and 94
# of its archive) as the designer wrote them: the answer is the question's second word, or its first
# number. Its agent won them 90-100% of the time and the memory's frontier edits copied them forward.
COPIED = {
    "second word": """class DifficultyEnv(QuestionTask):
    def make(self, rng):
        a, b = rng.sample(['Difficulty', 'Mantis', 'Pink', 'Gold', 'Gold'], 2)
        question = f"The {a} beats the {b}."
        return question, a

    hint = "Follow the chain of comparisons to the one that nothing beats."
""",
    "first number": """class ExponentialDistributionEnv(QuestionTask):
    def make(self, rng):
        items = rng.randint(10, 34)
        questions = rng.randint(10, 34)
        question = f"There are {items} items in {items} questions. How many questions?"
        return question, items

    hint = "Multiply the number of items by the number of questions."
""",
}
# Sound questions whose answer is printed in them too, but not at one place: one of two numbers (a copy
# policy wins about half), and one of five words in a random order.
TWO_WAY = """class LargerEnv(QuestionTask):
    def make(self, rng):
        a, b = rng.sample(range(10, 100), 2)
        return f"Which is larger, {a} or {b}? Answer with the number.", max(a, b)

    hint = "Compare the tens first."
"""
ODD_ONE = """class OddOneEnv(QuestionTask):
    def make(self, rng):
        fruits = rng.sample(["apple", "pear", "plum", "grape", "lemon", "mango"], 4)
        animal = rng.choice(["horse", "tiger", "camel", "zebra"])
        words = fruits + [animal]
        rng.shuffle(words)
        return "Which word is not a fruit: " + ", ".join(words) + "?", animal

    hint = "Four of them grow on plants."
"""
COPY_CAP = 0.75  # experiments/cpu-curriculum-levers.toml, arm all-copy-cap


@pytest.mark.parametrize("place", sorted(COPIED))
def test_an_answer_printed_at_one_place_is_refused(pool, place):
    """Without the copy cap the hole is open (the random answers draw one candidate of some twenty); with
    it (on by default) the design is refused at every validation seed, the message naming the place, the
    rate and the setting."""
    source = kits.compose("question", COPIED[place])
    defaults = []
    expected = {"second word": "word 2", "first number": "number 1"}[place]
    for seed in range(4):
        settings = ValidationSettings(max_turns=8, seed=seed)
        uncapped = dataclasses.replace(
            settings,
            max_copy_win_rate=None,
            max_common_answer_win_rate=None,
            refuse_undetermined_answers=False,
        )
        defaults.append(validate_source(pool, source, uncapped).valid)
        report = validate_source(pool, source, settings)
        assert report.reason == "trivial_policy_wins", report
        assert re.search(
            rf"the answer is printed in the task: answering the {expected} of the first observation, at "
            r"every seed, wins 16 of 16 seeds, and 64 of 64 with 48 more seeds; at most 75% may be won",
            report.message,
        ), report.message
        assert "max_copy_win_rate" in report.message
    assert all(defaults), "valid without the caps: the hole the cap closes"


@pytest.mark.parametrize("source", [TWO_WAY, ODD_ONE], ids=["two-way", "odd-one"])
def test_answers_printed_at_changing_places_stay_valid_with_the_copy_cap(pool, source):
    for seed in range(3):
        settings = ValidationSettings(max_turns=8, seed=seed, max_copy_win_rate=COPY_CAP)
        report = validate_source(pool, kits.compose("question", source), settings)
        assert report.valid, report


@pytest.mark.parametrize("name", reference.NAMES)
def test_reference_games_stay_valid_with_the_copy_cap(pool, name):
    for seed in PINNED:
        settings = ValidationSettings(seed=seed, max_copy_win_rate=COPY_CAP)
        report = validate_source(pool, reference.source(name), settings)
        assert report.valid, report


@pytest.mark.parametrize("skill", sorted(FAMILIES))
def test_synthetic_designs_keep_their_verdict_with_the_copy_cap(pool, skill):
    """The warm-up's synthetic designs keep their verdict with the copy cap. The logic family's answer
    (the tallest of a chain) was the first thing its question named ("The {x} is taller than the {y}.
    ..." -> x), its second word, and the cap refused it (the untrained designer of
    experiments/results/cpu-curriculum, spade-no-designer-training seed 1, wrote its copies, and its
    agent won them 90-100% of the time): its facts are now told in another order at every seed."""
    rng = random.Random(skill)
    for _ in range(2):
        source = kits.compose("question", synthetic_design(rng, skill)[0])
        for seed in PINNED:
            plain = validate_source(pool, source, ValidationSettings(seed=seed, max_copy_win_rate=None))
            capped = validate_source(pool, source, ValidationSettings(seed=seed, max_copy_win_rate=COPY_CAP))
            assert (plain.valid, plain.reason) == (capped.valid, capped.reason), (seed, capped.message)


def test_copy_places_are_the_first_numbers_and_words():
    from spade_rl.design.trivial_search import COPY_POSITIONS, copies

    found = copies("The Pink beats the Gold 3 times in 12 games.")
    assert found["word 1"] == "The" and found["word 2"] == "Pink" and found["word 5"] == "Gold"
    assert found["number 1"] == "3" and found["number 2"] == "12" and "number 3" not in found
    assert found["number 1 from the end"] == "12" and found["word 1 from the end"] == "games"
    many = copies(" ".join(f"w{k} x" for k in range(40)))
    assert (
        len([p for p in many if p.startswith("word ") and not p.endswith("from the end")]) == COPY_POSITIONS
    )
    numbers = copies(" ".join(f"w{k} {k}" for k in range(40)))
    assert (
        len([p for p in numbers if p.startswith("number ") and p.endswith("from the end")]) == COPY_POSITIONS
    )
    assert [p for p in many if p.startswith("word ") and p.endswith("from the end")] == [
        "word 1 from the end",
        "word 2 from the end",
    ]  # only the last two words: a repeating pattern holds its next word at a fixed distance back


def test_the_copy_cap_is_checked():
    for bad in (-0.1, 1.5, "most", True):
        with pytest.raises(ValueError, match="max_copy_win_rate must be None"):
            ValidationSettings(max_copy_win_rate=bad)
    assert ValidationSettings().max_copy_win_rate == 0.75  # on by default


# --- the answer drawn apart from the question (design.validation.refuse_undetermined_answers) -----------
# A design of experiments/results/cpu-curriculum (spade-caps seed 1: environment 79 of its archive) as the
# designer wrote it: the answer is drawn from the seed, not from what the question states. Any constant
# wins it 1 time in 9, under the common-answer cap; its agent came to answer 2 to every question.
DRAWN = """class TheoryPredictionEnv(QuestionTask):
    def make(self, rng):
        number = rng.randint(10, 20)
        numberOfPredictions = rng.randint(2, 10)
        question = f"There are {number} numbers each predicting. How many predictions per day?"
        return question, numberOfPredictions

    hint = "Divide the number of predictions by the number of predictions."
"""
# A sound question whose first observation repeats across seeds, its answer following from what it shows
# (the reference guessing game, the same at every seed but going on after a wrong guess, is another).
SMALL_SUM = """class SmallSumEnv(QuestionTask):
    def make(self, rng):
        a, b = rng.randint(1, 3), rng.randint(1, 3)
        return f"What is {a} + {b}?", a + b

    hint = "Count on from the larger number."
"""


def test_an_answer_drawn_apart_from_the_question_is_refused(pool):
    """Valid with the check off, with or without the caps (the hole they leave); with
    refuse_undetermined_answers (on by default) refused at every validation seed, the message naming two
    seeds, the observation they share and the setting."""
    source = kits.compose("question", DRAWN)
    for seed in range(3):
        settings = ValidationSettings(max_turns=8, seed=seed, refuse_undetermined_answers=False)
        caps = dataclasses.replace(settings, max_common_answer_win_rate=0.15, max_copy_win_rate=COPY_CAP)
        assert validate_source(pool, source, caps).valid
        report = validate_source(
            pool, source, dataclasses.replace(settings, refuse_undetermined_answers=True)
        )
        assert report.reason == "undetermined_answer", report
        assert re.search(
            r"seeds \d+ and \d+ show the same first observation .There are \d+ numbers each predicting",
            report.message,
        ), report.message
        assert "refuse_undetermined_answers" in report.message


@pytest.mark.parametrize("source", [SMALL_SUM, TWO_WAY, ODD_ONE], ids=["small-sum", "two-way", "odd-one"])
def test_questions_whose_answer_follows_from_them_stay_valid_when_undetermined_answers_are_refused(
    pool, source
):
    for seed in range(2):
        settings = ValidationSettings(max_turns=8, seed=seed, refuse_undetermined_answers=True)
        report = validate_source(pool, kits.compose("question", source), settings)
        assert report.valid, report


@pytest.mark.parametrize("name", reference.NAMES)
def test_reference_games_stay_valid_when_undetermined_answers_are_refused(pool, name):
    """Among them the guessing game, whose first observation is the same at every seed and whose secret
    differs: a wrong guess does not end it."""
    for seed in PINNED:
        report = validate_source(
            pool, reference.source(name), ValidationSettings(seed=seed, refuse_undetermined_answers=True)
        )
        assert report.valid, report


@pytest.mark.parametrize("skill", sorted(FAMILIES))
def test_synthetic_designs_keep_their_verdict_when_undetermined_answers_are_refused(pool, skill):
    rng = random.Random(skill)
    for _ in range(2):
        source = kits.compose("question", synthetic_design(rng, skill)[0])
        for seed in PINNED:
            plain = validate_source(pool, source, ValidationSettings(seed=seed))
            strict = validate_source(
                pool, source, ValidationSettings(seed=seed, refuse_undetermined_answers=True)
            )
            assert (plain.valid, plain.reason) == (strict.valid, strict.reason), (seed, strict.message)


def test_refuse_undetermined_answers_is_checked():
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="refuse_undetermined_answers must be true or false"):
            ValidationSettings(refuse_undetermined_answers=bad)
    assert ValidationSettings().refuse_undetermined_answers is True  # on by default
