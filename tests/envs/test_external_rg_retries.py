"""Reasoning Gym questions with retries ([pool] reasoning_gym_attempts): the multi-turn wrapping validated
by the battery and played through run_episodes with scripted answers; one attempt keeps today's source."""

from __future__ import annotations

import ast
import json

import pytest

from spade_rl.design.validate import ValidationSettings, validate_source
from spade_rl.envs.external.reasoning_gym_source import reasoning_gym_env_source
from spade_rl.envs.loader import find_env_classes
from spade_rl.loop.pool import reasoning_gym_entries
from spade_rl.policy import FakePolicy
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes

pytest.importorskip("reasoning_gym")  # spade-rl's own eval extra (the trusted side generates questions)


def answers(source: str) -> list[str]:
    line = next(line for line in source.splitlines() if line.startswith("ITEMS = json.loads("))
    return [item["answer"] for item in json.loads(ast.literal_eval(line[len("ITEMS = json.loads(") : -1]))]


def test_one_attempt_is_the_single_turn_source_unchanged():
    assert reasoning_gym_env_source("chain_sum", 5, 2, attempts=1) == reasoning_gym_env_source(
        "chain_sum", 5, 2
    )
    retry = reasoning_gym_env_source("chain_sum", 5, 2, attempts=3)
    assert find_env_classes(retry) == ["RgChainSumEnv"] and "with 3 attempts per question" in retry
    assert answers(retry) == answers(reasoning_gym_env_source("chain_sum", 5, 2))  # the same questions
    [entry] = reasoning_gym_entries(["chain_sum"], 5, 2, attempts=3)
    assert entry.source == retry and entry.metadata["attempts"] == 3


def test_the_retrying_environment_passes_the_battery(sandbox):
    source = reasoning_gym_env_source("chain_sum", 8, 0, attempts=3)
    report = validate_source(sandbox, source, ValidationSettings(max_turns=8), hint="Think step by step.")
    assert report.valid, f"{report.reason}: {report.message}"


def test_wrong_answers_are_retried_until_right_or_out_of_attempts(sandbox, tokenizer):
    source = reasoning_gym_env_source("chain_sum", 4, 1, attempts=3)
    right = answers(source)[1 % 4]
    config = RolloutConfig(max_turns=8, max_new_tokens=24, max_context_tokens=4096)
    script = ["\\boxed{-99999}", "I am not sure", f"\\boxed{{{right}}}"]
    [won] = run_episodes(
        FakePolicy(script, tokenizer=tokenizer), sandbox, [EpisodeSpec(source, seed=1)], config
    )
    assert (won.won, won.return_, len(won.turns)) == (True, 1.0, 3)
    assert won.turns[0].observation == "Wrong answer. Try again (2 attempts left)."
    assert (
        won.turns[1].observation.startswith("No answer found.")
        and "1 attempts left" in won.turns[1].observation
    )
    assert "You have 3 attempts" in won.messages[1]["content"]
    wrong = ["\\boxed{-99999}"] * 3
    [lost] = run_episodes(
        FakePolicy(wrong, tokenizer=tokenizer), sandbox, [EpisodeSpec(source, seed=1)], config
    )
    assert (lost.won, lost.return_, lost.stop_reason, len(lost.turns)) == (False, 0.0, "terminated", 3)
    assert (
        lost.turns[-1].observation == "Wrong answer. No attempts left."
        and right not in lost.turns[-1].observation
    )


def test_a_turn_limit_below_the_attempts_truncates(sandbox, tokenizer):
    source = reasoning_gym_env_source("chain_sum", 4, 1, attempts=5)
    config = RolloutConfig(max_turns=8, max_new_tokens=24, max_context_tokens=4096)
    spec = EpisodeSpec(source, seed=0, env_kwargs={"max_turns": 2})
    [episode] = run_episodes(FakePolicy(["\\boxed{-1}"] * 2, tokenizer=tokenizer), sandbox, [spec], config)
    assert (episode.stop_reason, len(episode.turns)) == ("truncated", 2)
    assert "You have 2 attempts" in episode.messages[1]["content"]
