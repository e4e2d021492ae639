"""One arm of an experiment with one seed: trained (or resumed), evaluated at the start and the end.

    record = run_arm(experiment, experiment.arm("spade"), 0, folder, print)

The same code runs an arm in turn (:func:`spade_rl.experiment.runner.run_experiment`) and as a Ray task
(:mod:`spade_rl.experiment.on_ray`); the folder's layout is in :mod:`spade_rl.experiment.runner`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spade_rl.experiment.spec import Arm, Experiment, start_key
from spade_rl.loop.config import RunConfig

Progress = Callable[[str], None]


@dataclass
class RunRecord:
    """One arm with one seed, finished: where it ran, how far, and its two evaluations."""

    arm: str
    seed: int
    run_dir: Path
    iterations: int
    train_seconds: float
    stopped_by: str  # "iterations" or "wall_time"
    start_path: Path
    end_path: Path
    where: str = ""  # the host and process that trained it (and the Ray node, on a cluster)


def run_paths(
    experiment: Experiment, arm: Arm, seed: int, folder: Path
) -> tuple[RunConfig, Path, Path, Path, Path]:
    """An arm's configuration for ``seed`` and where its run keeps its files: the run directory, the start
    evaluation it shares with the arms of the same starting model, ``done.json`` and ``end-eval.json``."""
    config = arm.config(seed, experiment.evaluation)
    run_dir = folder / "arms" / arm.name / f"seed-{seed}"
    start_path = folder / "start" / f"{start_key(config, experiment.evaluation)}.json"
    return config, run_dir, start_path, run_dir / "done.json", run_dir / "end-eval.json"


def run_arm(experiment: Experiment, arm: Arm, seed: int, folder: Path, say: Progress) -> RunRecord:
    from spade_rl.loop.run import SelfPlay  # torch loads here

    config, run_dir, start_path, done_path, end_path = run_paths(experiment, arm, seed, folder)
    label = f"arm {arm.name}, seed {seed}"
    if done_path.exists() and end_path.exists() and start_path.exists():
        say(f"{label}: finished earlier, not run again")
        return arm_record(arm.name, seed, run_dir, start_path, end_path)
    resume = (run_dir / "config.json").exists()
    say(f"{label}: {'resuming' if resume else 'starting'} in {run_dir}")
    with SelfPlay(config, run_dir, resume=resume) as run:
        if not start_path.exists():
            say(f"{label}: evaluating the starting model")
            if run.next_iteration == 1:  # nothing trained yet: the run's policy is the starting model
                start = run.evaluate(experiment.evaluation, model=_model_name(config) + " (start)")
            else:
                start = evaluate_start(config, experiment)
            start.write(start_path)
        if not done_path.exists():
            spent, budget = _train_seconds(run_dir), experiment.budget
            stopped_by = "iterations"
            if budget.wall_time_s > 0 and spent >= budget.wall_time_s:
                stopped_by = "wall_time"
            else:
                for metrics in run.iterations():
                    spent += metrics.get("time/iteration_s") or 0.0
                    say(f"{label}: iteration {metrics['iteration']} ({spent:.0f} s of training)")
                    if budget.wall_time_s > 0 and spent >= budget.wall_time_s:
                        stopped_by = "wall_time"
                        break
            run.save_checkpoint()
            done = {
                "iterations": run.next_iteration - 1,
                "train_seconds": spent,
                "stopped_by": stopped_by,
                "where": _where(),
            }
            write_json(done_path, done)
        if not end_path.exists():
            iterations = json.loads(done_path.read_text())["iterations"]
            say(f"{label}: evaluating after {iterations} iterations")
            end = run.evaluate(
                experiment.evaluation,
                model=f"{_model_name(config)} ({arm.name}, seed {seed}, {iterations} it.)",
            )
            end.write(end_path)
    return arm_record(arm.name, seed, run_dir, start_path, end_path)


def evaluate_start(config: RunConfig, experiment: Experiment):
    """The starting model evaluated on its own (when the arm that needs it has already trained): the
    policy as the run builds it before its first iteration, warm-up included (from its cache)."""
    from spade_rl.corpus import Corpus
    from spade_rl.designer.warmup import warm_up
    from spade_rl.loop.run import evaluate_policy
    from spade_rl.policy import make_policy
    from spade_rl.sandbox import Sandbox

    policy = make_policy(config.policy)
    try:
        warm_up(policy, config.warmup, config.design, Corpus.from_config(config.corpus))
        with Sandbox(config.sandbox) as sandbox:
            return evaluate_policy(
                policy,
                sandbox,
                experiment.evaluation,
                _model_name(config) + " (start)",
                config.policy.backend,
            )
    finally:
        policy.close()


def arm_record(arm: str, seed: int, run_dir: Path, start_path: Path, end_path: Path) -> RunRecord:
    """The record of a finished run, read back from its ``done.json``."""
    done = json.loads((run_dir / "done.json").read_text())
    return RunRecord(
        arm,
        seed,
        run_dir,
        done["iterations"],
        done["train_seconds"],
        done["stopped_by"],
        start_path,
        end_path,
        done.get("where", ""),
    )


def _where() -> str:
    """This host and process, and the Ray node when this runs in a Ray task."""
    where = f"{socket.gethostname()} pid {os.getpid()}"
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        try:
            where += f" ray node {ray.get_runtime_context().get_node_id()}"
        except Exception:  # noqa: BLE001 - a driver outside a task has a node too; this is only a label
            pass
    return where


def _train_seconds(run_dir: Path) -> float:
    """Seconds of training recorded in the run's metrics (evaluations are not counted)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0.0
    total = 0.0
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            total += json.loads(line).get("time/iteration_s") or 0.0
    return total


def _model_name(config: RunConfig) -> str:
    return config.policy.model or "smollm2-135m"


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
