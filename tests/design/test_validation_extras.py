"""The reference's validation extras as design.validation options: the reset gate over seeds (in the battery,
through the real sandbox), the repair loop and the LLM validator (in the design phase, with a scripted
policy); each off by default."""

from __future__ import annotations

import random

import pytest

from fixture_envs import PARITY, designer_output
from spade_rl.archive import Archive
from spade_rl.configdata import ConfigError
from spade_rl.corpus import Corpus
from spade_rl.design import ValidationSettings, validate_source
from spade_rl.design.llm_validator import LLMValidatorSettings, Verdict, parse_verdict, validator_chat
from spade_rl.designer.phase import DesignPhaseConfig, design_environments
from spade_rl.envs import kits
from spade_rl.loop.config import load_config
from spade_rl.policy import FakePolicy
from spade_rl.sandbox import Sandbox, SandboxConfig

GAMES = ValidationSettings(max_turns=2, trivial_seeds=0, call_timeout_s=2.0)  # the parity game wins by chance

# The same instance whatever the seed: a question with a fixed answer.
FIXED = """
class FixedEnv:
    def __init__(self, max_turns=2):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "What is 6 times 7? Answer in \\\\boxed{}.", {}

    def step(self, action):
        self.turn += 1
        if "\\\\boxed{42}" in action:
            return "Correct.", 1.0, True, False, {}
        return "Wrong.", 0.0, False, self.turn >= self.max_turns, {}

    def solution(self):
        return ["\\\\boxed{42}"]
"""

# A stepped tool task whose second check reads a folder that exists only once the agent made it: it raises
# at the start of every seed (the reference's gate rejects that), and works in play (the kit counts a
# check that raises as not met).
RAISING_CHECK = kits.TOOL_EXAMPLES["files"].replace(
    "lambda: self.file in self.folders.get(folder, [])", "lambda: self.file in self.folders[folder]"
)


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0, load_timeout_s=4.0)) as p:
        yield p


# --- the reset gate -------------------------------------------------------------------------------------
def test_reset_gate_refuses_an_environment_that_ignores_its_seed(pool):
    assert validate_source(pool, FIXED, GAMES).valid  # the battery alone lets it through
    report = validate_source(pool, FIXED, ValidationSettings(**{**GAMES.__dict__, "reset_gate_seeds": 3}))
    assert (report.valid, report.reason) == (False, "same_instance_every_seed"), report
    assert "3 different seeds" in report.message


@pytest.mark.slow
def test_reset_gate_passes_environments_drawn_from_their_seed(pool):
    # Pinned: the parity game has two instances (even and odd seeds), so one draw in four of three fresh
    # gate seeds would rightly find one instance only.
    gate = ValidationSettings(**{**GAMES.__dict__, "reset_gate_seeds": 3, "seed": 0})
    report = validate_source(pool, PARITY, gate)
    assert report.valid and "reset_gate" in report.checks, report
    example = kits.compose("tool_use", kits.TOOL_EXAMPLES["files"])
    settings = ValidationSettings(max_turns=6, reset_gate_seeds=3)
    assert validate_source(pool, example, settings).valid


def test_reset_gate_refuses_a_step_check_that_raises_at_every_seed(pool):
    source = kits.compose("tool_use", RAISING_CHECK)
    assert validate_source(pool, source, ValidationSettings(max_turns=6)).valid
    report = validate_source(pool, source, ValidationSettings(max_turns=6, reset_gate_seeds=3))
    assert (report.valid, report.reason) == (False, "step_check_raises"), report
    assert "step [3] raises on the initial state at every one of 3 seeds" in report.message


def test_reset_gate_resets_each_seed_it_names(pool):
    # Raises for one seed in seven: the three seeds the battery plays from seed 0 (pinned) miss them (0,
    # and two drawn that are 5 modulo 7); 64 more seeds of the gate do not.
    flaky = FIXED.replace("        self.turn = 0\n", "        self.turn = 0\n        assert seed % 7 != 3\n")
    pinned = {**GAMES.__dict__, "seed": 0}
    assert validate_source(pool, flaky, ValidationSettings(**pinned)).valid
    report = validate_source(pool, flaky, ValidationSettings(**{**pinned, "reset_gate_seeds": 64}))
    assert (report.valid, report.reason) == (False, "reset_raised"), report


# --- the LLM validator: prompt and verdict ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("It works.\n\\boxed{yes}", True),
        ("\\boxed{ No }", False),
        ("First \\boxed{yes}, on second thought \\boxed{no}", False),  # the last verdict counts
        ("\\boxed{true}", True),
        ("I cannot tell.", None),
        ("\\boxed{maybe}", None),
        ("\\boxed{yes", True),  # cut off at the token limit after the word
    ],
)
def test_parse_verdict(text, accepted):
    assert parse_verdict(text).accepted is accepted


def test_no_verdict_counts_as_the_settings_say():
    assert Verdict(None, "").accepts(LLMValidatorSettings())  # the reference accepts
    assert not Verdict(None, "").accepts(LLMValidatorSettings(no_verdict="reject"))
    assert not Verdict(False, "").accepts(LLMValidatorSettings())


def test_validator_chat_per_setting():
    games = validator_chat("class XEnv: pass", "games")
    tools = validator_chat("class XEnv: pass", "tool_use")
    assert "class XEnv: pass" in games[1]["content"] and "\\boxed{yes}" in games[1]["content"]
    assert "fatal bug" in games[0]["content"] and "impossibility is fatal" in tools[0]["content"]
    long = validator_chat("x" * 500, "games", LLMValidatorSettings(max_source_chars=100))[1]["content"]
    assert "x" * 100 + "\n# [...]" in long and "x" * 101 not in long
    with pytest.raises(ValueError, match="allowed"):
        validator_chat("", "chess")


# --- the LLM validator and the repair loop in the design phase ---------------------------------------------
def scripted(designs: list[str], verdict: str = "\\boxed{yes}"):
    """A policy that answers designer chats from ``designs`` in turn and validator chats with ``verdict``."""
    answers = iter(designs)
    asked: list[list[dict]] = []

    def answer(chat):
        asked.append(chat)
        if "You review generated Python game" in chat[0]["content"]:
            return verdict
        return next(answers)

    return FakePolicy(answer), asked


def phase(tmp_path, pool, policy, **validation):
    config = DesignPhaseConfig(n=1, validation=ValidationSettings(**{**GAMES.__dict__, **validation}))
    with Archive(tmp_path / "archive.sqlite") as archive:
        designs = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1
        )
        records = [archive.get(env_id) for env_id in archive.ids()]
    return designs, records


def test_llm_validator_is_off_by_default(tmp_path, pool):
    policy, asked = scripted([designer_output(PARITY)])
    [design], _ = phase(tmp_path, pool, policy)
    assert design.valid and len(asked) == 1  # the designer only


def test_llm_validator_rejects_what_it_says_no_to(tmp_path, pool):
    policy, asked = scripted([designer_output(PARITY)], "The check can never be met. \\boxed{no}")
    [design], [record] = phase(tmp_path, pool, policy, llm_validator=LLMValidatorSettings(enabled=True))
    assert (design.valid, design.reason) == (False, "judge_rejected")
    assert "the LLM validator rejected it: The check can never be met." in design.report.message
    assert (record.valid, record.reason) == (False, "judge_rejected")
    assert record.metadata["llm_validator"].endswith("\\boxed{no}")
    assert "class ParityEnv" in asked[1][1]["content"]  # the validator read the design
    validator_settings = policy.calls[1][1]
    assert (validator_settings.temperature, validator_settings.max_new_tokens) == (0.3, 1024)


def test_llm_validator_accepts_what_it_says_yes_to(tmp_path, pool):
    policy, _ = scripted([designer_output(PARITY)], "\\boxed{yes}")
    [design], [record] = phase(tmp_path, pool, policy, llm_validator=LLMValidatorSettings(enabled=True))
    assert design.valid and design.report.checks[-1] == "llm_validator" and record.valid


@pytest.mark.parametrize(("no_verdict", "valid"), [("accept", True), ("reject", False)])
def test_llm_validator_without_a_verdict(tmp_path, pool, no_verdict, valid):
    policy, _ = scripted([designer_output(PARITY)], "Hmm.")
    settings = LLMValidatorSettings(enabled=True, no_verdict=no_verdict)
    [design], _ = phase(tmp_path, pool, policy, llm_validator=settings)
    assert design.valid is valid


def test_repair_loop_sends_the_failure_back_and_plays_the_repaired_design(tmp_path, pool):
    broken = designer_output(PARITY.replace("def step(self, action):", "def step(self, action:"))
    policy, asked = scripted([broken, designer_output(PARITY)])
    first, repaired = (designs := phase(tmp_path, pool, policy, repair_rounds=2))[0]
    records = designs[1]
    assert (first.valid, first.reason) == (False, "syntax_error") and first.generation.completion_token_ids
    assert repaired.valid and repaired.generation.completion_token_ids is None  # never trains
    assert repaired.generation.text == designer_output(PARITY)
    # The repair request holds the first answer and what failed, after the first chat.
    repair_chat = asked[1]
    assert repair_chat[: len(asked[0])] == asked[0] and repair_chat[-2]["content"] == broken
    assert repair_chat[-1]["content"].startswith("Your design failed validation: syntax_error: syntax error")
    assert [(r.valid, r.metadata.get("repair"), r.metadata.get("repair_of")) for r in records] == [
        (False, None, None),
        (True, 1, first.env_id),
    ]


def test_repair_loop_stops_after_its_rounds(tmp_path, pool):
    policy, asked = scripted([f"attempt {n}: no code" for n in range(5)])
    designs, records = phase(tmp_path, pool, policy, repair_rounds=2)
    assert [d.reason for d in designs] == ["no_code_block"]  # only the first: failed repairs never train
    assert len(asked) == 3 and len(records) == 3  # the first and two repairs, every try archived
    assert len(asked[2]) == len(asked[0]) + 4  # the conversation grows by an answer and a request a round


def test_repair_loop_is_off_by_default(tmp_path, pool):
    policy, asked = scripted(["no code"])
    designs, _ = phase(tmp_path, pool, policy)
    assert len(designs) == 1 and len(asked) == 1


# --- configuration --------------------------------------------------------------------------------------
def test_extras_are_run_configuration_keys():
    config = load_config(
        None,
        [
            "design.validation.reset_gate_seeds=3",
            "design.validation.repair_rounds=2",
            "design.validation.llm_validator.enabled=true",
            "design.validation.llm_validator.no_verdict='reject'",
        ],
    )
    validation = config.design_phase.validation
    assert (validation.reset_gate_seeds, validation.repair_rounds) == (3, 2)
    assert validation.llm_validator == LLMValidatorSettings(enabled=True, no_verdict="reject")
    defaults = load_config(None, []).design.validation
    assert (defaults.reset_gate_seeds, defaults.repair_rounds, defaults.llm_validator.enabled) == (
        0,
        0,
        False,
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("design.validation.repair_rounds=-1", "repair_rounds must be a whole number from 0"),
        ("design.validation.reset_gate_seeds=true", "reset_gate_seeds must be"),
        ("design.validation.llm_validator.no_verdict='maybe'", r"no_verdict 'maybe'; allowed: \['accept'"),
        ("design.validation.llm_validator.temperature=9.0", r"temperature must lie in \[0, 5\]"),
        (
            "design.validation.llm_validator.colour='red'",
            "unknown key design.validation.llm_validator.colour",
        ),
    ],
)
def test_bad_extras_are_refused_with_what_is_allowed(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_a_repaired_slot_is_not_retried(tmp_path, pool):
    broken = designer_output(PARITY.replace("def step(self, action):", "def step(self, action:"))
    policy, asked = scripted([broken, designer_output(PARITY)])
    validation = ValidationSettings(**{**GAMES.__dict__, "repair_rounds": 1})
    config = DesignPhaseConfig(n=1, invalid="retry", validation=validation)
    with Archive(tmp_path / "archive.sqlite") as archive:
        designs = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1
        )
    assert [d.valid for d in designs] == [False, True] and len(asked) == 2  # no retry: the repair is valid
