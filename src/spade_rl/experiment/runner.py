"""Run an experiment: every arm with every seed, one after another (seed by seed: every arm at the first seed,
then every arm at the next), evaluated at the start and the end.

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
from dataclasses import dataclass, field
from pathlib import Path

from spade_rl.experiment.arm_run import (
    Progress,
    RunRecord,
    arm_record,
    run_arm,
    run_paths,
    write_json,
)
from spade_rl.experiment.spec import ADDED_SETTINGS, Experiment, ExperimentError

log = logging.getLogger(__name__)

__all__ = ["Outcome", "Progress", "RunRecord", "compare_finished", "finished_records", "run_experiment"]


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
    """Run (or resume) ``experiment`` in ``folder`` and write its comparison and figure (also after each
    finished run, of the runs finished so far)."""
    say = progress or (lambda message: log.info("%s", message))
    if experiment.unavailable:  # before anything runs: the evaluation at every arm's start would fail
        raise ExperimentError(
            f"{experiment.path}: the evaluation cannot run here: {'; '.join(experiment.unavailable)}"
        )
    folder = Path(folder)
    _claim(folder, experiment)
    if experiment.placement.kind == "ray":
        from spade_rl.experiment.on_ray import run_arms_on_ray

        records = run_arms_on_ray(experiment, folder, say)
    else:
        # Seed by seed, every arm at each seed before the next seed: an experiment stopped part way (a
        # sitting's end, a budget) holds paired runs of every arm to compare, not all seeds of one arm.
        runs = [(arm, seed) for seed in experiment.seeds for arm in experiment.arms]
        finished: dict[tuple[str, int], RunRecord] = {}
        for arm, seed in runs:
            finished[arm.name, seed] = run_arm(experiment, arm, seed, folder, say)
            if len(finished) < len(runs):
                # What has finished so far, compared: an experiment stopped here (or grown later by more
                # seeds or arms) already has its comparison of the finished runs.
                _write_outcome(experiment, folder, _in_file_order(experiment, finished), say=None)
        records = _in_file_order(experiment, finished)
    return _write_outcome(experiment, folder, records, say)


def _in_file_order(experiment: Experiment, finished: dict[tuple[str, int], RunRecord]) -> list[RunRecord]:
    """The records of ``finished`` arm by arm, each arm's seeds in order: the comparison's order."""
    return [finished[a.name, s] for a in experiment.arms for s in experiment.seeds if (a.name, s) in finished]


def compare_finished(experiment: Experiment, folder: Path, progress: Progress | None = None) -> Outcome:
    """The comparison and figure of the runs of ``experiment`` that have finished in ``folder`` (trained
    and evaluated at the start and the end), without running anything: ``spade-rl experiment --compare``."""
    folder = Path(folder)
    if not (folder / "experiment.json").exists():
        raise ExperimentError(f"{folder} holds no experiment (no experiment.json): nothing to compare")
    _claim(folder, experiment, resuming=False)
    records = finished_records(experiment, folder)
    if not records:
        raise ExperimentError(f"no run of {experiment.name} has finished in {folder} yet: nothing to compare")
    return _write_outcome(experiment, folder, records, progress)


def finished_records(experiment: Experiment, folder: Path) -> list[RunRecord]:
    """The runs of ``experiment`` in ``folder`` that finished (done, with both evaluations), in its order."""
    records = []
    for arm in experiment.arms:
        for seed in experiment.seeds:
            _, run_dir, start_path, done_path, end_path = run_paths(experiment, arm, seed, folder)
            if done_path.exists() and end_path.exists() and start_path.exists():
                records.append(arm_record(arm.name, seed, run_dir, start_path, end_path))
    return records


def _write_outcome(
    experiment: Experiment, folder: Path, records: list[RunRecord], say: Progress | None
) -> Outcome:
    """comparison.json, comparison.md and curves.png of ``records``."""
    from spade_rl.experiment.compare import build_comparison, write_comparison
    from spade_rl.experiment.figure import plot_curves

    comparison = build_comparison(experiment, records)
    json_path, md_path = write_comparison(comparison, folder)
    warnings: list[str] = []
    figure: Path | None = folder / "curves.png"
    try:
        plot_curves(records, figure, title=f"{experiment.name}: training curves", groups=experiment.scores)
    except ImportError:
        warnings.append("no figure: matplotlib is not installed (pip install 'spade-rl[report]')")
        figure = None
    if say is not None:
        say(f"comparison: {md_path}")
    return Outcome(folder, records, comparison, json_path, md_path, figure, warnings)


def _claim(folder: Path, experiment: Experiment, resuming: bool = True) -> None:
    """Write the resolved experiment into a new folder, or check that an existing folder holds this one
    (``resuming`` False: only to compare what finished in it, which runs nothing)."""
    resolved = json.loads(json.dumps(experiment.resolved()))
    stored = folder / "experiment.json"
    if stored.exists():
        try:
            old = json.loads(stored.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ExperimentError(f"{stored} cannot be read ({exc}); pick another folder") from None
        old = _upgrade_stored(old)
        # Seeds and arms may be added (or left out) between sittings: the runs both name must be the same.
        old_common, new_common = _common_runs(old, resolved)
        added = _added_keys(old_common, new_common)
        if _without(new_common, added) != old_common:
            differences = ", ".join(_differences(old_common, _without(new_common, added))[:5])
            raise ExperimentError(
                f"{folder} holds a different experiment (it differs in {differences}); "
                "pick another --out folder, or remove this one to start again (seeds and arms may be "
                "added to an experiment; what its runs are may not change)"
            )
        _check_added_settings(folder, old_common, new_common, resuming)
        grown = _grown(old, resolved)
        if grown != old:
            new_runs = sorted(
                f"{arm}/seed-{seed}"
                for arm, seeds in grown["arms"].items()
                for seed in seeds
                if seed not in old.get("arms", {}).get(arm, {})
            )
            log.info("%s: runs added to the experiment: %s", folder, ", ".join(new_runs) or "none")
            write_json(stored, grown)
        added = [key for key in added if not _registered(key)]
        if added:
            # Keys this release added that the stored experiment could not name and whose "as before"
            # value is not registered (those are checked above): the same experiment as far as can be
            # told, resumed at the values this file gives them, which the warning shows.
            values = _added_values(new_common, added)
            shown = [f"{name} = {value}" for name, value in values.items()]
            log.warning(
                "%s was written by an earlier release; settings added since, which its runs did not name, "
                "resumed at these values: %s",
                stored,
                ", ".join(shown[:12]) + (" ..." if len(shown) > 12 else ""),
            )
        return
    if folder.exists() and any(folder.iterdir()):
        raise ExperimentError(f"{folder} is not empty and holds no experiment; pick another --out folder")
    folder.mkdir(parents=True, exist_ok=True)
    write_json(stored, resolved)


def _common_runs(old: dict, new: dict) -> tuple[dict, dict]:
    """Both resolved experiments restricted to the arms and seeds they share (``seeds`` then compared as
    that common set): what must not differ when an experiment grows by seeds or arms."""
    old_arms, new_arms = old.get("arms"), new.get("arms")
    if not (isinstance(old_arms, dict) and isinstance(new_arms, dict)):
        return old, new
    common = {
        arm: sorted(set(old_arms[arm]) & set(new_arms[arm]), key=int)
        for arm in old_arms
        if arm in new_arms and isinstance(old_arms[arm], dict) and isinstance(new_arms[arm], dict)
    }

    def restrict(data: dict, arms: dict) -> dict:
        seeds = sorted({int(seed) for kept in common.values() for seed in kept})
        runs = {arm: {seed: arms[arm][seed] for seed in kept} for arm, kept in common.items()}
        return {**data, "seeds": seeds, "arms": {arm: runs[arm] for arm in runs if runs[arm]}}

    return restrict(old, old_arms), restrict(new, new_arms)


def _grown(old: dict, new: dict) -> dict:
    """The stored experiment with the runs of ``new`` that it does not hold yet (arms, seeds) added."""
    arms = {arm: dict(seeds) for arm, seeds in old.get("arms", {}).items()}
    for arm, seeds in new.get("arms", {}).items():
        for seed, config in seeds.items():
            arms.setdefault(arm, {}).setdefault(seed, config)
    seeds = sorted({*old.get("seeds", []), *new.get("seeds", [])})
    return {**old, "seeds": seeds, "arms": arms}


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


def _setting_name(key: tuple[str, ...]) -> str:
    """The dotted name of a setting at ``key`` (a path in the resolved experiment): an arm's configuration
    key without its ``arms.<arm>.<seed>`` prefix."""
    return ".".join(key[3:] if key[0] == "arms" else key)


_MISSING = object()


def _get_path(data: object, path: tuple[str, ...]) -> object:
    """The value at ``path`` in nested tables, ``_MISSING`` where a table on the way lacks it."""
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return _MISSING
        data = data[part]
    return data


def _added_values(data: dict, added: list[tuple[str, ...]]) -> dict[str, str]:
    """Each added setting's name and the value(s) ``data`` gives it (several when arms or seeds differ)."""
    values: dict[str, list[str]] = {}
    for key in added:
        shown = json.dumps(_get_path(data, key))
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        kept = values.setdefault(_setting_name(key), [])
        if shown not in kept:
            kept.append(shown)
    return {name: " / ".join(shown) for name, shown in sorted(values.items())}


def _check_added_settings(folder: Path, old: dict, new: dict, resuming: bool) -> None:
    """Refuse to resume a stored run under a setting added since (``spec.ADDED_SETTINGS``) at another value
    than the one that behaves as the releases before it did, which is what that run ran at: the runs both
    experiments name, unless training already finished (``done.json``: it is not run again). With
    ``resuming`` False (``--compare``, nothing runs) it is a warning."""
    for arm, seeds in new.get("arms", {}).items():
        for seed, config in seeds.items():
            stored = old.get("arms", {}).get(arm, {}).get(seed)
            for path, before in ADDED_SETTINGS.items():
                value = _get_path(config, path)
                if _get_path(stored, path) is not _MISSING or value is _MISSING or value == before:
                    continue
                if (folder / "arms" / arm / f"seed-{seed}" / "done.json").exists():
                    continue
                name = ".".join(path)
                message = (
                    f"{folder} holds arm {arm}, seed {seed}, written before the setting {name} existed: it "
                    f"ran as {name} = {json.dumps(before)}, and this experiment gives it {json.dumps(value)}"
                )
                if not resuming:
                    log.warning("%s", message)
                    continue
                raise ExperimentError(
                    f"{message}. To resume it, set '{name}={json.dumps(before)}' in [experiment] overrides "
                    f"(or in [arms.{arm}] overrides if that arm sets it), or pick another --out folder"
                )


def _registered(key: tuple[str, ...]) -> bool:
    """Whether ``key`` (a path in the resolved experiment) is a registered added setting, or a table that
    holds one (:func:`_check_added_settings` checks those)."""
    if key[0] != "arms" or len(key) < 4:
        return False
    return any(path[: len(key) - 3] == tuple(key[3:]) for path in ADDED_SETTINGS)


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
