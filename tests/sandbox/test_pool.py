"""The pool's behaviour with well-behaved and misbehaving (not hostile) environments."""

from __future__ import annotations

import os
import textwrap

import pytest

from spade_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable, Status

COUNTER = textwrap.dedent(
    """
    import random

    class CounterEnv:
        def __init__(self, max_turns=3, start=0):
            self.max_turns = max_turns
            self.start = start

        def reset(self, seed=None):
            self.turn = 0
            self.value = self.start + random.Random(seed).randint(0, 9)
            return f"value {self.value}", {"seed": seed}

        def step(self, action):
            self.turn += 1
            if action == "raise":
                raise ValueError("asked to raise")
            if action == "print":
                print("hello from the environment")
            if action == "sleep":
                while True:
                    pass
            self.value += 1
            done = self.turn >= self.max_turns
            return f"value {self.value}", 1.0 if done else 0.0, done, False, {"turn": self.turn}

        def solution(self):
            return ["up"] * self.max_turns
    """
)


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=1.0)) as p:
        yield p


def open_ok(pool, source=COUNTER, **kwargs):
    opened = pool.open(source, kwargs=kwargs)
    assert opened.ok, opened
    return opened.value


def test_reset_step_close_round_trip(pool):
    env = open_ok(pool, start=100)
    assert env.class_name == "CounterEnv"
    first = env.reset(seed=3)
    assert first.ok and first.value[0].startswith("value 10") and first.value[1] == {"seed": 3}
    result = env.step("up")
    assert result.status is Status.OK
    _, reward, terminated, truncated, info = result.value
    assert (reward, terminated, truncated, info) == (0.0, False, False, {"turn": 1})
    assert env.close().ok
    closed = env.step("up")
    assert closed.status is Status.EXCEPTION and closed.reason == "closed"


def test_same_source_shares_workers_and_seeds_replay(pool):
    envs = [open_ok(pool) for _ in range(6)]
    assert len({e.worker_pid for e in envs}) <= 2  # the warm workers, nothing spawned per episode
    firsts = [e.reset(seed=7).value for e in envs]
    assert all(f == firsts[0] for f in firsts)
    for env in envs:
        env.close()


def test_different_sources_never_share_a_worker(pool):
    a = open_ok(pool)
    b = open_ok(pool, COUNTER.replace("CounterEnv", "OtherCounterEnv"))
    assert a.worker_pid != b.worker_pid
    a.close()
    b.close()


def test_exception_is_a_typed_result_with_traceback(pool):
    env = open_ok(pool)
    env.reset(0)
    result = env.step("raise")
    assert result.status is Status.EXCEPTION
    assert result.error_type == "ValueError" and "asked to raise" in result.error
    assert "step" in result.traceback
    env.close()


def test_printed_output_is_captured(pool):
    env = open_ok(pool)
    env.reset(0)
    result = env.step("print")
    assert result.ok and "hello from the environment" in result.output
    env.close()


def test_timeout_kills_worker_and_siblings_are_lost(pool):
    victim, sibling = open_ok(pool), open_ok(pool)
    victim.reset(0)
    sibling.reset(0)
    same_worker = victim.worker_pid == sibling.worker_pid
    result = victim.step("sleep")
    assert result.status is Status.TIMEOUT and result.elapsed_s >= 1.0
    with pytest.raises(ProcessLookupError):
        os.kill(victim.worker_pid, 0)
    if same_worker:
        assert sibling.step("up").status is Status.WORKER_LOST
    victim.close()
    sibling.close()
    fresh = open_ok(pool)
    assert fresh.reset(0).ok
    fresh.close()


def test_call_many_keeps_order_across_workers(pool):
    envs = [open_ok(pool, start=i * 100) for i in range(4)]
    results = pool.call_many([(e, "reset", {"seed": 0}) for e in envs])
    values = [int(r.value[0].split()[1]) for r in results]
    assert [v // 100 for v in values] == [0, 1, 2, 3]
    steps = pool.call_many([(e, "step", {"action": "up"}) for e in envs] * 2)
    assert [r.value[4]["turn"] for r in steps] == [1, 1, 1, 1, 2, 2, 2, 2]
    for env in envs:
        env.close()


def test_fresh_workers_are_distinct_within_one_batch(pool):
    used = open_ok(pool)
    opened = pool.open_many([(COUNTER, None)] * 3, fresh_worker=True)
    assert all(o.ok for o in opened), opened
    pids = [o.value.worker_pid for o in opened]
    assert len(set(pids)) == 3 and used.worker_pid not in pids
    for env in [used, *(o.value for o in opened)]:
        env.close()


def test_worker_recycled_after_episode_budget():
    with Sandbox(SandboxConfig(pool_size=1, episodes_per_worker=2)) as pool:
        first = [open_ok(pool) for _ in range(2)]
        pids = {e.worker_pid for e in first}
        for env in first:
            env.close()
        later = open_ok(pool)
        assert later.worker_pid not in pids
        later.close()


def test_worker_has_empty_environment(pool):
    source = COUNTER.replace(
        'return f"value {self.value}", {"seed": seed}',
        "import os\n        return repr(sorted(os.environ)), {}",
    )
    env = open_ok(pool, source)
    assert env.reset(0).value[0] == repr(["LANG", "PATH"])
    env.close()


def test_load_failures_are_typed(pool):
    syntax = pool.open("class BrokenEnv(:\n    pass\n")
    assert syntax.status is Status.EXCEPTION and syntax.reason == "syntax_error"
    none = pool.open("x = 1\n")
    assert none.reason == "no_env_class"
    body = pool.open("raise RuntimeError('module body')\nclass AEnv:\n    pass\n")
    assert body.reason == "load_raised" and "module body" in body.error
    init = pool.open("class AEnv:\n    def __init__(self):\n        raise KeyError('init')\n")
    assert init.reason == "init_raised"


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid layer only applies to a pool started as root")
def test_missing_required_layer_refuses_to_run():
    # A uid that setresuid treats as "unchanged" leaves the worker root: the uid layer fails.
    config = SandboxConfig(pool_size=1, unprivileged_uid=0xFFFFFFFF, unprivileged_gid=0xFFFFFFFF)
    with pytest.raises(SandboxUnavailable, match="uid"):
        with Sandbox(config):
            pass


def test_required_bwrap_missing_or_working():
    from spade_rl.sandbox.doctor import bwrap_status

    ok, _ = bwrap_status()
    config = SandboxConfig(pool_size=1, layers={"bwrap": "required"})
    if not ok:
        with pytest.raises(SandboxUnavailable, match="bwrap"):
            Sandbox(config)
        return
    with Sandbox(config) as pool:
        env = open_ok(pool)
        assert env.reset(0).ok
        env.close()


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="allowed"):
        SandboxConfig(layers={"landlock": "maybe"})
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        SandboxConfig(layers={"apparmor": "required"})
    with pytest.raises(ValueError, match="call_timeout_s"):
        SandboxConfig(call_timeout_s=0)
    assert SandboxConfig(layers={"seccomp": "optional"}).layers["landlock"] == "required"


def test_the_names_of_earlier_releases_still_import_with_a_warning():
    import spade_rl.sandbox as sandbox_package

    with pytest.warns(FutureWarning, match=r"SandboxPool is deprecated: it is called Sandbox now"):
        assert sandbox_package.SandboxPool is sandbox_package.Sandbox
    with pytest.warns(FutureWarning, match=r"PoolExhausted is deprecated: it is called SandboxFull now"):
        assert sandbox_package.PoolExhausted is sandbox_package.SandboxFull
    with pytest.raises(AttributeError):
        sandbox_package.NoSuchName  # noqa: B018
