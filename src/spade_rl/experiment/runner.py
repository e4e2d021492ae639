"""Run an experiment: every arm with every seed, one after another, evaluated at the start and the end.

    experiment = load_experiment("experiments/ci-tiny.toml")
    outcome = run_experiment(experiment, Path("runs/experiments/ci-tiny"), progress=print)
    outcome.comparison_md, outcome.figure             # comparison.md and curves.png in that folder

The experiment folder holds::

    experiment.json                  the resolved experiment (every arm's configuration, per seed)
    start/<key>.json                 the evaluation of the starting model (arms that start from the
                                     same model and are evaluated the same way share it)
    arms/<arm>/seed-<s>/             the run directory of that arm and seed (spade-rl run's layout)
    arms/<arm>/seed-<s>/done.json    training finished: iterations, seconds, what stopped it
    arms/<arm>/seed-<s>/end-eval.json    the evaluation after training
    comparison.json, comparison.md, curves.png

Running it again on the same folder resumes: finished arms are not run again, an interrupted arm
continues from its last checkpoint (``SelfPlay(resume=True)``), and evaluations already written are
kept. A folder that holds a different experiment (any arm's configuration, the seeds, the budget or
the evaluation differ) is refused. With a wall-time budget, the seconds of training already spent
are read back from the run's metrics (``time/iteration_s``), so a resumed arm gets only what is left.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spade_rl.experiment.spec import Arm, Experiment, ExperimentError, start_key
from spade_rl.loop.config import RunConfig

log = logging.getLogger(__name__)

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


@dataclass
class Outcome:
    folder: Path
    records: list[RunRecord]
    comparison: dict
    comparison_json: Path
    comparison_md: Path
    figure: Path | None
    warnings: list[str] = field(default_factory=list)


def run_experiment(experiment: Experiment, folder: Path, progress: Progress | None = None) -> Outcome:
    """Run (or resume) ``experiment`` in ``folder`` and write its comparison and figure."""
    from spade_rl.experiment.compare import build_comparison, write_comparison
    from spade_rl.experiment.figure import plot_curves

    say = progress or (lambda message: log.info("%s", message))
    folder = Path(folder)
    _claim(folder, experiment)
    if experiment.placement.kind == "ray":
        from spade_rl.experiment.on_ray import run_arms_on_ray

        records = run_arms_on_ray(experiment, folder, say)
    else:
        runs = [(arm, seed) for arm in experiment.arms for seed in experiment.seeds]
        records = [_run_arm(experiment, arm, seed, folder, say) for arm, seed in runs]
    comparison = build_comparison(experiment, records)
    json_path, md_path = write_comparison(comparison, folder)
    warnings: list[str] = []
    figure: Path | None = folder / "curves.png"
    try:
        plot_curves(records, figure, title=f"{experiment.name}: training curves")
    except ImportError:
        warnings.append("no figure: matplotlib is not installed (pip install 'spade-rl[report]')")
        figure = None
    say(f"comparison: {md_path}")
    return Outcome(folder, records, comparison, json_path, md_path, figure, warnings)


def _claim(folder: Path, experiment: Experiment) -> None:
    """Write the resolved experiment into a new folder, or check that an existing folder holds this one."""
    resolved = json.loads(json.dumps(experiment.resolved()))
    stored = folder / "experiment.json"
    if stored.exists():
        try:
            old = json.loads(stored.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ExperimentError(f"{stored} cannot be read ({exc}); pick another folder") from None
        old = _upgrade_stored(old)
        added = _added_keys(old, resolved)
        if _without(resolved, added) != old:
            differences = ", ".join(_differences(old, _without(resolved, added))[:5])
            raise ExperimentError(
                f"{folder} holds a different experiment (it differs in {differences}); "
                "pick another --out folder, or remove this one to start again"
            )
        if added:
            # Keys this release added, at the values the file gives them (their defaults, since the
            # stored experiment could not name them): the same experiment, written by an older release.
            names = sorted({".".join(key[3:] if key[0] == "arms" else key) for key in added})
            log.warning(
                "%s was written by an earlier release; settings added since, at their defaults: %s",
                stored,
                ", ".join(names[:12]) + (" ..." if len(names) > 12 else ""),
            )
        return
    if folder.exists() and any(folder.iterdir()):
        raise ExperimentError(f"{folder} is not empty and holds no experiment; pick another --out folder")
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(stored, resolved)


def _upgrade_stored(old: dict) -> dict:
    """A stored experiment with the configuration keys and values renamed since under today's names."""
    from spade_rl.configdata import upgrade_renamed
    from spade_rl.loop.config import RENAMED_KEYS, RENAMED_VALUES

    arms = old.get("arms")
    if not isinstance(arms, dict):
        return old
    upgraded = {}
    for arm, seeds in arms.items():
        if not isinstance(seeds, dict):
            return old
        upgraded[arm] = {}
        for seed, config in seeds.items():
            if not isinstance(config, dict):
                return old
            try:
                upgraded[arm][seed], _ = upgrade_renamed(config, RENAMED_KEYS, RENAMED_VALUES)
            except Exception:  # noqa: BLE001 - a malformed stored file is compared as it is (and differs)
                return old
    return {**old, "arms": upgraded}


def _added_keys(old: object, new: object, where: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of keys of tables in ``new`` that the same tables of ``old`` do not have."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return []
    found = []
    for key, value in new.items():
        path = (*where, key)
        if key not in old:
            found.append(path)
        else:
            found += _added_keys(old[key], value, path)
    return found


def _without(data: dict, keys: list[tuple[str, ...]]) -> dict:
    """``data`` without the keys at ``keys`` (paths; a deep copy)."""
    import copy

    data = copy.deepcopy(data)
    for key in keys:
        *parents, last = key
        table = data
        for part in parents:
            table = table[part]
        del table[last]
    return data


def _differences(old: object, new: object, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += _differences(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return found
    return [] if old == new else [where or "the whole file"]


def _run_arm(experiment: Experiment, arm: Arm, seed: int, folder: Path, say: Progress) -> RunRecord:
    from spade_rl.loop.run import SelfPlay  # torch and trl load here

    config = arm.config(seed, experiment.evaluation)
    run_dir = folder / "arms" / arm.name / f"seed-{seed}"
    start_path = folder / "start" / f"{start_key(config, experiment.evaluation)}.json"
    done_path, end_path = run_dir / "done.json", run_dir / "end-eval.json"
    label = f"arm {arm.name}, seed {seed}"
    if done_path.exists() and end_path.exists() and start_path.exists():
        say(f"{label}: finished earlier, not run again")
        return _record(arm.name, seed, run_dir, start_path, end_path)
    resume = (run_dir / "config.json").exists()
    say(f"{label}: {'resuming' if resume else 'starting'} in {run_dir}")
    with SelfPlay(config, run_dir, resume=resume) as run:
        if not start_path.exists():
            say(f"{label}: evaluating the starting model")
            if run.next_iteration == 1:  # nothing trained yet: the run's policy is the starting model
                start = run.evaluate(experiment.evaluation, model=_model_name(config) + " (start)")
            else:
                start = _evaluate_start(config, experiment)
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
            _write_json(done_path, done)
        if not end_path.exists():
            iterations = json.loads(done_path.read_text())["iterations"]
            say(f"{label}: evaluating after {iterations} iterations")
            end = run.evaluate(
                experiment.evaluation,
                model=f"{_model_name(config)} ({arm.name}, seed {seed}, {iterations} it.)",
            )
            end.write(end_path)
    return _record(arm.name, seed, run_dir, start_path, end_path)


def _evaluate_start(config: RunConfig, experiment: Experiment):
    """The starting model evaluated on its own (when the arm that needs it has already trained): the
    policy as the run builds it before its first iteration, warm-up included (from its cache)."""
    from spade_rl.corpus import Corpus
    from spade_rl.loop.run import evaluate_policy
    from spade_rl.loop.warmup import warm_up
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


def _record(arm: str, seed: int, run_dir: Path, start_path: Path, end_path: Path) -> RunRecord:
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


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
