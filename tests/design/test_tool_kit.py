"""The "tool_kit" design form: a ToolUseTask subclass composed with the kit "tool_use", parsed, validated in
the real sandbox, played to a win with its own solution, and designed through the design phase; hostile
and broken subclasses fail with their reason."""

from __future__ import annotations

import json
import random

import pytest

from spade_rl.archive import Archive
from spade_rl.corpus import Corpus
from spade_rl.design import ValidationSettings, validate_source
from spade_rl.design.parse import parse_kit_design
from spade_rl.designer.phase import DesignPhaseConfig, design_environments
from spade_rl.designer.prompts import TOOL_KIT_PREFIX, TOOL_TASK_TYPES, tool_kit_designer_chat
from spade_rl.envs import kits
from spade_rl.policy import FakePolicy, default_tokenizer
from spade_rl.sandbox import Sandbox, SandboxConfig

SETTINGS = ValidationSettings(max_turns=6, call_timeout_s=2.0)

# A hand-written design: the cheapest flight between two cities, found by searching then pricing.
FLIGHTS = """
class CheapestFlightEnv(ToolUseBaseEnv):
    tools = {
        "search_flights": ("Flight ids between two cities.", {"origin": "string", "destination": "string"}),
        "get_price": ("The price of a flight in dollars.", {"flight_id": "string"}),
        "get_weather": ("Today's weather in a city.", {"city": "string"}),
    }
    hint = "Search first, then price every flight found and keep the lowest."

    def make(self, rng):
        self.origin, self.destination = rng.sample(["Oslo", "Lima", "Pune", "Kyiv"], 2)
        self.flights = {f"F{n}": rng.randint(90, 900) for n in rng.sample(range(100, 1000), 4)}
        cheapest = min(self.flights, key=self.flights.get)
        route = f"from {self.origin} to {self.destination}"
        return f"What is the price in dollars of the cheapest flight {route}?", self.flights[cheapest]

    def tool_search_flights(self, origin, destination):
        if (origin, destination) != (self.origin, self.destination):
            return []
        return sorted(self.flights)

    def tool_get_price(self, flight_id):
        return self.flights[flight_id]  # an unknown id raises: the kit answers with the error

    def tool_get_weather(self, city):
        return "sunny"

    def plan(self):
        search = ("search_flights", {"origin": self.origin, "destination": self.destination})
        return [search, [("get_price", {"flight_id": f}) for f in sorted(self.flights)]]
"""


def answer(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0, load_timeout_s=4.0)) as p:
        yield p


def composed(code: str) -> str:
    parsed = parse_kit_design(answer(code), "tool_use")
    assert parsed.ok, parsed
    return parsed.source


@pytest.mark.parametrize("skill", sorted(kits.TOOL_EXAMPLES))
def test_every_built_in_tool_example_is_a_valid_environment(pool, skill):
    parsed = parse_kit_design(answer(kits.TOOL_EXAMPLES[skill]), "tool_use")
    assert parsed.ok and parsed.hint, parsed
    report = validate_source(pool, parsed.source, SETTINGS, hint=parsed.hint)
    assert report.valid, report
    assert kits.design_part(parsed.source, "tool_use") == kits.TOOL_EXAMPLES[skill].strip()
    assert kits.design_part(parsed.source, "question") is None


def test_a_hand_written_subclass_validates_and_its_solution_wins_in_the_sandbox(pool):
    source = composed(FLIGHTS)
    report = validate_source(pool, source, SETTINGS, hint="Search first.")
    assert report.valid and report.solution_turns == 3, report  # search, price all four, answer
    env = pool.open(source, {"max_turns": 6}).value
    try:
        observation, info = env.reset(seed=5).value
        names = [tool["function"]["name"] for tool in info["tools"]]
        assert names == ["search_flights", "get_price", "get_weather"]
        assert json.dumps(info["tools"][1]) in observation and "Task: What is the price" in observation
        actions = env.solution().value
        assert actions[-1].startswith("<answer>") and actions[0].count("<tool_call>") == 1
        results = [env.step(action).value for action in actions]
        assert [r[1:4] for r in results] == [[0.0, False, False], [0.0, False, False], [1.0, True, False]]
        prices = [
            json.loads(line.split("</tool_response>")[0])["result"]
            for line in results[1][0].split("<tool_response>")[1:]
        ]
        assert actions[-1] == f"<answer>{min(prices)}</answer>"  # the plan's answer is the lowest price
    finally:
        env.close()


def test_the_kit_answers_bad_calls_with_errors_and_counts_turns(pool):
    env = pool.open(composed(FLIGHTS), {"max_turns": 3}).value
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, _ = env.step(
            '<tool_call>{"name": "get_price", "arguments": {"flight": "F1"}}</tool_call>'
            "<tool_call>not json</tool_call>"
            '<tool_call>{"name": "book", "arguments": {}}</tool_call>'
            "<tool_call><function=get_weather><parameter=city>Oslo</parameter></function></tool_call>"
        ).value
        responses = [
            json.loads(part.split("</tool_response>")[0]) for part in obs.split("<tool_response>")[1:]
        ]
        assert "missing argument 'flight_id'" in responses[0]["error"]
        assert "unexpected argument 'flight'" in responses[0]["error"]
        assert responses[1]["error"].startswith("invalid JSON")
        assert "unknown tool 'book'" in responses[2]["error"] and "search_flights" in responses[2]["error"]
        assert responses[3] == {"result": "sunny"}  # Qwen3's <function=...> form
        assert (reward, terminated, truncated) == (0.0, False, False)
        missing = env.step(
            '<tool_call>{"name": "get_price", "arguments": {"flight_id": "X"}}</tool_call>'
        ).value
        assert "get_price failed: KeyError" in missing[0]
        assert env.step("I am thinking.").value[1:4] == [0.0, False, True]  # the third turn: out of turns
        env.reset(seed=1)
        assert env.step("<answer>1</answer>").value[1:4] == [0.0, True, False]  # one answer (answer_attempts)
    finally:
        env.close()


def test_stepped_instructions_come_one_at_a_time(pool):
    env = pool.open(kits.compose("tool_use", kits.TOOL_EXAMPLES["files"]), {"max_turns": 8}).value
    try:
        observation, info = env.reset(seed=2).value
        assert (info["steps"], info["unevaluable_steps"]) == (3, [])
        assert "Instruction 1 of 3" in observation and "Instruction 2" not in observation
        early = env.step("<answer>done</answer>").value
        assert early[1:4] == [0.0, False, False] and "instruction 1 is still open" in early[0]
        actions = env.solution().value
        first = env.step(actions[0]).value
        assert "[Instruction 1 is done. Instruction 2 of 3: Create a folder named" in first[0]
        assert first[4]["step"] == 1
        for action in actions[1:-1]:
            env.step(action)
        assert env.step(actions[-1]).value[1:4] == [1.0, True, False]
    finally:
        env.close()


HOSTILE = {
    "parameter names differ": (
        FLIGHTS.replace("def tool_get_price(self, flight_id)", "def tool_get_price(self, flight)").replace(
            "self.flights[flight_id]", "self.flights[flight]"
        ),
        "reset_raised",
        "declares parameters ['flight_id'] but tool_get_price takes ['flight']",
    ),
    "a declared tool without its method": (
        FLIGHTS.replace("def tool_get_weather", "def weather"),
        "reset_raised",
        "no method tool_get_weather",
    ),
    "no tools": (
        FLIGHTS.replace("    tools = {", "    unused = {"),
        "reset_raised",
        "declares no tools",
    ),
    "reads a file outside": (
        FLIGHTS.replace(
            "        self.origin, self.destination",
            "        open('/etc/passwd').read()\n        self.origin, self.destination",
        ),
        "reset_raised",
        "",
    ),
    "a tool that never returns": (
        FLIGHTS.replace("        return self.flights[flight_id]", "        while True:\n            pass"),
        "timeout",
        "",
    ),
    "overrides step with a lie": (
        FLIGHTS + "\n    def step(self, action):\n        return 'won', 1.0, True, False, {}\n",
        "malformed_action_wins",
        "",
    ),
    "scoring that never accepts": (
        FLIGHTS + "\n    def check_answer(self, answer):\n        return answer == 'never'\n",
        "solution_does_not_win",
        "",
    ),
    "scoring that never accepts, by the reference's name": (
        FLIGHTS + "\n    def _check_answer(self, answer):\n        return False\n",
        "solution_does_not_win",
        "",
    ),
    "a step that can never be done": (
        kits.TOOL_EXAMPLES["files"].replace("lambda: folder in self.folders", "lambda: folder == 'x'"),
        "solution_does_not_win",
        "",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_and_broken_subclasses_fail_cleanly(pool, case):
    code, reason, message = HOSTILE[case]
    report = validate_source(pool, composed(code), SETTINGS, hint="Search first.")
    assert not report.valid and report.reason == reason, report
    assert message in report.message
    # The sandbox is still usable afterwards.
    assert validate_source(pool, composed(FLIGHTS), SETTINGS).valid


def test_a_plan_that_returns_garbage_is_a_solution_error(pool):
    code = FLIGHTS.replace(
        "        search = (", "        return [('search_flights', 'x')]\n        search = ("
    )
    report = validate_source(pool, composed(code), SETTINGS)
    assert not report.valid and report.reason == "solution_raised", report
    assert "plan() items are (tool name, {arguments})" in report.message


def test_parse_accepts_both_base_names_and_refuses_others():
    assert parse_kit_design(answer(FLIGHTS), "tool_use").ok
    assert parse_kit_design(answer(FLIGHTS.replace("(ToolUseBaseEnv)", "(ToolUseTask)")), "tool_use").ok
    plain = parse_kit_design(answer(FLIGHTS.replace("(ToolUseBaseEnv)", "")), "tool_use")
    assert plain.reason == "no_env_class" and "ToolUseTask or ToolUseBaseEnv" in plain.message
    assert parse_kit_design(answer(FLIGHTS), "question").reason == "no_env_class"


def test_prompt_shows_domain_task_type_and_example():
    chat = tool_kit_designer_chat("Trains run late.", "travel", FLIGHTS, "missing_value", title="rail")
    user = chat[1]["content"]
    assert "Trains run late." in user and "(rail)" in user and "CheapestFlightEnv" in user
    assert "flights and hotels" in user and TOOL_TASK_TYPES["missing_value"] in user
    assert "ToolUseTask" in chat[0]["content"] and "tool_<name>" in chat[0]["content"]
    assert "<document>" not in tool_kit_designer_chat("", "banking", FLIGHTS)[1]["content"]
    with pytest.raises(ValueError, match="allowed"):
        tool_kit_designer_chat("", "banking", FLIGHTS, "chat")


def test_design_phase_writes_tool_kit_designs(pool, tmp_path):
    tokenizer = default_tokenizer()
    body = FLIGHTS.strip().removeprefix("class ")
    policy = FakePolicy([body + "\n```\nDone.", "Nope"], tokenizer=tokenizer)
    config = DesignPhaseConfig(
        n=2, setting="tool_use", form="tool_kit", validation=SETTINGS, max_new_tokens=1500, skills=("travel",)
    )
    with Archive(tmp_path / "archive.sqlite") as archive:
        designs = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1
        )
        assert [d.reason for d in designs] == ["ok", "syntax_error"]  # "class Nope" does not parse
        record = archive.get(designs[0].env_id)
        assert record.valid and record.setting == "tool_use" and record.hint.startswith("Search first")
        assert kits.design_part(record.source, "tool_use") == FLIGHTS.strip()
    prompt, settings = policy.calls[0]
    assert settings.stop == ("```",) and tokenizer.decode(prompt[0]).endswith(TOOL_KIT_PREFIX)
    assert "CheapestFlightEnv" not in tokenizer.decode(prompt[0])  # shown the built-in example instead


def test_tool_kit_form_is_refused_where_it_cannot_work():
    with pytest.raises(ValueError, match="setting = 'tool_use'"):
        DesignPhaseConfig(form="tool_kit")
    assert DesignPhaseConfig(form="tool_kit", setting="tool_use").skill_list[0] == "retail"


@pytest.mark.slow
def test_tiny_model_designs_in_the_tool_kit_form_with_every_extra_and_plays_a_kit_env(tokenizer, tmp_path):
    """End to end with a real (tiny, random) model and the real sandbox: the design phase in the tool_kit
    form with the reset gate, one repair round and the LLM validator on, then the tiny model plays a kit
    environment through the rollout engine. A random model writes no valid design: every try is archived
    with a known reason, the repair is asked, and the episodes end cleanly."""
    from spade_rl.design.llm_validator import LLMValidatorSettings
    from spade_rl.design.validate import REASONS
    from spade_rl.policy import TransformersPolicy, tiny_random_model
    from spade_rl.rollout import STOP_REASONS, EpisodeSpec, RolloutConfig, run_episodes

    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    validation = ValidationSettings(
        max_turns=4, reset_gate_seeds=3, repair_rounds=1, llm_validator=LLMValidatorSettings(enabled=True)
    )
    config = DesignPhaseConfig(
        n=2, setting="tool_use", form="tool_kit", validation=validation, max_new_tokens=24, grounding=False
    )
    try:
        with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0, load_timeout_s=4.0)) as sandbox:
            with Archive(tmp_path / "archive.sqlite") as archive:
                designs = design_environments(
                    policy, Corpus.from_config(), archive, sandbox, config, random.Random(0), 1
                )
                records = [archive.get(env_id) for env_id in archive.ids()]
            assert len(designs) >= 2 and all(d.reason in REASONS or d.reason == "truncated" for d in designs)
            assert len(records) >= 2 and any(r.metadata.get("repair") == 1 for r in records)
            source = kits.compose("tool_use", kits.TOOL_EXAMPLES["banking"])
            specs = [
                EpisodeSpec(source, seed=s, setting="tool_use", env_kwargs={"max_turns": 2}) for s in (0, 1)
            ]
            rollout = RolloutConfig(max_turns=2, max_new_tokens=16, max_context_tokens=2048)
            episodes = run_episodes(policy, sandbox, specs, rollout, seed=0)
        for episode in episodes:
            assert episode.stop_reason in STOP_REASONS and episode.stop_reason != "env_error", episode.error
            assert 0.0 <= episode.return_ <= 1.0
            assert len(episode.token_ids) == len(episode.mask) == len(episode.logprobs) and any(episode.mask)
    finally:
        policy.close()


def test_a_stepped_task_may_say_done_in_its_hint_and_a_question_may_not_name_its_answer(pool):
    files = kits.compose("tool_use", kits.TOOL_EXAMPLES["files"])
    report = validate_source(pool, files, SETTINGS, hint="Finish every step before you say done.")
    assert report.valid, report  # "done" is the answer of every seed, and the task states it
    fixed = FLIGHTS.replace("self.flights[cheapest]", "'cheap'")
    leaky = validate_source(pool, composed(fixed), SETTINGS, hint="Say cheap.")
    assert leaky.reason == "hint_leaks_answer", leaky  # one answer at every seed, but the task never says it


def test_the_llm_validator_audits_tool_kit_designs_by_their_own_code(pool, tmp_path):
    tokenizer = default_tokenizer()
    asked = []

    def answer(chat):
        asked.append(chat)
        if "You audit generated Python tool-use" in chat[0]["content"]:
            return "Every value is reachable. \\boxed{yes}"
        return FLIGHTS.strip().removeprefix("class ") + "\n```"

    from spade_rl.design.llm_validator import LLMValidatorSettings

    validation = ValidationSettings(max_turns=6, call_timeout_s=2.0, llm_validator=LLMValidatorSettings(True))
    config = DesignPhaseConfig(
        n=1, setting="tool_use", form="tool_kit", validation=validation, max_new_tokens=1500
    )
    with Archive(tmp_path / "archive.sqlite") as archive:
        [design] = design_environments(
            FakePolicy(answer, tokenizer=tokenizer),
            Corpus.from_config(),
            archive,
            pool,
            config,
            random.Random(0),
            1,
        )
        assert design.valid and design.report.checks[-1] == "llm_validator"
        assert archive.get(design.env_id).metadata["llm_validator"].endswith("\\boxed{yes}")
    shown = asked[-1][1]["content"]
    assert "class CheapestFlightEnv(ToolUseBaseEnv)" in shown and "class ToolUseTask" not in shown
    assert "The class subclasses ToolUseTask" in shown  # the kit in a sentence instead


def test_a_run_configuration_in_the_tool_kit_form():
    from spade_rl.loop.config import load_config

    overrides = ["design.form='tool_kit'", "design.setting='tool_use'", "warmup.designs=0"]
    config = load_config(None, overrides)
    assert (config.design.form, config.design_phase.skill_list[0]) == ("tool_kit", "retail")
    from spade_rl.configdata import ConfigError

    with pytest.raises(ConfigError, match=r"warmup\.designs"):
        load_config(None, overrides[:2])


def test_with_thinking_on_the_designer_thinks_then_writes_its_block(pool, thinking_tokenizer, tmp_path):
    """The reference's Qwen3-8B runs think in both roles: no forced opening then, and the parser takes the
    block that holds the class, after the thinking (whose sketch it never reads)."""
    thought = "<think>\nA sketch:\n```python\nclass SketchEnv(ToolUseTask):\n    pass\n```\n</think>\n\n"
    text = thought + "Here it is.\n" + answer(FLIGHTS) + "\nThat is all."
    policy = FakePolicy([text], tokenizer=thinking_tokenizer)
    config = DesignPhaseConfig(
        n=1, setting="tool_use", form="tool_kit", thinking="on", validation=SETTINGS, max_new_tokens=4000
    )
    with Archive(tmp_path / "archive.sqlite") as archive:
        [design] = design_environments(
            policy, Corpus.from_config(), archive, pool, config, random.Random(0), 1
        )
        assert design.valid, design.reason
        assert kits.design_part(archive.get(design.env_id).source, "tool_use") == FLIGHTS.strip()
    prompt, settings = policy.calls[0]
    assert settings.stop == () and prompt[0][0]["role"] == "system"  # asked with the chat: nothing forced


def test_tool_results_are_capped_and_made_json(pool):
    code = FLIGHTS.replace(
        '        return "sunny"', "        return {'text': 'x' * 10_000_000, 'when': object()}"
    )
    env = pool.open(composed(code), {"max_turns": 3}).value
    try:
        env.reset(seed=0)
        call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
        result = env.step(call)
        assert result.ok, result
        observation = result.value[0]
        assert len(observation) < 2100 and "[...]</tool_response>" in observation
    finally:
        env.close()
