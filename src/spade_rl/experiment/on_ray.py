"""The arms of an experiment side by side on a Ray cluster (``placement = "ray"``).

Each arm with each seed is one Ray task asking for ``arm_cpus`` CPUs and ``arm_gpus`` GPUs; it runs
the same code as an arm run in turn (:func:`spade_rl.experiment.arm_run.run_arm`), in the experiment
folder, which must therefore be on a file system every node shares. The start evaluations go first,
one task per distinct starting model, so arms that share one do not compute it twice. The driver
keeps nothing an arm needs: a task that dies with its node is run again by Ray (``max_retries``) and
resumes from the arm's last checkpoint; an arm that fails is reported after the others have finished,
and running the experiment again resumes only what is unfinished.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from spade_rl.experiment.spec import Experiment, ExperimentError, start_key

if TYPE_CHECKING:
    from spade_rl.experiment.arm_run import Progress, RunRecord

log = logging.getLogger(__name__)

NODE_RETRIES = 2  # times Ray runs a task again after its worker or node died (not after an error)


def run_arms_on_ray(experiment: Experiment, folder: Path, say: Progress) -> list[RunRecord]:
    """Run every (arm, seed) of ``experiment`` as Ray tasks; the records in the file's order."""
    try:
        import ray
    except ImportError:
        raise ExperimentError(
            'placement = "ray" needs Ray: pip install -e ".[ray]" on this machine and on every node'
        ) from None
    placement = experiment.placement
    joined = False
    if not ray.is_initialized():
        try:
            ray.init(address=placement.ray_address, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ExperimentError(
                f"no Ray cluster at {placement.ray_address!r} ({exc}); start one (ray start --head) or set "
                "experiment.ray_address"
            ) from None
        joined = True
    try:
        resources = {"num_cpus": placement.arm_cpus, "num_gpus": placement.arm_gpus}
        _check_fits(ray, placement.arm_cpus, placement.arm_gpus)
        start_task = ray.remote(max_retries=NODE_RETRIES, **resources)(_start_evaluation)
        arm_task = ray.remote(max_retries=NODE_RETRIES, **resources)(_arm)
        folder = folder.resolve()

        starts = {}
        for arm in experiment.arms:
            for seed in experiment.seeds:
                key = start_key(arm.config(seed, experiment.evaluation), experiment.evaluation)
                if key not in starts and not (folder / "start" / f"{key}.json").exists():
                    starts[key] = start_task.remote(experiment, arm.name, seed, str(folder))
        if starts:
            say(f"evaluating {len(starts)} starting model(s) on the Ray cluster")
            _gather(ray, {ref: f"start evaluation {key}" for key, ref in starts.items()}, say)

        refs = {}
        for arm in experiment.arms:
            for seed in experiment.seeds:
                refs[arm_task.remote(experiment, arm.name, seed, str(folder))] = (arm.name, seed)
        say(f"{len(refs)} arm run(s) submitted to the Ray cluster ({placement.describe()})")
        records = _gather(ray, {ref: f"arm {a}, seed {s}" for ref, (a, s) in refs.items()}, say)
        return [records[ref] for ref in refs]
    finally:
        if joined:
            ray.shutdown()


def _check_fits(ray, cpus: float, gpus: float) -> None:
    """Refuse at once an arm that no node could hold (Ray would wait for one forever)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    fits = any(n["Resources"].get("CPU", 0) >= cpus and n["Resources"].get("GPU", 0) >= gpus for n in nodes)
    if not fits:
        largest = ", ".join(
            f"{n['Resources'].get('CPU', 0):g} CPU / {n['Resources'].get('GPU', 0):g} GPU" for n in nodes
        )
        raise ExperimentError(
            f"no node of the Ray cluster has {cpus:g} CPU and {gpus:g} GPU for an arm (its nodes: "
            f"{largest or 'none'}); lower experiment.arm_cpus / arm_gpus or add nodes"
        )


def _gather(ray, labels: dict, say: Progress) -> dict:
    """Wait for every task; say each as it ends. Failures are raised together once all have ended."""
    results, failures = {}, []
    pending = list(labels)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ref = done[0]
        try:
            results[ref] = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a task's error is reported with the others'
            cause = getattr(exc, "cause", None) or exc
            failures.append(f"{labels[ref]}: {type(cause).__name__}: {cause}")
            say(f"{labels[ref]}: failed ({type(cause).__name__}: {cause})")
            continue
        where = getattr(results[ref], "where", "")
        say(f"{labels[ref]}: finished" + (f" ({where})" if where else ""))
    if failures:
        raise ExperimentError(
            f"{len(failures)} of {len(labels)} task(s) failed on the Ray cluster: "
            + "; ".join(failures)
            + ". What finished is kept: run the same command again to resume the rest."
        )
    return results


# --- inside the tasks -------------------------------------------------------------------------------------
def _folder_here(folder: str) -> Path:
    path = Path(folder)
    if not (path / "experiment.json").exists():
        raise ExperimentError(
            f"the experiment folder {folder} is not visible on node {socket.gethostname()}: "
            "give --out a folder on a file system that every node shares"
        )
    return path


def _start_evaluation(experiment: Experiment, arm_name: str, seed: int, folder: str) -> None:
    from spade_rl.experiment.arm_run import evaluate_start

    path = _folder_here(folder)
    config = experiment.arm(arm_name).config(seed, experiment.evaluation)
    target = path / "start" / f"{start_key(config, experiment.evaluation)}.json"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        evaluate_start(config, experiment).write(target)


def _arm(experiment: Experiment, arm_name: str, seed: int, folder: str) -> RunRecord:
    from spade_rl.experiment.arm_run import run_arm

    path = _folder_here(folder)
    label = f"arm {arm_name}, seed {seed}"

    def say(message: str) -> None:
        print(message, flush=True)  # Ray forwards a task's output to the driver, prefixed with its node

    record = run_arm(experiment, experiment.arm(arm_name), seed, path, say)
    log.info("%s finished (%s)", label, record.where)
    return record
