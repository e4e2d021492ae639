"""placement = "ray": the arms of an experiment side by side as tasks on a Ray cluster.

A loopback cluster (a head without CPUs and two worker nodes of one CPU each, all on 127.0.0.1) runs a
two-arm experiment with the tiny random model; each arm asks for one CPU, so the two arms run at the
same time on different nodes, in processes that are not this one, and the comparison is the one an
in-turn run writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("ray")

from spade_rl.experiment import ExperimentError, load_experiment, run_experiment
from spade_rl.testing.loopback_cluster import LoopbackCluster

BODY = """
[experiment]
iterations = 1
placement = "ray"
arm_cpus = {cpus}
overrides = [
    "policy.model='tiny-random'",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=8",
    "design.max_new_tokens=32",
    "pool.reference=['arithmetic']",
]
[eval]
suites = ["envs"]
limit = 1
max_new_tokens = 8
options = {{envs = {{envs = ['guess'], max_turns = 1}}}}
[arms.fixed-pool]
overrides = ["designer.source='none'"]
[arms.spade]
"""


@pytest.fixture(scope="module")
def cluster():
    with LoopbackCluster(workers=2, cpus_per_node=1) as c:
        yield c


def experiment(folder: Path, cpus: float = 1):
    path = folder / "exp.toml"
    path.write_text(BODY.format(cpus=cpus))
    return load_experiment(path)


@pytest.mark.slow
def test_arms_run_side_by_side_on_the_cluster_nodes(cluster, tmp_path):
    messages: list[str] = []
    outcome = run_experiment(experiment(tmp_path), tmp_path / "out", progress=messages.append)
    assert [(r.arm, r.seed, r.iterations) for r in outcome.records] == [("fixed-pool", 0, 1), ("spade", 0, 1)]
    nodes = set()
    for record in outcome.records:
        done = json.loads((record.run_dir / "done.json").read_text())
        assert done["where"] == record.where and "ray node" in record.where
        assert f"pid {os.getpid()} " not in record.where  # trained in a Ray worker, not in this process
        nodes.add(record.where.rsplit("ray node ", 1)[1])
        assert record.end_path.exists() and record.start_path.exists()
    assert nodes == set(cluster.node_ids())  # one CPU per node and per arm: one arm on each node
    assert len(list((tmp_path / "out" / "start").glob("*.json"))) == 1  # one shared start evaluation
    assert any(m.startswith("evaluating 1 starting model") for m in messages)
    assert any(m.startswith("2 arm run(s) submitted to the Ray cluster") for m in messages)
    comparison = json.loads(outcome.comparison_json.read_text())
    assert [row["arm"] for row in comparison["suites"]["envs"]["rows"]] == ["fixed-pool", "spade"]
    assert outcome.figure is not None and outcome.figure.exists()

    # Run again: nothing is trained twice, the records come back from the folder.
    again = run_experiment(experiment(tmp_path), tmp_path / "out", progress=messages.append)
    assert [r.where for r in again.records] == [r.where for r in outcome.records]


@pytest.mark.slow
def test_an_arm_no_node_can_hold_is_refused_before_anything_runs(cluster, tmp_path):
    with pytest.raises(ExperimentError, match=r"no node of the Ray cluster has 4 CPU and 0 GPU for an arm"):
        run_experiment(experiment(tmp_path, cpus=4), tmp_path / "out")
    assert not (tmp_path / "out" / "arms").exists() and not (tmp_path / "out" / "start").exists()
