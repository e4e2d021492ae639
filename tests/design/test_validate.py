"""The validation battery: every reference environment is valid; each broken one gets its reason."""

from __future__ import annotations

import re

import pytest

from spade_rl.design import ValidationSettings, validate_source
from spade_rl.design.answers import common_answer
from spade_rl.design.transcripts import probed_instances
from spade_rl.envs import reference
from spade_rl.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=1.0, load_timeout_s=2.0)) as p:
        yield p


PINNED = ValidationSettings(seed=0)  # the statistical checks' verdicts replayed, not drawn anew

# The word to say depends on the seed: one answer at every seed would be refused (answer_replay_wins).
GOOD = """
class GoodEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
    def reset(self, seed=None):
        self.turn = 0
        self.word = ("go", "run", "sit", "hop", "fly", "dig")[(seed or 0) % 6]
        return "say leave", {}
    def step(self, action):
        self.turn += 1
        won = action.strip() == self.word
        out = self.turn >= self.max_turns and not won
        return ("won" if won else "no"), (1.0 if won else 0.0), won, out, {}
    def solution(self):
        return self.word
"""


def broken(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


def rigged_after(count: int) -> str:
    """GOOD, but every action wins from instance ``count + 1`` of an interpreter on (a class attribute
    counts them), as a worker stacks training's episodes."""
    counting = broken(
        "self.max_turns = max_turns",
        f"self.max_turns = max_turns\n        GoodEnv.made = getattr(GoodEnv, 'made', 0) + 1\n"
        f"        self.rigged = GoodEnv.made > {count}",
    )
    return counting.replace(
        "won = action.strip() == self.word", "won = self.rigged or action.strip() == self.word"
    )


@pytest.mark.parametrize("name", reference.NAMES)
def test_reference_environments_are_valid(pool, name):
    # From a pinned seed: validation draws its seeds anew each time, and guess's random answers win about
    # 5% of seeds, so a cap of 15% of 16 seeds refuses it in about 4% of validations
    report = validate_source(pool, reference.source(name), PINNED)
    assert report.valid, report
    assert report.reason == "ok"
    assert report.checks == [
        "static", "instantiates", "reset_types", "solution_types", "solution_wins",
        "malformed_actions", "terminates", "deterministic", "instances", "stacked_instances",
        "trivial_policies", "answer_replay",
    ]  # fmt: skip
    assert report.solution_turns >= 1 and set(report.timings) == set(report.checks)


CASES = {
    "syntax_error": "class GoodEnv(:\n",
    "no_env_class": "class Good:\n    pass\n",
    "multiple_env_classes": GOOD + "\nclass OtherEnv:\n    pass\n",
    "load_raised": "raise ImportError('nope')\n" + GOOD,
    "init_raised": broken("self.max_turns = max_turns", "self.max_turns = 1 / 0"),
    "reset_raised": broken('self.turn = 0', "raise KeyError('x')"),
    "reset_bad_type": broken('return "say leave", {}', 'return "say leave"'),
    "step_raised": broken("self.turn += 1", "self.turn += None"),
    "step_bad_type": broken('return ("won" if won else "no"),', "return 5,"),
    "reward_not_finite": broken("(1.0 if won else 0.0)", "float('nan')"),
    "reward_out_of_range": broken("(1.0 if won else 0.0)", "(2.0 if won else 0.0)"),
    "solution_bad_type": broken("return self.word", "return 42"),
    "solution_raised": broken("return self.word", "raise RuntimeError('no solution')"),
    "timeout": broken("self.turn += 1", "while True: pass"),
    "crashed": broken("self.turn += 1", "import os; os._exit(1)"),
    "disallowed_import": "import numpy\n" + GOOD,
    "solution_does_not_win": broken("return self.word", 'return "stop"'),
    "never_terminates": broken("self.turn >= self.max_turns and not won", "False"),
    "nondeterministic": broken(
        'return "say leave", {}',
        'import random\n        return f"say leave {random.random()}", {}',
    ),
    # "go" at two seeds in three: a constant "go" wins most episodes without reading anything
    "answer_replay_wins": broken('[(seed or 0) % 6]', '[(seed or 0) % 6 // 4]'),
    "instance_dependent": rigged_after(4),  # from the fifth instance of a worker on, every action wins
}  # fmt: skip


@pytest.mark.parametrize("reason", CASES)
def test_broken_environments_get_their_reason(pool, reason):
    # From a pinned seed: answer_replay_wins's "go" wins two seeds in three, which 16 drawn seeds miss
    # now and then
    report = validate_source(pool, CASES[reason], PINNED)
    assert not report.valid
    assert report.reason == reason, report
    assert report.message


NONDETERMINISTIC = {
    "wall clock": (
        'return "say leave", {}',
        'import time\n        return f"say leave at {time.time()}", {}',
    ),
    "hash order": (
        'return "say leave", {}',
        'return "say leave " + ",".join({"a", "b", "c", "d", "e", "f"}), {}',
    ),
    "object ids": (
        'return "say leave", {}',
        'return f"say leave {id(object()) % 1000}", {"k": id(self)}',
    ),
}


@pytest.mark.parametrize("name", NONDETERMINISTIC)
def test_nondeterminism_is_caught(pool, name):
    report = validate_source(pool, broken(*NONDETERMINISTIC[name]))
    assert (report.valid, report.reason) == (False, "nondeterministic"), report


def test_solution_that_ends_without_winning(pool):
    loses = broken("won = action.strip() == self.word", "won = False")
    report = validate_source(pool, loses)
    assert report.reason == "solution_does_not_win" and "did not end after 1 steps" in report.message


def test_hint_leak_and_judge(pool):
    boxed = broken("return self.word", 'return "\\\\boxed{" + self.word + "}"').replace(
        "action.strip() == self.word", "self.word in action"
    )
    assert validate_source(pool, boxed, hint="Try saying something short.").valid
    # Seed 0 (its word is "go") pinned: the battery draws its own first seed otherwise
    leaking = validate_source(pool, boxed, ValidationSettings(seed=0), hint="The answer is go.")
    assert (leaking.valid, leaking.reason) == (False, "hint_leaks_answer")
    settings = ValidationSettings(judge=lambda source, hint: (False, "too boring"))
    judged = validate_source(pool, GOOD, settings)
    assert (judged.reason, judged.message) == ("judge_rejected", "the judge rejected it: too boring")


def test_allowed_imports_are_configurable(pool):
    source = "import json\n" + GOOD
    assert validate_source(pool, source).valid
    only_math = ValidationSettings(allowed_imports=frozenset({"math"}))
    assert validate_source(pool, source, only_math).reason == "disallowed_import"
    relative = validate_source(pool, "from . import x\n" + GOOD)
    assert relative.reason == "disallowed_import" and "relative" in relative.message


def test_validation_budget(pool):
    slow = broken("self.turn += 1", "import time\n        time.sleep(0.05)\n        self.turn += 1")
    report = validate_source(pool, slow, ValidationSettings(total_timeout_s=0.1))
    assert report.reason == "validation_timeout"


def test_unserializable_step_value_is_a_type_error(pool):
    report = validate_source(pool, broken("{}\n    def solution", "{1, 2}\n    def solution"))
    assert (report.valid, report.reason) == (False, "step_bad_type")


def test_settings_pass_kwargs_and_range(pool):
    negative = broken("(1.0 if won else 0.0)", "(1.0 if won else -1.0)")
    assert validate_source(pool, negative).reason == "reward_out_of_range"
    assert validate_source(pool, negative, ValidationSettings(reward_range=(-1.0, 1.0))).valid
    strict = broken("def __init__(self, max_turns=3)", "def __init__(self, size, max_turns=3)")
    assert validate_source(pool, strict).reason == "init_raised"
    assert validate_source(pool, strict, ValidationSettings(env_kwargs={"size": 2})).valid
    # A constructor without max_turns is instantiated without it.
    fixed = broken(
        "def __init__(self, max_turns=3):\n        self.max_turns = max_turns",
        "def __init__(self):\n        self.max_turns = 3",
    )
    assert validate_source(pool, fixed).valid


def test_common_answer_is_the_most_frequent_final_answer():
    solutions = [["a", "\\boxed{No}"], ["\\boxed{yes}"], ["\\boxed{ no }"], ["x", "y", "\\boxed{NO}"]]
    assert common_answer(solutions) == ("\\boxed{No}", 3)  # answers compared ignoring case and spaces
    assert common_answer([["1"], ["2"]]) == ("1", 1)  # a tie: the first
    assert common_answer([]) == ("", 0)


def test_probed_instances_meet_any_counter_within_twice_its_count():
    assert probed_instances(3, 256) == [3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 255, 256]
    assert probed_instances(1, 2) == [1, 2]
    assert probed_instances(5, 4) == []
    for turn in range(3, 257):  # an environment rigged from instance `turn` on is played rigged soon
        assert min(n for n in probed_instances(3, 256) if n >= turn) < 2 * turn


def test_stacked_instances_follow_the_sandbox(pool):
    """A worker is filled to the sandbox's episodes_per_worker, or to stacked_instances when set; every
    other instance plays a probe with probability a half, so a counter rigged from the 41st is met soon
    after it."""
    counted = rigged_after(40)
    report = validate_source(pool, counted)
    assert report.reason == "instance_dependent", report
    assert 41 <= int(re.search(r"instance (\d+) made", report.message).group(1)) <= 64, report
    # Without the trivial-policy search, which plays as training plays and so fills workers too (another
    # source, so a worker of its own: the first validation's worker counted to 41 already)
    counted += "\n# a worker of its own\n"
    assert validate_source(pool, counted, ValidationSettings(stacked_instances=40, trivial_seeds=0)).valid
    played = validate_source(pool, counted, ValidationSettings(stacked_instances=40))
    assert played.reason == "malformed_action_wins" and "as training plays" in played.message, played
    with pytest.raises(ValueError, match="stacked_instances"):
        ValidationSettings(stacked_instances=-1)


def test_pool_survives_a_run_of_failures(pool):
    for source in CASES.values():
        validate_source(pool, source)
    assert validate_source(pool, GOOD).valid
    assert sum(1 for w in pool._workers if not w.dead) <= pool.config.max_workers
