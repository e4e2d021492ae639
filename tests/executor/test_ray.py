"""The Ray executor on a real multi-node Ray cluster on loopback: a head and two worker nodes, started
by this module and stopped after it.

Validation and rollouts run through Ray actors with the real sandbox (checked from inside an actor)
and the tiny model, and must give exactly what the local executor gives. Nodes are killed in the
middle of a batch: only the work in flight on them is lost (validations and openings run again
elsewhere, running episodes end as environment errors), and the executor goes on. A self-play run
with ``executor.kind = "ray"`` leaves the same archive as a local one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from fixture_envs import HANGS, PARITY, SCRIPTED, scripted_roles
from spade_rl.design import ValidationSettings
from spade_rl.envs import reference
from spade_rl.executor import ExecutorConfig, ExecutorError, LocalExecutor
from spade_rl.executor.ray_executor import RayExecutor
from spade_rl.loop.config import load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import FakePolicy, default_tokenizer, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import SandboxConfig
from spade_rl.testing.loopback_cluster import LoopbackCluster

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
DESIGNS = sorted((HERE.parent / "design" / "designs").glob("*.py"))
# One validation seed for both sides (validation draws a fresh one otherwise): the same battery on each.
# A budget of a minute: the slow environment below takes about 12 s of validation on 2 cores, near the
# default 20 s once a node's death and a retry share them.
SETTINGS = ValidationSettings(call_timeout_s=1.0, seed=20261205, total_timeout_s=60.0)
SANDBOX = SandboxConfig(pool_size=1, call_timeout_s=1.0, load_timeout_s=2.0)
WORKER_NODES = 2

SLOW = '''
import time


class Slow{n}Env:
    """Valid, but each reset takes 0.02 s: a validation (some 600 resets: the trivial policies' episodes
    and the probes of its stacked instances) lasts about 12 seconds."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        time.sleep(0.02)
        self.turn = 0
        self.count = (seed or 0) % 5  # an answer that depends on the seed (no constant answer wins)
        return f"Say the long word for yes, then {{self.count}} plus one in digits.", {{}}

    def step(self, action):
        self.turn += 1
        if action == f"affirmative{{self.count + 1}}":
            return "right", 1.0, True, False, {{}}
        return "no", 0.0, False, self.turn >= self.max_turns, {{}}

    def solution(self):
        return [f"affirmative{{self.count + 1}}"]
'''


@pytest.fixture(scope="module")
def cluster():
    with LoopbackCluster(workers=WORKER_NODES, cpus_per_node=1, object_store_mb=80) as c:
        yield c


@pytest.fixture
def make_executor(cluster):
    """Started Ray executors (two actors unless asked otherwise), closed after the test; a worker
    node killed by the test is replaced, so that every test starts with two."""
    made = []

    def make(**changes) -> RayExecutor:
        config = ExecutorConfig(**{"kind": "ray", "num_actors": 2, "actor_timeout_s": 20.0, **changes})
        executor = RayExecutor(config, SANDBOX)
        made.append(executor)
        executor.start()
        return executor

    yield make
    for executor in made:
        executor.close()
    while len(cluster.node_ids()) < WORKER_NODES:
        cluster.add_worker()


@pytest.fixture(scope="module")
def local():
    with LocalExecutor(SANDBOX) as executor:
        yield executor


@pytest.fixture(scope="module")
def tokenizer():
    return default_tokenizer()


def guesser(chat):
    """Binary search from the feedback so far (wins `guess` within 7 turns)."""
    text = " ".join(m["content"] for m in chat)
    low, high = 1, 100
    for number, direction in re.findall(r"(\d+) is too (low|high)", text):
        if direction == "low":
            low = max(low, int(number) + 1)
        else:
            high = min(high, int(number) - 1)
    return f"Halving. \\boxed{{{(low + high) // 2}}}"


def transcript(episode):
    return (
        episode.stop_reason,
        episode.error,
        episode.turns,
        episode.token_ids,
        episode.mask,
        episode.logprobs,
    )


def record_placement(executor: RayExecutor) -> list:
    """Make ``executor.open_many`` remember the handles it gives (to see which actor holds what)."""
    handles: list = []
    real = executor.open_many

    def recording(requests, timeout_s=None, fresh_worker=False):
        results = real(requests, timeout_s, fresh_worker)
        handles[:] = [r.value if r.ok else None for r in results]
        return results

    executor.open_many = recording
    return handles


# --- the sandbox inside an actor, validation and rollouts -------------------------------------------
def test_actors_spread_over_the_worker_nodes_and_keep_every_sandbox_layer(make_executor, cluster):
    executor = make_executor()
    actors = executor.actors()
    assert {a["node_id"] for a in actors} == set(cluster.node_ids())  # one actor per worker node
    assert all(a["state"] == "ready" and a["pid"] != os.getpid() for a in actors)
    for report in executor.doctor():
        assert report["error"] == "", report
        layers = {name: (mode, active) for name, mode, active, _ in report["layers"]}
        assert all(active for mode, active in layers.values() if mode == "required"), layers
        assert {"rlimits", "uid", "landlock", "seccomp"} <= {
            n for n, (m, _) in layers.items() if m == "required"
        }
        assert report["probes"] and all(stopped for _, stopped, _ in report["probes"]), report["probes"]


def test_validation_on_ray_gives_the_local_reports(make_executor, local):
    executor = make_executor()
    sources = [p.read_text() for p in DESIGNS] + [reference.source(n) for n in reference.NAMES]
    requests = [(s, "Think before you act.") for s in sources]
    remote = executor.validate_many(requests, SETTINGS)
    here = local.validate_many(requests, SETTINGS)

    def key(r):
        return (r.valid, r.reason, r.message, r.class_name, r.checks, r.solution_turns)

    assert [key(r) for r in remote] == [key(r) for r in here]
    assert {"ok", "timeout", "syntax_error", "nondeterministic"} <= {r.reason for r in remote}
    assert all(a["sandbox_calls"] > 0 for a in executor.actors())  # both actors validated
    assert executor.stats["timeouts"] >= 1 and executor.stats["actors_lost"] == 0

    judged: list[str] = []  # the judge runs here, in the driver, after the battery passed remotely

    def judge(source, hint):
        judged.append(source)
        return "class GuessEnv" not in source, "a guessing game again"

    sources = [reference.source("guess"), reference.source("maze"), DESIGNS[0].read_text()]
    settings = ValidationSettings(call_timeout_s=1.0, judge=judge)
    reports = executor.validate_many([(s, "") for s in sources], settings)
    assert [r.reason for r in reports] == ["judge_rejected", "ok", "timeout"]
    assert reports[1].checks[-1] == "judge" and judged == sources[:2]  # not asked about the invalid one


def test_rollouts_on_ray_are_the_local_rollouts(make_executor, local, tokenizer):
    executor = make_executor()
    specs = [
        EpisodeSpec(reference.source(name), seed=seed, hint="Halve the range.", use_hint=use_hint)
        for name in ("guess", "maze", "lights")
        for seed in (0, 1)
        for use_hint in (False, True)
    ]
    config = RolloutConfig(max_turns=3, max_new_tokens=12)
    model, model_tokenizer = tiny_random_model(seed=0)
    # The tiny model (real generation, log-probs and token masks), then a scripted player that wins.
    remote = run_episodes(TransformersPolicy(model, model_tokenizer), executor, specs, config, seed=3)
    here = run_episodes(TransformersPolicy(model, model_tokenizer), local, specs, config, seed=3)
    assert [transcript(e) for e in remote] == [transcript(e) for e in here]
    assert all(e.stop_reason != "env_error" for e in remote) and any(e.turns for e in remote)

    guess = [EpisodeSpec(reference.source("guess"), seed=s) for s in range(6)]
    remote = run_episodes(FakePolicy(guesser, tokenizer=tokenizer), executor, guess, RolloutConfig())
    here = run_episodes(FakePolicy(guesser, tokenizer=tokenizer), local, guess, RolloutConfig())
    assert [transcript(e) for e in remote] == [transcript(e) for e in here]
    assert all(e.won for e in remote)
    assert all(a["open_envs"] == 0 for a in executor.actors())  # every episode's instance was closed


# --- failures -----------------------------------------------------------------------------------------
def test_a_node_killed_mid_validation_loses_only_its_validation_in_flight(make_executor, cluster):
    executor = make_executor()
    requests = [(SLOW.format(n=n), "") for n in range(6)]
    victim = executor.actors()[0]
    outcome: dict = {}

    def validate():
        try:
            outcome["reports"] = executor.validate_many(requests, SETTINGS)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    worker = threading.Thread(target=validate)
    worker.start()
    deadline = time.monotonic() + 30
    while executor.actors()[0]["validations_in_flight"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # well inside its first validation (about 12 s)
    cluster.kill_node(victim["node_id"])
    worker.join(timeout=120)
    assert not worker.is_alive(), "validate_many did not return after a node died"
    assert "error" not in outcome, outcome.get("error")
    assert [r.reason for r in outcome["reports"]] == ["ok"] * len(requests)
    stats = executor.stats
    assert (stats["actors_lost"], stats["retries"]) == (1, 1)  # the one validation in flight, run again
    lost = executor.actors()[0]
    assert lost["state"] == "lost" and lost["death"].startswith(
        ("ActorDiedError", "ActorUnavailableError")
    ), lost
    assert stats["actors_started"] == 3  # a replacement was asked for (no room for it until a node joins)


def test_a_node_killed_mid_rollout_ends_only_its_episodes_and_play_goes_on(make_executor, cluster, tokenizer):
    executor = make_executor()
    handles = record_placement(executor)
    specs = [EpisodeSpec(reference.source("guess"), seed=s) for s in range(6)]

    class KillsOnTurnTwo(FakePolicy):
        calls_seen = 0

        def generate_tokens(self, prompts, settings, *, budgets=None):
            self.calls_seen += 1
            if self.calls_seen == 2:  # the first steps are done; the second turn's are about to go
                victim_actor = handles[0].actor_index
                node = next(a["node_id"] for a in executor.actors() if a["index"] == victim_actor)
                cluster.kill_node(node)
            return super().generate_tokens(prompts, settings, budgets=budgets)

    with LocalExecutor(SANDBOX) as local:
        expected = run_episodes(FakePolicy(guesser, tokenizer=tokenizer), local, specs, RolloutConfig())
    episodes = run_episodes(KillsOnTurnTwo(guesser, tokenizer=tokenizer), executor, specs, RolloutConfig())
    on_victim = [h.actor_index == handles[0].actor_index for h in handles]
    assert 0 < sum(on_victim) < len(specs)  # the episodes were spread over both actors
    for lost, got, want in zip(on_victim, episodes, expected, strict=True):
        if lost and len(want.turns) > 1:
            assert got.stop_reason == "env_error" and got.turns == want.turns[:1]
            assert got.error.startswith("step: worker_lost: the Ray actor") and "node" in got.error, got.error
        else:
            assert transcript(got) == transcript(want)
    assert any(lost and len(want.turns) > 1 for lost, want in zip(on_victim, expected, strict=True))
    assert executor.stats["envs_lost"] == sum(on_victim)

    # The run goes on with the actor left: the next batch plays whole.
    again = run_episodes(FakePolicy(guesser, tokenizer=tokenizer), executor, specs, RolloutConfig())
    assert [transcript(e) for e in again] == [transcript(e) for e in expected]
    assert executor.stats["actors_lost"] == 1


def test_openings_sent_to_a_dead_node_are_opened_elsewhere(make_executor, cluster):
    executor = make_executor()
    cluster.kill_node(executor.actors()[0]["node_id"])  # the executor does not know yet
    opened = executor.open_many([(reference.source("guess"), None)] * 4, 2.0)
    assert all(r.ok for r in opened), [r.error for r in opened]
    assert {r.value.actor_index for r in opened} == {executor.actors()[1]["index"]}
    stats = executor.stats
    assert (stats["actors_lost"], stats["retries"], stats["envs_lost"]) == (1, 2, 0)  # half went there first
    resets = executor.call_many([(r.value, "reset", {"seed": 3}) for r in opened])
    assert all(r.ok for r in resets)
    for r in opened:
        r.value.close()


def test_an_actor_that_stops_answering_is_declared_lost_and_replaced(make_executor, tokenizer):
    executor = make_executor(actor_timeout_s=2.0)
    opened = executor.open_many([(reference.source("guess"), None)] * 4, 2.0)
    handles = [r.value for r in opened]
    stuck = executor.actors()[handles[0].actor_index]
    os.kill(stuck["pid"], signal.SIGSTOP)  # alive to Ray, but it answers nothing
    try:
        results = executor.call_many([(h, "reset", {"seed": 1}) for h in handles], 1.0)
    finally:
        try:
            os.kill(stuck["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass
    for handle, result in zip(handles, results, strict=True):
        if handle.actor_index == stuck["index"]:
            assert result.reason == "worker_lost" and "did not answer within" in result.error, result
        else:
            assert result.ok, result
    # The stuck actor is killed, which frees its CPU: a replacement starts there and takes work.
    deadline = time.monotonic() + 60
    while sum(a["state"] == "ready" for a in executor.actors()) < 2 and time.monotonic() < deadline:
        [report] = executor.validate_many([(reference.source("guess"), "")], SETTINGS)
        assert report.valid
        time.sleep(0.2)
    assert sum(a["state"] == "ready" for a in executor.actors()) == 2
    for handle in handles:
        handle.close()


def test_more_actors_than_the_cluster_can_place_is_refused_clearly(make_executor):
    with pytest.raises(ExecutorError, match=r"2 of 3 Ray sandbox actors started.*Lower executor\.num_actors"):
        # long enough for the two that fit to start on a busy machine; the third never can
        make_executor(num_actors=3, start_timeout_s=20.0)


# --- the self-play loop ---------------------------------------------------------------------------------


def archive_contents(path: Path) -> dict:
    """Everything the archive holds, less the wall-clock times."""
    with sqlite3.connect(path) as db:
        envs = []
        for row in db.execute(
            "SELECT id, source_hash, hint, valid, reason, message, class_name, skill, setting, "
            "document_id, iteration, origin, metadata FROM environments ORDER BY id"
        ):
            metadata = json.loads(row[-1])
            metadata.pop("validation_seconds", None)
            metadata.pop("validation_seed", None)  # drawn anew by each validation
            envs.append((*row[:-1], metadata))
        return {
            "environments": envs,
            "lineage": db.execute("SELECT * FROM lineage ORDER BY env_id, position").fetchall(),
            "proposals": db.execute(
                "SELECT id, env_id, iteration, valid, reason, duplicate, parents FROM proposals ORDER BY id"
            ).fetchall(),
            "stats": db.execute(
                "SELECT * FROM stats ORDER BY env_id, iteration"
            ).fetchall(),  # recorded_at is the last column
        }


def test_selfplay_on_ray_leaves_the_archive_a_local_run_leaves(cluster, tmp_path):
    overrides = [
        *SCRIPTED,
        "loop.iterations=2",
        "loop.designs_per_iteration=2",
        "loop.envs_per_iteration=2",
        "loop.seed=7",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "design.max_new_tokens=2048",
        "sandbox.pool_size=1",
        "sandbox.call_timeout_s=0.5",
        "design.validation.call_timeout_s=0.5",
        "design.validation.seed=20261205",  # validation's seeds, drawn fresh otherwise: the same on both
        "train.learning_rate=1e-3",
    ]
    contents, metrics = {}, {}
    for kind in ("local", "ray"):
        model, tokenizer = tiny_random_model(seed=0)
        roles = scripted_roles(
            model, tokenizer, [f"```python\n{s}```\n<hint>Count.</hint>" for s in (PARITY, HANGS)] * 2
        )
        config = load_config(None, [*overrides, f"executor.kind='{kind}'", "executor.num_actors=2"])
        with SelfPlay(config, tmp_path / kind, **roles) as run:
            assert run.executor.kind == kind
            metrics[kind] = list(run.iterations())
        contents[kind] = archive_contents(tmp_path / kind / "archive.sqlite")
        contents[kind]["stats"] = [row[:-1] for row in contents[kind]["stats"]]
    assert contents["ray"] == contents["local"]
    assert metrics["ray"][0]["designer/reasons"] == {"ok": 1, "timeout": 1}
    assert contents["ray"]["stats"] and any(row[3] for row in contents["ray"]["environments"])
    assert all(m["executor/actors_lost"] == 0 for m in metrics["ray"])
