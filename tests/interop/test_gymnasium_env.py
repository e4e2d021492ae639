"""spade-rl environments as Gymnasium environments: Gymnasium's own checker on a reference environment
and on an archived one, the ways to name them (registry, module:id, archive, pool, file), clear refusals
of bad names and ids, and hostile environments (raising, hanging, crashing, lying about types, failing
to load) ending their episode with a typed outcome instead of an exception. Every environment runs in a
real sandbox worker."""

from __future__ import annotations

import os
import warnings

import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from fixture_envs import HANGS, PARITY  # noqa: E402
from spade_rl.archive import Archive  # noqa: E402
from spade_rl.envs.sources import UnknownEnvironment  # noqa: E402
from spade_rl.interop import gymnasium as spade_gym  # noqa: E402


def variant(name: str, old: str, new: str) -> str:
    """The parity game renamed ``name`` with ``old`` replaced by ``new`` (which must be there)."""
    assert old in PARITY
    return PARITY.replace(old, new).replace("ParityEnv", name)


RAISES = variant("RaiseEnv", "self.turn += 1", "raise RuntimeError('boom at step')")
CRASHES = variant("CrashEnv", "self.turn += 1", "import os; os._exit(3)")
BAD_REWARD = variant("BadRewardEnv", 'return "no", 0.0,', 'return "no", 7.5,')
BAD_TYPES = variant("BadTypesEnv", 'return "no", 0.0, False, self.turn', "return [1, 2]  #")
LOAD_RAISES = "raise ImportError('the module body fails')\n" + PARITY.replace("ParityEnv", "LoadEnv")
BAD_RESET = variant("BadResetEnv", 'return "Say something of the right length.", {}', "return 42")


@pytest.fixture
def run_dir(tmp_path):
    """A run directory whose archive holds the parity game (valid, validated with max_turns=3), a
    rejected design, and the hostile designs above (valid, so that they can be played)."""
    run = tmp_path / "run"
    run.mkdir()
    ids = {}
    with Archive(run / "archive.sqlite") as archive:
        common = {"skill": "logic", "setting": "games", "iteration": 0}
        ids["parity"] = archive.add(
            PARITY, valid=True, reason="ok", hint="Count.", env_kwargs={"max_turns": 3}, **common
        ).env_id
        ids["rejected"] = archive.add(HANGS, valid=False, reason="timeout", **common).env_id
        for name, source in (("raises", RAISES), ("crashes", CRASHES), ("bad_reward", BAD_REWARD)):
            ids[name] = archive.add(source, valid=True, reason="ok", **common).env_id
    return run, ids


def play(env, moves):
    """Play ``moves`` until the episode ends; the list of step answers."""
    answers = []
    for move in moves:
        answers.append(env.step(move))
        if answers[-1][2] or answers[-1][3]:
            break
    return answers


# -- Gymnasium's own checks -------------------------------------------------------------------------


# arithmetic is one question: a wrong first answer truncates the episode, which Gymnasium's checker takes
# for a broken environment ("truncates after 1 step"); every other reference environment passes it.
@pytest.mark.parametrize("name", [n for n in spade_gym.reference.ALL if n != "arithmetic"])
def test_check_env_passes_on_a_reference_environment(name):
    env = gymnasium.make(f"spade-rl/{name}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Gymnasium's checker warns where it does not fail: fail here
        check_env(env.unwrapped)
    env.close()


def test_check_env_passes_on_an_archive_environment(run_dir):
    run, ids = run_dir
    env = gymnasium.make("spade-rl/Archive-v0", archive=str(run), env_id=ids["parity"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    env.close()


# -- playing ----------------------------------------------------------------------------------------


def test_a_reference_environment_is_won_with_its_solution_and_closes_its_worker():
    env = gymnasium.make("spade-rl/guess")
    obs, info = env.reset(seed=3)
    assert obs.startswith("I am thinking of a whole number") and info["seed"] == 3
    assert env.observation_space.contains(obs) and env.unwrapped.hint.startswith("Use binary search")
    moves = env.unwrapped.solution()
    assert moves and all(m.startswith("\\boxed{") for m in moves)
    answers = play(env, moves)
    *_, (_, reward, terminated, truncated, last_info) = answers
    assert (reward, terminated, truncated, last_info["status"]) == (1.0, True, False, "won")
    assert [a[1] for a in answers[:-1]] == [0.0] * (len(answers) - 1)
    pid = env.unwrapped._episode._handle.worker_pid
    assert os.path.exists(f"/proc/{pid}")
    env.close()
    assert not os.path.exists(f"/proc/{pid}")  # the worker is gone with the environment
    env.close()  # twice is fine


def test_seeds_play_the_same_instance_and_unseeded_resets_follow_the_generator():
    env = spade_gym.SpadeEnv("guess")
    first, _ = env.reset(seed=11)
    assert env.reset(seed=11)[0] == first
    drawn = [env.reset()[1]["seed"] for _ in range(3)]
    env.reset(seed=11)
    assert [env.reset()[1]["seed"] for _ in range(3)] == drawn  # the same stream after the same seed
    assert len(set(drawn)) == 3
    env.close()


def test_module_id_form_and_the_make_helper():
    env = gymnasium.make("spade_rl.interop.gymnasium:spade-rl/arithmetic")
    obs, _ = env.reset(seed=0)
    assert obs
    env.close()
    env = spade_gym.make("lights", max_episode_steps=2)
    env.reset(seed=0)
    assert env.step("no move")[3] is False
    assert env.step("still no move")[3] is True  # Gymnasium's TimeLimit wrapper, through make
    env.close()


def test_archive_pool_and_file_environments_play_with_their_recorded_arguments(run_dir, tmp_path):
    run, ids = run_dir
    pool = tmp_path / "pool.jsonl"
    with Archive(run / "archive.sqlite", readonly=True) as archive:
        archive.export_jsonl(pool)
    source_file = tmp_path / "my parity.py"
    source_file.write_text(PARITY, encoding="utf-8")
    envs = [
        spade_gym.make(archive=str(run / "archive.sqlite"), env_id=ids["parity"]),
        spade_gym.make(jsonl=str(pool), env_id=ids["parity"]),
    ]
    for env in envs:
        assert env.unwrapped.entry.env_kwargs == {"max_turns": 3} and env.unwrapped.hint == "Count."
        env.reset(seed=0)
        answers = play(env, ["odd", "odd", "odd", "odd"])  # never wins at seed 0; 3 turns, then truncated
        assert [a[3] for a in answers] == [False, False, True]
        env.close()
    env = spade_gym.make(file=str(source_file), env_kwargs={"max_turns": 1})
    assert env.unwrapped.entry.name == "my_parity"
    env.reset(seed=1)
    assert env.step("x")[:3] == ("yes", 1.0, True)
    env.close()


def test_bad_actions_and_calls_out_of_order_are_the_callers_errors():
    env = spade_gym.SpadeEnv("guess")
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("50")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="an action is a str"):
        env.step(50)
    with pytest.raises(ValueError, match="at most 65536"):
        env.step("x" * 70000)
    with pytest.raises(ValueError, match="takes no options"):
        env.reset(options={"level": 3})
    for seed in (-1, 2**64, 1.5):
        with pytest.raises(ValueError, match="seed must be an integer from 0 to 2\\*\\*63 - 1"):
            env.reset(seed=seed)
    env.reset(seed=0)
    for move in env.solution():
        env.step(move)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("50")
    env.close()


# -- bad names and ids ------------------------------------------------------------------------------


def test_bad_names_and_ids_are_refused_with_what_is_allowed(run_dir, tmp_path):
    run, ids = run_dir
    refusals = [
        (lambda: spade_gym.make("chess"), "unknown environment name 'chess'; allowed names: guess"),
        (lambda: spade_gym.SpadeEnv(), "give exactly one of name"),
        (lambda: spade_gym.SpadeEnv("guess", file="x.py"), "got name, file"),
        (lambda: spade_gym.make(archive=str(run)), "archive= needs env_id="),
        (lambda: spade_gym.make(archive=str(run), env_id=999), "no environment 999 in"),
        (lambda: spade_gym.make(archive=str(run), env_id=ids["rejected"]), "rejected by validation"),
        (lambda: spade_gym.make(archive=str(run), env_id=0), "env_id must be a positive integer"),
        (lambda: spade_gym.make(archive=str(tmp_path / "nothing"), env_id=1), "no archive at"),
        (lambda: spade_gym.make(jsonl=str(tmp_path / "none.jsonl"), env_id=1), "no JSONL pool at"),
        (lambda: spade_gym.make(file=str(tmp_path / "none.py")), "no environment file at"),
        (lambda: spade_gym.make("guess", env_id=2), "env_id goes with archive= or jsonl="),
    ]
    for call, message in refusals:
        with pytest.raises(UnknownEnvironment) as caught:
            call()
        assert message in str(caught.value), str(caught.value)
    no_env = tmp_path / "plain.py"
    no_env.write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="exactly one top-level class whose name ends in 'Env'"):
        spade_gym.make(file=str(no_env))
    bad_line = tmp_path / "bad.jsonl"
    bad_line.write_text('{"format": "spade-rl-env/1"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not an environment line"):
        spade_gym.make(jsonl=str(bad_line), env_id=1)
    with pytest.raises(gymnasium.error.NameNotFound):  # Gymnasium's own registry refuses unknown ids
        gymnasium.make("spade-rl/chess")
    # Every listed reference name is registered.
    assert {f"spade-rl/{n}" for n in spade_gym.reference.ALL} <= set(gymnasium.registry)


# -- hostile environments ---------------------------------------------------------------------------


def hostile(tmp_path, source, **kwargs):
    path = tmp_path / "hostile.py"
    path.write_text(source, encoding="utf-8")
    return spade_gym.SpadeEnv(file=str(path), **kwargs)


@pytest.mark.parametrize(
    ("source", "reason", "message"),
    [
        (RAISES, "exception", "boom at step"),
        (CRASHES, "crashed", ""),
        (BAD_REWARD, "reward_out_of_range", "outside the allowed range [0.0, 1.0]"),
        (BAD_TYPES, "step_bad_type", "step() must return"),
    ],
)
def test_a_hostile_step_ends_the_episode_with_a_typed_outcome(tmp_path, source, reason, message):
    env = hostile(tmp_path, source)
    obs, _ = env.reset(seed=0)
    assert obs == "Say something of the right length."
    obs, reward, terminated, truncated, info = env.step("odd")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["error_reason"] == reason and message in info["error"], info
    assert obs.startswith(f"[the environment failed: {reason}]") and env.observation_space.contains(obs)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("odd")
    env.close()


def test_a_hanging_step_is_cut_at_the_deadline_and_the_next_reset_starts_afresh(tmp_path):
    env = hostile(tmp_path, HANGS, call_timeout_s=0.5)
    env.reset(seed=0)
    pid = env._episode._handle.worker_pid
    obs, reward, terminated, truncated, info = env.step("odd")
    assert (reward, terminated, truncated, info["error_reason"]) == (0.0, False, True, "timeout")
    assert not os.path.exists(f"/proc/{pid}")  # the hanging worker was killed
    obs, info = env.reset(seed=0)  # a new worker, a new instance
    assert obs == "Say something of the right length." and "error" not in info
    env.close()


@pytest.mark.parametrize(("source", "reason"), [(LOAD_RAISES, "load_raised"), (BAD_RESET, "reset_bad_type")])
def test_a_failed_reset_returns_the_error_and_the_next_step_ends_the_episode(tmp_path, source, reason):
    env = hostile(tmp_path, source)
    obs, info = env.reset(seed=0)
    assert info["error_reason"] == reason and obs.startswith(f"[the environment failed: {reason}]")
    obs, reward, terminated, truncated, info = env.step("anything")
    assert (reward, terminated, truncated, info["error_reason"]) == (0.0, False, True, reason)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("anything")
    env.close()


def test_archived_hostile_environments_end_cleanly_through_gymnasium_make(run_dir):
    run, ids = run_dir
    for name in ("raises", "crashes", "bad_reward"):
        env = gymnasium.make("spade-rl/Archive-v0", archive=str(run), env_id=ids[name])
        env.reset(seed=0)
        *_, truncated, info = env.step("odd")
        assert truncated and info["error_reason"], info
        env.close()
