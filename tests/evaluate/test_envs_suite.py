"""The held-out environments suite: solutions win, garbage loses, broken environments fail alone."""

from __future__ import annotations

import pytest

from spade_rl.archive import Archive
from spade_rl.envs import reference
from spade_rl.evaluate.base import GREEDY, EvalContext
from spade_rl.evaluate.envs_suite import EnvsSuite, load_environments
from spade_rl.policy import FakePolicy


def _ctx(pool, limit=2, seed=0):
    return EvalContext(limit=limit, seed=seed, sampling=GREEDY, sandbox=pool)


def _solutions(pool, suite, limit, seed=0):
    """Every episode's reference play, in the order the suite plays them (environment, then seed)."""
    actions = []
    for env in suite.environments(seed):
        for i in range(limit):
            handle = pool.open(env.source).value
            try:
                assert handle.reset(seed + i).ok
                solution = handle.solution().value
            finally:
                handle.close()
            actions += [solution] if isinstance(solution, str) else solution
    return actions


def test_solution_player_wins_every_reference_episode(pool, tokenizer):
    # One episode at a time, so a scripted list of actions is consumed in play order.
    suite = EnvsSuite(batch_episodes=1)
    script = _solutions(pool, suite, limit=2)
    result = suite.run(FakePolicy(script, tokenizer=tokenizer), _ctx(pool))
    assert result.n == 2 * len(reference.NAMES)
    assert [i.id for i in result.items if not i.correct] == []
    assert result.accuracy == 1.0 and result.metrics["win_rate"] == 1.0
    assert result.metrics["mean_return"] == 1.0 and result.errors == 0
    assert {i.detail["category"] for i in result.items} == set(reference.NAMES)
    assert all(result.metrics[f"win_rate/{name}"] == 1.0 for name in reference.NAMES)
    assert result.items[0].id == "guess/seed=0" and result.items[1].id == "guess/seed=1"
    assert result.metrics["mean_turns"] == pytest.approx(len(script) / result.n)
    assert result.config["episodes_per_env"] == 2 and result.version.startswith("spade-rl ")


@pytest.mark.parametrize(
    "garbage",
    ["", "\x00\x01\x02\xff", "}{ \\boxed{ <tool_call>{not json</tool_call>", "\\boxed{" * 3000, "x" * 20_000],
    ids=["empty", "bytes", "broken", "boxes", "huge"],
)
def test_garbage_loses_every_episode(pool, tokenizer, garbage):
    suite = EnvsSuite(max_turns=4)
    result = suite.run(FakePolicy(lambda chat: garbage, tokenizer=tokenizer), _ctx(pool, limit=1))
    assert result.n == len(reference.NAMES)
    assert result.correct == 0 and result.errors == 0 and result.metrics["mean_return"] == 0.0
    assert all(i.detail["stop_reason"] in ("truncated", "max_turns", "context") for i in result.items)


def test_turn_budget_is_passed_to_environments_that_take_it(pool, tokenizer):
    suite = EnvsSuite(envs=("guess", "maze"), turn_budget=2)
    result = suite.run(FakePolicy(lambda chat: "\\boxed{nonsense}", tokenizer=tokenizer), _ctx(pool, limit=1))
    assert [i.detail["turns"] for i in result.items] == [2, 2]
    assert all(i.detail["stop_reason"] == "truncated" for i in result.items)  # the environment ended them


def test_a_system_prompt_option_replaces_the_games_prompt_only(pool, tokenizer):
    """envs.system_prompt: a model trained with rollout.system_prompts.games is evaluated under its own
    prompt; the default ("") is the rollout's."""
    from spade_rl.rollout import SYSTEM_PROMPTS

    prompts = []

    def answer(chat):  # the evaluation prompts by tokens: the chat it sees is the rendered conversation
        prompts.append("\n".join(message["content"] for message in chat))
        return "\\boxed{1}"

    policy = FakePolicy(answer, tokenizer=tokenizer)
    EnvsSuite(envs=("guess",), max_turns=1).run(policy, _ctx(pool, limit=1))
    mine = "Give one action inside \\boxed{}."
    result = EnvsSuite(envs=("guess",), max_turns=1, system_prompt=mine).run(policy, _ctx(pool, limit=1))
    assert len(prompts) == 2 and SYSTEM_PROMPTS["games"] in prompts[0] and mine not in prompts[0]
    assert mine in prompts[1] and SYSTEM_PROMPTS["games"] not in prompts[1]
    assert result.config["system_prompt"] == mine


HANGS = """
class HangEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns
    def reset(self, seed=None):
        return "Say anything.", {}
    def step(self, action):
        while True:
            pass
    def solution(self):
        return ["x"]
"""

CRASHES = """
class CrashEnv:
    def reset(self, seed=None):
        raise RuntimeError("broken on purpose")
    def step(self, action):
        return "", 0.0, True, False, {}
    def solution(self):
        return ["x"]
"""

LIES = """
class LiarEnv:
    def reset(self, seed=None):
        return "Say anything.", {}
    def step(self, action):
        return "ok", float("nan"), "yes", False, []
    def solution(self):
        return ["x"]
"""


def _archive(tmp_path):
    path = tmp_path / "archive.sqlite"
    with Archive(path) as archive:
        ids = [
            archive.add(source, valid=True, reason="ok", skill="test", setting="games", iteration=1).env_id
            for source in (HANGS, CRASHES, reference.source("guess"), LIES)
        ]
        archive.add(
            "class BadEnv: pass", valid=False, reason="no_reset", skill="x", setting="games", iteration=1
        )
    return path, ids


def test_broken_archive_environments_are_errors_not_crashes(pool, tokenizer, tmp_path):
    """An environment that hangs, raises or breaks the contract makes its episodes errors (not lost
    episodes): counted, and left out of the win rate, which is over the episodes that were played."""
    _, (hang, crash, guess, liar) = _archive(tmp_path)
    suite = EnvsSuite(source=str(tmp_path), call_timeout_s=0.5, max_turns=3)
    result = suite.run(FakePolicy(lambda chat: "\\boxed{0}", tokenizer=tokenizer), _ctx(pool, limit=2))
    assert [e.label for e in suite.environments()] == [f"env{i}" for i in (hang, crash, guess, liar)]
    by_env = {}
    for item in result.items:
        by_env.setdefault(item.detail["env"], []).append(item)
    assert len(result.items) == 8 and result.correct == 0
    for env_id in (hang, crash, liar):
        for item in by_env[f"env{env_id}"]:
            assert item.detail["stop_reason"] == "env_error" and item.detail["error"]
            assert not item.correct and item.score == 0.0
            assert item.error.startswith("the environment failed: ")
    assert "timeout" in by_env[f"env{hang}"][0].detail["error"]
    assert "broken on purpose" in by_env[f"env{crash}"][0].detail["error"]
    assert all(i.detail["stop_reason"] == "max_turns" for i in by_env[f"env{guess}"])  # played normally
    assert (result.errors, result.scored) == (6, 2) and result.summary() == "0/2 correct, 6 errors"
    assert result.metrics["win_rate"] == 0.0 and set(result.metrics) >= {f"win_rate/env{guess}"}
    assert f"win_rate/env{hang}" not in result.metrics  # no episode of it was scored


RAISES_ON_ACTION = """
class TouchyEnv:
    def reset(self, seed=None):
        return f"Round {seed}. Say win.", {}
    def step(self, action):
        if "boom" in action:
            raise ValueError("cannot handle this action")
        won = "win" in action
        return ("right" if won else "wrong"), (1.0 if won else 0.0), True, False, {}
    def solution(self):
        return ["win"]
"""


def test_an_environment_that_raises_on_the_action_makes_an_error(pool, tokenizer, tmp_path):
    """An environment whose step raises on the agent's action: that episode is an error, not a lost
    episode; the win rate and accuracy are over the episodes it judged."""
    with Archive(tmp_path / "archive.sqlite") as archive:
        env_id = archive.add(
            RAISES_ON_ACTION, valid=True, reason="ok", skill="test", setting="games", iteration=1
        ).env_id
    replies = {"Round 0.": "\\boxed{boom}", "Round 1.": "\\boxed{win}", "Round 2.": "\\boxed{lose}"}

    def reply(chat):
        return next(text for start, text in replies.items() if start in chat[-1]["content"])

    suite = EnvsSuite(source=str(tmp_path), max_turns=2)
    result = suite.run(FakePolicy(reply, tokenizer=tokenizer), _ctx(pool, limit=3))
    broken, won, lost = result.items
    assert broken.detail["stop_reason"] == "env_error" and "cannot handle this action" in broken.error
    assert not broken.correct and won.correct and not won.error and not lost.correct and not lost.error
    assert (result.errors, result.scored, result.correct, result.accuracy) == (1, 2, 1, 0.5)
    assert result.metrics["win_rate"] == 0.5 and result.metrics[f"win_rate/env{env_id}"] == 0.5
    assert result.metrics["mean_return"] == 0.5 and result.metrics["mean_turns"] == 1.0


def test_jsonl_pool_and_id_selection(pool, tokenizer, tmp_path):
    path, (_, _, guess, _) = _archive(tmp_path)
    with Archive(path, readonly=True) as archive:
        archive.export_jsonl(tmp_path / "pool.jsonl")
    envs = load_environments(str(tmp_path / "pool.jsonl"), (str(guess),))
    assert [e.label for e in envs] == [f"env{guess}"]
    assert len(load_environments(str(tmp_path / "pool.jsonl"))) == 4  # the invalid one is left out
    suite = EnvsSuite(source=str(path), envs=str(guess), max_turns=2)
    result = suite.run(FakePolicy(lambda chat: "\\boxed{50}", tokenizer=tokenizer), _ctx(pool, limit=3))
    assert [i.id for i in result.items] == [f"env{guess}/seed={s}" for s in range(3)]


def test_large_pools_are_sampled_by_seed(tmp_path):
    path, _ = _archive(tmp_path)
    suite = EnvsSuite(source=str(path), max_envs=2)
    assert len(suite.environments(0)) == 2
    assert suite.environments(0) == suite.environments(0)
    assert len(suite.all_environments()) == 4


@pytest.mark.parametrize(
    "options, message",
    [
        ({"envs": "nowhere"}, "unknown reference environment"),
        ({"source": "/no/such/run"}, "neither 'reference' nor an existing"),
        ({"episodes": "0"}, "at least 1"),
        ({"max_new_tokens": 5000}, "smaller than"),
        ({"call_timeout_s": "-1"}, "call_timeout_s"),
        ({"env_kwargs": {"chess": {}}}, r"env_kwargs.chess: unknown reference environment"),
        ({"env_kwargs": {"guess": 20}}, r"env_kwargs.guess must be a table"),
        ({"env_kwargs": "{not json"}, "not JSON"),
        ({"env_kwargs": [1]}, "must be a table of name"),
    ],
)
def test_bad_options_say_what_is_wrong(options, message):
    with pytest.raises(ValueError, match=message):
        EnvsSuite(**options).environments()


def test_bad_sources_say_what_is_wrong(tmp_path):
    path, _ = _archive(tmp_path)
    with pytest.raises(ValueError, match="give environment ids"):
        load_environments(str(path), ("guess",))
    with pytest.raises(ValueError, match=r"envs\.envs: no environment 999 in .*; its valid ids: 1, 2, 3, 4$"):
        load_environments(str(path), ("999",))
    with pytest.raises(ValueError, match=r"environment 5 in .* was rejected by validation \(no_reset\)"):
        load_environments(str(path), ("5",))
    (tmp_path / "empty-run").mkdir()
    with pytest.raises(ValueError, match="no archive at"):
        load_environments(str(tmp_path / "empty-run"))  # a folder without archive.sqlite
    (tmp_path / "bad.jsonl").write_text('{"format": "spade-rl-env/1"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        load_environments(str(tmp_path / "bad.jsonl"))
    (tmp_path / "not.sqlite").write_text("hello")
    with pytest.raises(ValueError, match="not a spade-rl archive"):
        load_environments(str(tmp_path / "not.sqlite"))


def test_held_out_games_are_played_by_name_only():
    default = [env.label for env in EnvsSuite().environments()]
    assert default == list(reference.NAMES) and not set(default) & set(reference.HELD_OUT)
    named = EnvsSuite(envs=("nim", "guess", "compare")).environments()
    assert [env.label for env in named] == ["guess", "nim", "compare"]  # the registry's order


def test_reference_games_play_at_the_sizes_env_kwargs_gives(pool, tokenizer):
    """guess at high = 4: the solution of the small game wins there; the suite's version tells the sizes
    apart (results at other sizes are not compared)."""
    small = EnvsSuite(envs=("guess",), env_kwargs='{"guess": {"high": 4}}', batch_episodes=1, max_turns=3)
    assert small.environments()[0].env_kwargs == {"high": 4}
    script = []
    for seed in (0, 1):
        handle = pool.open(reference.source("guess"), {"high": 4}).value
        try:
            assert handle.reset(seed).ok
            script += handle.solution().value
        finally:
            handle.close()
    result = small.run(FakePolicy(script, tokenizer=tokenizer), _ctx(pool))
    assert result.accuracy == 1.0 and result.config["env_kwargs"] == {"guess": {"high": 4}}
    assert small.version() != EnvsSuite(envs=("guess",)).version()
    with pytest.raises(ValueError, match="reference environments only"):
        EnvsSuite(source="/tmp", env_kwargs={"guess": {"high": 4}})
