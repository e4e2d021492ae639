"""One-step sandbox jobs: a job that kills its worker costs only itself; a broken runner is an error."""

from __future__ import annotations

import textwrap

import pytest

from spade_rl.evaluate._sandbox_jobs import Job, SandboxJobError, run_jobs, step_value
from spade_rl.sandbox import CallResult, Sandbox, SandboxConfig, Status

RUNNER = textwrap.dedent(
    """
    import os

    class EchoEnv:
        def __init__(self, tag=""):
            self.tag = tag

        def reset(self, seed=None):
            return "ready", {}

        def step(self, action):
            if action == "loop":
                while True:
                    pass
            if action == "die":
                os._exit(3)
            return f"{self.tag}{action}", 1.0, True, False, {"pid": os.getpid()}
    """
)


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2)) as p:
        yield p


def test_a_job_that_kills_its_worker_costs_only_itself(pool):
    actions = ["a", "loop", "b", "c", "die", "d", "e"]
    results = run_jobs(pool, RUNNER, [Job(a, {"tag": "x-"}) for a in actions], timeout_s=1.0, batch=7)
    assert [r.status for r in results] == [
        Status.OK,
        Status.TIMEOUT,
        Status.OK,
        Status.OK,
        Status.CRASHED,
        Status.OK,
        Status.OK,
    ]
    assert [step_value(r)[0] for r in results if r.ok] == ["x-a", "x-b", "x-c", "x-d", "x-e"]


def test_fresh_jobs_each_get_a_new_interpreter(pool):
    results = run_jobs(pool, RUNNER, [Job(str(i)) for i in range(5)], timeout_s=2.0, fresh=True, batch=3)
    pids = [step_value(r)[2]["pid"] for r in results]
    assert len(set(pids)) == 5


def test_a_runner_that_does_not_load_is_an_error(pool):
    with pytest.raises(SandboxJobError, match="could not load the evaluation runner"):
        run_jobs(pool, "import no_such_module_here\nclass XEnv: pass\n", [Job("a")], timeout_s=1.0)
    with pytest.raises(ValueError, match="batch"):
        run_jobs(pool, RUNNER, [Job("a")], timeout_s=1.0, batch=0)


def test_step_value_checks_every_type():
    ok = CallResult(Status.OK, ["obs", 1.0, True, False, {}])
    assert step_value(ok) == ("obs", 1.0, {})
    for value in (None, ["obs", 1.0, True, False], [1, 1.0, True, False, {}], ["o", "1", True, False, {}]):
        assert step_value(CallResult(Status.OK, value)) is None
    assert step_value(CallResult(Status.TIMEOUT)) is None
