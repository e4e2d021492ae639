"""The executor interface without Ray: the local executor, its configuration, and no Ray on its path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spade_rl.design import ValidationSettings, validate_source
from spade_rl.envs import reference
from spade_rl.executor import (
    Executor,
    ExecutorConfig,
    LocalExecutor,
    apply_judge,
    as_executor,
    make_executor,
)
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.policy import FakePolicy, default_tokenizer
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import Sandbox, SandboxConfig

DESIGNS = Path(__file__).parents[1] / "design" / "designs"
SETTINGS = ValidationSettings(call_timeout_s=1.0)


@pytest.fixture(scope="module")
def executor():
    with LocalExecutor(SandboxConfig(pool_size=2, call_timeout_s=1.0)) as ex:
        yield ex


def test_the_default_is_local_and_the_local_path_never_imports_ray():
    assert load_config().executor == ExecutorConfig(kind="local")
    code = (
        "import sys\n"
        "import spade_rl.cli, spade_rl.loop.run\n"
        "from spade_rl.executor import ExecutorConfig, make_executor\n"
        "from spade_rl.design import ValidationSettings\n"
        "from spade_rl.envs import reference\n"
        "from spade_rl.sandbox import SandboxConfig\n"
        "ex = make_executor(ExecutorConfig(), SandboxConfig(pool_size=1))\n"
        "ex.start()\n"
        "[report] = ex.validate_many([(reference.source('guess'), '')], ValidationSettings())\n"
        "ex.close()\n"
        "assert report.valid, report\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_validate_many_gives_the_batterys_reports_in_order(executor):
    paths = [DESIGNS / name for name in ("valid_multi_turn.py", "nan_reward.py", "syntax_error.py")]
    sources = [p.read_text() for p in paths]
    reports = executor.validate_many([(s, "") for s in sources], SETTINGS)
    with Sandbox(SandboxConfig(pool_size=1, call_timeout_s=1.0)) as pool:
        expected = [validate_source(pool, s, SETTINGS) for s in sources]
    assert [(r.valid, r.reason, r.checks) for r in reports] == [
        (r.valid, r.reason, r.checks) for r in expected
    ]
    assert [r.reason for r in reports] == ["ok", "reward_not_finite", "syntax_error"]


@pytest.mark.slow
def test_rollouts_run_through_the_executor(executor):
    policy = FakePolicy(lambda chat: "\\boxed{50}", tokenizer=default_tokenizer())
    specs = [EpisodeSpec(reference.source("guess"), seed=s) for s in range(3)]
    episodes = run_episodes(policy, executor, specs, RolloutConfig(max_turns=2))
    assert all(e.stop_reason in ("terminated", "max_turns") for e in episodes), [e.error for e in episodes]
    assert executor.stats["calls"] > 0


def test_as_executor_wraps_a_pool_without_owning_it():
    with Sandbox(SandboxConfig(pool_size=1)) as pool:
        wrapped = as_executor(pool)
        assert isinstance(wrapped, LocalExecutor) and wrapped.sandbox is pool
        wrapped.close()  # leaves the caller's pool open
        [report] = wrapped.validate_many([(reference.source("guess"), "")], ValidationSettings())
        assert report.valid
        assert as_executor(wrapped) is wrapped and isinstance(wrapped, Executor)
    with pytest.raises(TypeError, match="expected an executor or a Sandbox"):
        as_executor("pool")


@pytest.mark.slow
def test_judge_on_the_driver_matches_the_battery():
    rejecting = ValidationSettings(judge=lambda source, hint: (False, "too easy"))
    accepting = ValidationSettings(judge=lambda source, hint: (True, ""))
    with Sandbox(SandboxConfig(pool_size=1)) as pool:
        source = reference.source("guess")
        for settings in (rejecting, accepting):
            direct = validate_source(pool, source, settings)
            later = validate_source(pool, source, ValidationSettings())
            apply_judge(later, source, "", settings)
            assert (later.valid, later.reason, later.message, later.checks) == (
                direct.valid,
                direct.reason,
                direct.message,
                direct.checks,
            )
    assert direct.checks[-1] == "judge"


def test_bad_executor_settings_are_refused_with_the_allowed_values(monkeypatch):
    with pytest.raises(
        ConfigError, match=r"executor\.kind 'cluster' is unknown; allowed: \['local', 'ray'\]"
    ):
        load_config(None, ["executor.kind='cluster'"])
    with pytest.raises(ConfigError, match=r"allowed: 'auto', 'local', 'host:port'"):
        load_config(None, ["executor.address='http://head:8265'"])
    with pytest.raises(ConfigError, match="num_actors must be at least 1"):
        load_config(None, ["executor.num_actors=0"])
    with pytest.raises(ConfigError, match="cpus_per_actor must be positive"):
        load_config(None, ["executor.cpus_per_actor=0"])
    with pytest.raises(ConfigError, match="retries must be zero or more"):
        load_config(None, ["executor.retries=-1"])
    with pytest.raises(ConfigError, match=r"unknown key executor\.actors;.*num_actors"):
        load_config(None, ["executor.actors=4"])
    config = load_config(None, ["executor.address='10.1.2.3:6379'", "executor.num_actors=8"])
    assert (config.executor.address, config.executor.num_actors) == ("10.1.2.3:6379", 8)
    for address in ("auto", "local", "head-node:6379", "ray://head:10001", "[::1]:6379"):
        assert ExecutorConfig(address=address).address == address

    import spade_rl.executor.config as executor_config

    real = executor_config.importlib.util.find_spec
    monkeypatch.setattr(
        executor_config.importlib.util, "find_spec", lambda name: None if name == "ray" else real(name)
    )
    with pytest.raises(
        ConfigError, match=r"needs Ray, which is not installed: pip install 'spade-rl\[ray\]'"
    ):
        load_config(None, ["executor.kind='ray'"])
    assert isinstance(make_executor(ExecutorConfig(), SandboxConfig()), LocalExecutor)
