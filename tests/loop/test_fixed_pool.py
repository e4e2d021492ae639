"""The fixed training pool: reference subsets, JSONL pools and Reasoning Gym tasks as environments.

The wrapped Reasoning Gym tasks are generated source, so they are checked the way designs are: the
validation battery in the sandbox, then played by hand through the sandbox with right, wrong and
malformed answers.
"""

from __future__ import annotations

import ast
import json

import pytest
from test_selfplay import PARITY

from spade_rl.archive import Archive, PlayStats
from spade_rl.design.validate import ValidationSettings, validate_source
from spade_rl.envs.external.reasoning_gym_source import reasoning_gym_env_source, training_seed
from spade_rl.loop.config import PoolConfig
from spade_rl.loop.pool import RG_SKILL_PREFIX, pool_entries_of_jsonl, seed_pool
from spade_rl.sandbox import Sandbox, SandboxConfig

SETTINGS = ValidationSettings(max_turns=2)


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2)) as p:
        yield p


def items_of(source: str) -> list[dict]:
    line = next(line for line in source.splitlines() if line.startswith("ITEMS = json.loads("))
    return json.loads(ast.literal_eval(line[len("ITEMS = json.loads(") : -1]))


def play(pool: Sandbox, source: str, seed: int, actions: list[str]) -> list[tuple]:
    opened = pool.open(source, {"max_turns": 2})
    assert opened.ok, opened.error
    env = opened.value
    try:
        assert env.reset(seed).ok
        return [tuple(env.step(action).value) for action in actions]
    finally:
        env.close()


@pytest.mark.parametrize("task", ["chain_sum", "spell_backward", "mini_sudoku"])
def test_reasoning_gym_task_as_a_valid_single_turn_environment(pool, task):
    source = reasoning_gym_env_source(task, items=6, seed=3)
    report = validate_source(pool, source, SETTINGS, hint="Think step by step.")
    assert report.valid, report.message
    items = items_of(source)
    assert len(items) == 6 and source == reasoning_gym_env_source(task, items=6, seed=3)  # deterministic
    answer = items[4]["answer"]
    right = f"<answer>{answer}</answer>" if "\n" in answer else f"Thinking... \\boxed{{{answer}}}"
    [(_, reward, terminated, _, info)] = play(pool, source, 10, [right])  # seed 10 -> item 10 % 6 = 4
    assert (reward, terminated, info["item"], info["status"]) == (1.0, True, 4, "correct")
    [(_, reward, terminated, _, info)] = play(pool, source, 10, ["\\boxed{surely not this}"])
    assert (reward, terminated, info["status"]) == (0.0, True, "wrong")
    (_, r1, t1, tr1, _), (_, r2, t2, tr2, _) = play(pool, source, 10, ["no tags at all", "still none"])
    assert (r1, t1, tr1) == (0.0, False, False) and (r2, t2, tr2) == (
        0.0,
        False,
        True,
    )  # a wasted turn, then out


def test_training_questions_are_not_the_evaluation_items():
    from spade_rl.evaluate.reasoning_gym_suite import task_seed

    assert all(training_seed(s, "chain_sum") != task_seed(s, "chain_sum") for s in range(50))
    assert training_seed(0, "chain_sum") != training_seed(1, "chain_sum")


def test_numeric_answers_match_numerically(pool):
    source = reasoning_gym_env_source("chain_sum", items=3, seed=0)
    answer = int(items_of(source)[0]["answer"])
    [(_, reward, *_)] = play(pool, source, 0, [f"\\boxed{{ {answer}.0 }}"])
    assert reward == 1.0


def test_seed_pool_adds_each_source_once_and_revalidates_jsonl(tmp_path, pool):
    exported = tmp_path / "pool.jsonl"
    broken = PARITY.replace("ParityEnv", "BrokenEnv")
    broken = broken.replace(
        'return ["xx" if self.seed % 2 == 0 else "x"]', 'return ["xx"]'
    )  # loses on odd seeds
    assert broken.count('return ["xx"]') == 1
    with Archive(tmp_path / "other.sqlite") as other:
        for source in (PARITY, broken):
            added = other.add(
                source, valid=True, reason="ok", skill="parity", setting="games", iteration=3, hint="Count."
            )
            other.record_stats(added.env_id, 3, PlayStats(4, 4, 0.5, 0.75, 0.25, 1.5, 0.5, 0.75))
        other.add(
            "class NotEnv: pass", valid=False, reason="no_env_class", skill="x", setting="games", iteration=3
        )
        other.export_jsonl(exported)
    config = PoolConfig(
        reference=("arithmetic",), jsonl=str(exported), reasoning_gym=("chain_sum",), reasoning_gym_items=4
    )
    with Archive(tmp_path / "archive.sqlite") as archive:
        assert seed_pool(archive, pool, config, ValidationSettings(max_turns=2, seed=1, trivial_seeds=0)) == 4
        records = [archive.get(i) for i in archive.ids()]
        assert [(r.origin, r.valid) for r in records] == [
            ("reference", True),
            ("import", True),
            ("import", False),  # valid where it was exported, not under this run's validation (seed 1)
            ("import", True),
        ]
        assert records[3].skill == RG_SKILL_PREFIX + "chain_sum" and records[1].hint == "Count."
        assert (
            seed_pool(archive, pool, config, ValidationSettings(max_turns=2, seed=1, trivial_seeds=0)) == 0
        )  # resume: nothing new
        assert (
            len(archive.ids()) == 4 and archive.latest_stats() == {}
        )  # the other run's statistics stay behind


def test_bad_pools_say_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "spade-rl-env/1"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: missing required field"):
        pool_entries_of_jsonl(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no valid environment"):
        pool_entries_of_jsonl(empty)
    with pytest.raises(ValueError, match=r"unknown Reasoning Gym task\(s\) \['nope'\]"):
        reasoning_gym_env_source("nope", 3, 0)
