"""The hand-written reference environments: the contract, solvability, determinism, robustness.

The reference files are trusted, so they are loaded in-process with ``load_env_class``; generated
environments never are (they go through the sandbox).

    PYTHONPATH=src python3 -m pytest tests/test_reference_envs.py -q
"""

import ast
import functools
import itertools
import json
import re
import sys
from collections import defaultdict

import pytest

from spade_rl.envs import (
    check_reset_value,
    check_solution_value,
    check_step_value,
    find_env_classes,
    load_env_class,
    reference,
)

SEEDS = range(20)

MALFORMED = [
    "",
    "garbage",
    "\\boxed{}",
    "\\boxed{   }",
    "\\boxed{",
    "<tool_call>{not json</tool_call>",
    "<tool_call></tool_call>",
    "x" * 10_000,
    "\\boxed{" + "9" * 10_000 + "}",  # int() refuses more than 4300 digits
    "\\boxed{1" + " " * 10_000 + "x}",  # regex backtracking bait
    "<tool_call>" + "[" * 10_000 + "</tool_call>",  # json recursion bait
    "<tool_call>" * 2_000 + "<answer>" * 2_000,  # quadratic-scan bait
    "\\boxed{\x00\u00b2\u0663}",  # NUL, superscript two, Arabic-Indic three
]


@functools.cache
def env_class(name):
    return load_env_class(reference.source(name), module_name=f"reference_{name}")


def fresh(name, seed):
    """A new instance of env ``name`` after reset(seed): (env, observation, info)."""
    env = env_class(name)()
    observation, info = check_reset_value(env.reset(seed))
    assert_plain(info)
    return env, observation, info


def assert_plain(value):
    """JSON-serialisable plain values only: str, int, float, bool, None, lists, dicts with str keys."""
    if isinstance(value, dict):
        assert all(type(key) is str for key in value), value
        for item in value.values():
            assert_plain(item)
    elif isinstance(value, list):
        for item in value:
            assert_plain(item)
    else:
        assert value is None or type(value) in (str, int, float, bool), repr(value)
    json.dumps(value)


def play(env, actions):
    """Step through ``actions``; every answer is checked against the contract."""
    results = []
    for action in actions:
        result = check_step_value(env.step(action))
        assert_plain(result.info)
        json.dumps(result.observation)
        results.append(result)
    return results


def wrong_action(name, env):
    """A well-formed action that does not win from the reset state (and keeps not winning)."""
    last = check_solution_value(env.solution())[-1]
    if name in ("guess", "codebreaker"):
        secret = re.search(r"\\boxed\{(\d+)\}", last).group(1)
        other = {
            "guess": "1" if secret != "1" else "2",
            "codebreaker": "1111" if secret != "1111" else "2222",
        }
        return f"\\boxed{{{other[name]}}}"
    if name == "arithmetic":
        answer = int(re.search(r"\\boxed\{(-?\d+)\}", last).group(1))
        return f"\\boxed{{{answer + 1}}}"
    if name == "compare":  # the smaller number of the first pair
        a, b = env._pairs[env._turn]
        return f"\\boxed{{{min(a, b)}}}"
    if name == "schedule":  # everything on one printer is never optimal
        jobs = sorted(int(number) for number in re.findall(r"\d+", last))
        return f"\\boxed{{A: {', '.join(map(str, jobs))}; B:}}"
    return {
        "maze": "\\boxed{up}",  # the start is in the top-left corner: up is always a wall
        "lights": "\\boxed{1,1}",  # no puzzle is solved by one press (make_puzzle draws >= 2 cells)
        "tools": '<tool_call>{"name": "search_products", "arguments": {"query": "mug"}}</tool_call>',
        "nim": "\\boxed{4}",  # more than a turn may take: an illegal move, the pile stays
    }[name]


# --- every environment -------------------------------------------------------------------------


@pytest.mark.parametrize("name", reference.ALL)
def test_each_file_defines_exactly_one_env_class_and_imports_only_the_standard_library(name):
    source = reference.source(name)
    assert len(find_env_classes(source)) == 1
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for module in modules:
            assert module.split(".")[0] in sys.stdlib_module_names, f"{name} imports {module}"


@pytest.mark.parametrize("name", reference.ALL)
def test_solution_wins_for_every_seed(name):
    for seed in SEEDS:
        env, _, _ = fresh(name, seed)
        actions = check_solution_value(env.solution())
        results = play(env, actions)
        for result in results[:-1]:
            assert not result.terminated and not result.truncated, (seed, result)
            assert result.reward < 1.0
        assert results[-1].reward == 1.0 and results[-1].terminated and not results[-1].truncated, seed
        assert len(actions) <= env.max_turns


@pytest.mark.parametrize("name", reference.ALL)
def test_solution_wins_on_many_seeds(name):
    """A wider, lighter sweep: generators can fail on rare draws (a bill larger than every note)."""
    for seed in [*range(20, 300), 2**31 - 1, 2**64 + 5, -1]:
        env = env_class(name)()
        env.reset(seed)
        *_, (_, reward, terminated, _, _) = (env.step(action) for action in env.solution())
        assert reward == 1.0 and terminated, seed


@pytest.mark.parametrize("name", reference.ALL)
def test_seed_none_is_seed_zero(name):
    env = env_class(name)()
    assert env.reset(None) == env.reset(0)


@pytest.mark.parametrize("name", reference.ALL)
def test_same_seed_gives_the_same_transcript(name):
    def transcript(env, seed):
        first = env.reset(seed)
        actions = [MALFORMED[1], wrong_action(name, env), MALFORMED[2], *env.solution(), "after the end"]
        return [first, *(env.step(action) for action in actions)]

    for seed in (0, 7, 123456789):
        one, two = env_class(name)(), env_class(name)()
        assert transcript(one, seed) == transcript(two, seed)
        assert transcript(one, seed) == transcript(one, seed)  # reset really resets


@pytest.mark.parametrize("name", reference.ALL)
def test_different_seeds_give_different_instances(name):
    instances = set()
    for seed in SEEDS:
        env, observation, _ = fresh(name, seed)
        instances.add((observation, tuple(check_solution_value(env.solution()))))
    assert len(instances) >= 2
    if name not in ("guess", "codebreaker"):  # hidden-secret games open with the same text every time
        assert len({observation for observation, _ in instances}) >= 2


@pytest.mark.parametrize("name", reference.ALL)
def test_malformed_actions_are_answered_not_raised(name):
    for action in MALFORMED:
        env, _, _ = fresh(name, 3)
        (result,) = play(env, [action])
        assert result.reward == 0.0, action[:40]
        assert result.observation.strip()


@pytest.mark.parametrize("name", reference.ALL)
def test_malformed_action_explains_the_format_and_counts_a_turn(name):
    env, _, _ = fresh(name, 1)
    (result,) = play(env, ["garbage"])
    assert result.info["turn"] == 1
    assert "\\boxed{" in result.observation or "<tool_call>" in result.observation


# arithmetic and compare end after a fixed number of answers, right or wrong
@pytest.mark.parametrize("name", [name for name in reference.ALL if name not in ("arithmetic", "compare")])
def test_running_out_of_turns_truncates_with_reward_zero(name):
    env, _, _ = fresh(name, 5)
    results = play(env, [wrong_action(name, env)] * env.max_turns)
    for result in results[:-1]:
        assert not result.terminated and not result.truncated and result.reward == 0.0
    assert results[-1].truncated and not results[-1].terminated and results[-1].reward == 0.0
    (after,) = play(env, [wrong_action(name, env)])
    assert after.terminated and after.reward == 0.0


@pytest.mark.parametrize("name", reference.ALL)
def test_step_after_a_win_does_not_raise(name):
    env, _, _ = fresh(name, 2)
    play(env, check_solution_value(env.solution()))
    for result in play(env, [*env.solution(), "garbage"]):
        assert result.terminated and result.reward == 0.0 and result.observation.strip()


@pytest.mark.parametrize("name", reference.ALL)
def test_step_before_reset_does_not_raise(name):
    (result,) = play(env_class(name)(), ["\\boxed{1}"])
    assert result.terminated and result.reward == 0.0


# --- the registry ------------------------------------------------------------------------------


def test_registry_lists_every_file_once():
    files = sorted(p.stem for p in reference.path("guess").parent.glob("*.py") if p.stem != "__init__")
    assert sorted(reference.ALL) == files
    assert not set(reference.NAMES) & set(reference.HELD_OUT)
    assert (
        set(reference.SETTINGS) == set(reference.DESCRIPTIONS) == set(reference.HINTS) == set(reference.ALL)
    )
    assert set(reference.SETTINGS.values()) == {"games", "tool_use"}
    assert reference.SETTINGS["tools"] == "tool_use"
    for name in reference.ALL:
        assert reference.path(name).read_text(encoding="utf-8") == reference.source(name)
        assert "\n" not in reference.DESCRIPTIONS[name]


def test_unknown_name_is_a_clear_error():
    with pytest.raises(KeyError) as error:
        reference.source("chess")
    assert "chess" in str(error.value) and all(name in str(error.value) for name in reference.NAMES)
    with pytest.raises(KeyError, match="allowed names"):
        reference.path("../loader")


def test_the_package_does_not_import_the_environment_modules():
    assert not any(module.startswith("spade_rl.envs.reference.") for module in sys.modules)


# --- guess -------------------------------------------------------------------------------------


def test_guess_feedback_points_towards_the_secret():
    env, _, _ = fresh("guess", 11)
    secret = int(re.search(r"\d+", env.solution()[-1]).group())
    low, high, outside = play(
        env, [f"\\boxed{{{secret - 1}}}", f"I say \\boxed{{{secret + 1}}}", "\\boxed{101}"]
    )
    assert "higher" in low.observation and low.info["status"] == "higher"
    assert "lower" in high.observation and high.info["status"] == "lower"
    assert outside.info["status"] == "invalid" and outside.info["turn"] == 3


def test_guess_binary_search_needs_at_most_seven_guesses():
    assert max(len(fresh("guess", seed)[0].solution()) for seed in range(200)) <= 7


# --- arithmetic --------------------------------------------------------------------------------


def test_arithmetic_accepts_the_answer_in_common_spellings_and_reads_the_last_box():
    env, _, _ = fresh("arithmetic", 4)
    answer = int(re.search(r"-?\d+", env.solution()[0]).group())
    for spelling in (f"\\boxed{{{answer}}}", f"\\boxed{{ ${answer} }}", f"\\boxed{{{answer}.0 dollars}}"):
        env.reset(4)
        (result,) = play(env, [f"First \\boxed{{{answer + 3}}}, no wait: {spelling}"])
        assert result.reward == 1.0 and result.terminated


def test_arithmetic_wrong_answer_ends_the_episode_and_malformed_one_truncates():
    env, _, _ = fresh("arithmetic", 9)
    (wrong,) = play(env, [wrong_action("arithmetic", env)])
    assert wrong.terminated and not wrong.truncated and wrong.reward == 0.0
    env.reset(9)
    (malformed,) = play(env, ["the answer is 12"])
    assert malformed.truncated and not malformed.terminated and malformed.reward == 0.0


def test_arithmetic_uses_every_story_kind():
    assert len({fresh("arithmetic", seed)[2]["story"] for seed in range(40)}) == 4


# --- maze --------------------------------------------------------------------------------------


def test_maze_wall_bump_keeps_the_position():
    env, _, info = fresh("maze", 0)
    (bump,) = play(env, ["\\boxed{up}"])
    assert "wall" in bump.observation and bump.info["position"] == info["position"] == [2, 2]
    assert bump.info["status"] == "bump" and not bump.terminated


def test_maze_runs_a_sequence_of_moves_in_one_turn_and_stops_at_a_wall():
    env, _, _ = fresh("maze", 6)
    moves = [re.search(r"\{(\w+)\}", action).group(1) for action in env.solution()]
    (result,) = play(env, ["\\boxed{" + ", ".join(moves) + "}"])
    assert result.reward == 1.0 and result.terminated and result.info["turn"] == 1

    env.reset(6)
    (result,) = play(env, [f"\\boxed{{{moves[0]}, up, up, up, up, up, up, up}}"])
    assert result.info["status"] == "bump" and result.info["position"][0] >= 2


def test_maze_solution_is_a_shortest_path():
    env, observation, _ = fresh("maze", 8)
    grid = [line for line in observation.splitlines() if line.startswith("#")]
    start = next((r, c) for r, line in enumerate(grid) for c, cell in enumerate(line) if cell == "A")
    goal = next((r, c) for r, line in enumerate(grid) for c, cell in enumerate(line) if cell == "G")
    distance, frontier = {start: 0}, [start]
    while frontier:
        r, c = frontier.pop(0)
        for square in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if grid[square[0]][square[1]] != "#" and square not in distance:
                distance[square] = distance[(r, c)] + 1
                frontier.append(square)
    assert len(env.solution()) == distance[goal]


# --- codebreaker -------------------------------------------------------------------------------


def test_codebreaker_feedback_counts_on_hand_computed_examples():
    env, _, _ = fresh("codebreaker", 0)
    env._secret = "1234"  # white-box: a secret whose feedback is easy to compute by hand
    results = play(env, ["\\boxed{1325}", "\\boxed{4321}", "\\boxed{1111}", "\\boxed{1 2 4 4}"])
    assert [result.info["feedback"] for result in results] == [[1, 2], [0, 4], [1, 0], [3, 0]]
    assert "exact 1, misplaced 2" in results[0].observation
    for bad in ("\\boxed{1237}", "\\boxed{123}", "\\boxed{12345}"):
        (result,) = play(env, [bad])
        assert result.info["status"] == "invalid"


def _score(secret, guess):
    exact = sum(s == g for s, g in zip(secret, guess, strict=True))
    return exact, sum(min(secret.count(d), guess.count(d)) for d in "123456") - exact


def _first_consistent_depth(candidates):
    """Guesses the first-consistent strategy needs, worst case, when the secret is in ``candidates``."""
    groups = defaultdict(list)
    for code in candidates[1:]:
        groups[_score(code, candidates[0])].append(code)
    return 1 + max((_first_consistent_depth(group) for group in groups.values()), default=0)


def test_codebreaker_strategy_wins_within_the_turn_limit_for_every_secret():
    codes = ["".join(code) for code in itertools.product("123456", repeat=4)]
    assert _first_consistent_depth(codes) <= env_class("codebreaker")().max_turns
    env, _, _ = fresh("codebreaker", 0)
    for secret in codes[::97]:  # the environment's own play agrees, on a sample of secrets
        env._secret = secret
        assert env.solution()[-1] == f"\\boxed{{{secret}}}"


# --- lights ------------------------------------------------------------------------------------


def _board(observation):
    return [line for line in observation.splitlines() if re.match(r"\s*\d [.O]", line)]


def test_lights_pressing_a_cell_twice_is_a_no_op():
    env, observation, info = fresh("lights", 12)
    once, twice = play(env, ["\\boxed{2,3}", "\\boxed{(2, 3)}"])
    assert _board(once.observation) != _board(observation)
    assert _board(twice.observation) == _board(observation)
    assert twice.info["lights_on"] == info["lights_on"]


def test_lights_press_toggles_the_cell_and_its_neighbours():
    env, observation, _ = fresh("lights", 0)
    (result,) = play(env, ["\\boxed{1,1}"])
    before, after = _board(observation), _board(result.observation)
    changed = {
        (r, c) for r in range(4) for c in range(4) if before[r].split()[c + 1] != after[r].split()[c + 1]
    }
    assert changed == {(0, 0), (0, 1), (1, 0)}
    for bad in ("\\boxed{0,1}", "\\boxed{5,1}", "\\boxed{1}", "\\boxed{1,2,3}"):
        (result,) = play(env, [bad])
        assert result.info["status"] == "invalid"


# --- schedule ----------------------------------------------------------------------------------


def _durations(observation):
    return [int(hours) for hours in re.findall(r"job \d+: (\d+) hours", observation)]


def test_schedule_solution_is_optimal_and_greedy_is_not():
    for seed in range(5):
        env, observation, _ = fresh("schedule", seed)
        durations = _durations(observation)
        total = sum(durations)
        loads_on_a = {
            sum(d for d, on_a in zip(durations, sides, strict=True) if on_a)
            for sides in itertools.product([True, False], repeat=len(durations))
        }
        optimum = min(max(load, total - load) for load in loads_on_a)
        greedy = [0, 0]  # longest job first, onto the less busy printer
        for duration in sorted(durations, reverse=True):
            greedy[greedy.index(min(greedy))] += duration
        assert max(greedy) > optimum
        (result,) = play(env, env.solution())
        assert result.reward == 1.0 and result.info["makespan"] == optimum


def test_schedule_rewards_only_an_optimal_feasible_schedule():
    env, observation, _ = fresh("schedule", 3)
    jobs = len(_durations(observation))
    everything_on_a, missing, repeated = play(
        env,
        [
            wrong_action("schedule", env),
            f"\\boxed{{A: {', '.join(map(str, range(2, jobs + 1)))}; B:}}",
            f"\\boxed{{A: 1, 1; B: {', '.join(map(str, range(2, jobs + 1)))}}}",
        ],
    )
    assert everything_on_a.reward == 0.0 and everything_on_a.info["status"] == "suboptimal"
    assert everything_on_a.info["makespan"] == sum(_durations(observation))
    assert "better schedule exists" in everything_on_a.observation
    assert missing.info["status"] == "infeasible" and "job 1 is not assigned" in missing.observation
    assert repeated.info["status"] == "infeasible" and repeated.truncated and repeated.reward == 0.0


# --- tools -------------------------------------------------------------------------------------


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _responses(observation):
    return [json.loads(text) for text in re.findall(r"<tool_response>(.*?)</tool_response>", observation)]


def test_tools_first_observation_lists_openai_style_schemas():
    _, observation, _ = fresh("tools", 0)
    tools = [json.loads(line) for line in observation.splitlines() if line.startswith('{"type": "function"')]
    assert {tool["function"]["name"] for tool in tools} == {"search_products", "list_category", "get_product"}
    for tool in tools:
        assert tool["function"]["parameters"]["type"] == "object" and tool["function"]["description"]
    assert "Question:" in observation and "<answer>" in observation


def test_tools_errors_are_observations():
    env, _, _ = fresh("tools", 0)
    action = (
        _call("delete_everything")
        + "<tool_call>{not json</tool_call>"
        + _call("get_product")
        + _call("get_product", product_id=7)
        + _call("get_product", product_id="P1", colour="red")
        + _call("list_category", category="toys")
        + _call("get_product", product_id="P000")
        + '<tool_call>["a list"]</tool_call>'
    )
    (result,) = play(env, [action])
    errors = [response["error"] for response in _responses(result.observation)]
    assert len(errors) == 8 and result.info["status"] == "error" and not result.terminated
    assert "unknown tool" in errors[0] and "get_product" in errors[0]
    assert "invalid JSON" in errors[1]
    assert "missing argument 'product_id'" in errors[2]
    assert "must be a string" in errors[3]
    assert "unexpected argument 'colour'" in errors[4]
    assert "must be one of" in errors[5]
    assert "no product" in errors[6]


def test_tools_answers_calls_in_order_and_accepts_string_arguments():
    env, _, _ = fresh("tools", 0)
    string_arguments = (
        '<tool_call>{"name": "list_category", "arguments": "{\\"category\\": \\"office\\"}"}</tool_call>'
    )
    (result,) = play(env, [_call("list_category", category="kitchen") + string_arguments])
    kitchen, office = _responses(result.observation)
    assert kitchen["results"][0]["name"] == "Blue Ceramic Mug"
    assert office["results"][0]["name"] == "LED Desk Lamp"
    (result,) = play(env, [_call("get_product", product_id=kitchen["results"][0]["product_id"])])
    (product,) = _responses(result.observation)
    assert set(product) == {"product_id", "name", "category", "price", "stock"}


def test_tools_numeric_answers_compare_as_numbers_and_wrong_numbers_lose():
    for seed in SEEDS:
        env, observation, _ = fresh("tools", seed)
        if "Answer with the number only" in observation:
            break
    else:
        pytest.fail("no seed asks for a number")
    expected = re.search(r"<answer>(.*)</answer>", env.solution()[-1]).group(1)
    value = float(expected)
    for answer, reward in (
        (f"${value:,.2f}", 1.0),
        (f" {value} ", 1.0),
        (str(value + 1), 0.0),
        (f"{value} or {value + 1}", 0.0),
        ("9" * 400, 0.0),
        ("", 0.0),
    ):
        env.reset(seed)
        (result,) = play(env, [f"<answer>{answer}</answer>"])
        assert result.reward == reward and result.terminated, answer


def test_tools_name_answers_ignore_case_and_spacing():
    for seed in range(100):
        env, observation, _ = fresh("tools", seed)
        if "Answer with its name" in observation:
            break
    else:
        pytest.fail("no seed asks for a name")
    name = re.search(r"<answer>(.*)</answer>", env.solution()[-1]).group(1)
    env.reset(seed)
    (result,) = play(env, [f"<answer>  {name.upper()}. </answer>"])
    assert result.reward == 1.0
    env.reset(seed)
    (result,) = play(env, ["<answer>Rain Jacket and Wool Beanie</answer>"])
    assert result.reward == 0.0 and result.terminated


def test_tools_question_needs_at_least_two_tool_calls():
    for seed in SEEDS:
        env, _, _ = fresh("tools", seed)
        *calls, answer = env.solution()
        assert sum(action.count("<tool_call>") for action in calls) >= 2 and answer.startswith("<answer>")


# --- sizes: the constructor arguments of the CPU default's pool (and others) --------------------------
SIZES = {
    "guess": [{"high": 20}, {"high": 2}],
    "arithmetic": [{"stories": ["more", "fewer"]}, {"stories": ["discount"]}],
    "maze": [
        {"min_cells": 1, "max_cells": 2},
        {"min_cells": 1, "max_cells": 1},
        {"min_cells": 4, "max_cells": 4},
    ],
    "codebreaker": [{"length": 2, "symbols": 3}, {"length": 1, "symbols": 2}, {"length": 5, "symbols": 7}],
}


@pytest.mark.parametrize(
    ("name", "kwargs"), [(n, k) for n, sizes in SIZES.items() for k in sizes], ids=lambda v: str(v)
)
def test_sized_reference_games_are_solved_by_their_solution(name, kwargs):
    for seed in SEEDS:
        env = env_class(name)(max_turns=40, **kwargs)
        observation, _ = check_reset_value(env.reset(seed))
        actions = check_solution_value(env.solution())
        for action in actions:
            result = check_step_value(env.step(action))
            if result.terminated or result.truncated:
                break
        assert result.terminated and result.reward == 1.0, (name, kwargs, seed)
        if name == "guess":
            assert f"from 1 to {kwargs['high']}" in observation and len(actions) <= 5
        if name == "codebreaker":
            assert f"{kwargs['length']} digits, each from 1 to {kwargs['symbols']}" in observation


def test_sizes_change_the_instances_and_the_defaults_do_not():
    easy = env_class("arithmetic")(stories=["more", "fewer"])
    for seed in SEEDS:
        observation, _ = easy.reset(seed)
        assert re.search(r"has \d \w+ and (buys|gives) \d", observation), observation
    # the default instances are unchanged by the new arguments
    default, explicit = env_class("codebreaker")(), env_class("codebreaker")(length=4, symbols=6)
    for seed in SEEDS:
        assert default.reset(seed) == explicit.reset(seed) and default.solution() == explicit.solution()
    maze, same = env_class("maze")(), env_class("maze")(min_cells=2, max_cells=3)
    for seed in SEEDS:
        assert maze.reset(seed) == same.reset(seed)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("guess", {"high": 1}),
        ("guess", {"high": "20"}),
        ("codebreaker", {"length": 0}),
        ("codebreaker", {"symbols": 10}),
        ("maze", {"min_cells": 3, "max_cells": 2}),
        ("arithmetic", {"stories": ["poetry"]}),
        ("arithmetic", {"stories": []}),
    ],
)
def test_impossible_sizes_are_refused(name, kwargs):
    with pytest.raises(ValueError, match=r"must be|need"):
        env_class(name)(**kwargs)


# --- the held-out games --------------------------------------------------------------------------


def test_nim_opponent_punishes_every_mistake_and_the_hint_strategy_always_wins():
    env = env_class("nim")()
    for seed in range(200):
        env.reset(seed)
        assert env._pile % 4 and 6 <= env._pile <= 11
        pile = env._pile
        take = 1 if pile % 4 != 1 else 2  # a move that does not leave a multiple of 4
        _, reward, terminated, _, info = env.step(f"\\boxed{{{take}}}")
        assert (reward, terminated) == (0.0, False) and info["pile"] % 4 == 0, seed  # the opponent fixed it
        env.reset(seed)
        assert play(env, env.solution())[-1].reward == 1.0


def test_nim_illegal_moves_leave_the_pile():
    env = env_class("nim")()
    env.reset(4)
    pile = env._pile
    for action in ("\\boxed{0}", "\\boxed{4}", "\\boxed{-1}", "two"):
        (result,) = play(env, [action])
        assert result.info["status"] == "invalid" and result.info["pile"] == pile


def test_nim_refuses_a_pile_range_the_first_player_cannot_win():
    with pytest.raises(ValueError, match="multiples of 4"):
        env_class("nim")(min_pile=8, max_pile=8)


def test_compare_gives_partial_credit_and_wins_only_when_every_round_is_right():
    env = env_class("compare")()
    env.reset(11)
    pairs = list(env._pairs)
    answers = [
        f"\\boxed{{{max(pairs[0])}}}",
        f"\\boxed{{{min(pairs[1])}}}",
        "no number",
        f"\\boxed{{{max(pairs[3])}}}",
    ]
    results = play(env, answers)
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, 0.5] and results[-1].terminated
    assert results[-1].info["status"] == "done" and results[-1].info["right"] == 2
    env.reset(11)
    assert [r.reward for r in play(env, env.solution())][-1] == 1.0
    with pytest.raises(ValueError, match="rounds"):
        env_class("compare")(rounds=9)
