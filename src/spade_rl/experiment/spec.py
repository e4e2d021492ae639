"""The experiment file: named arms (each a run configuration), one seed set, one budget, one evaluation.

    spec = load_experiment("experiments/ci-tiny.toml")     # every arm's configuration checked here
    spec.arms[0].name, spec.arms[0].config(seed=0)          # "fixed-pool", a RunConfig

A file (TOML) looks like this; every path is relative to the file's folder::

    [experiment]
    name = "cpu-default"
    base = "../configs/cpu-default.toml"   # the base configuration of every arm (optional)
    seeds = [0]                            # every arm runs once per seed (loop.seed and train.seed)
    iterations = 30                        # the budget: iterations per arm ...
    # wall_time_s = 3600                   # ... or seconds of training per arm (evaluations not counted)
    baseline = "fixed-pool"                # the arm the others are also compared with ("" for none)
    overrides = ["rollout.max_turns=4"]    # for every arm, before its own
    placement = "in-turn"                  # arms one after another here, or "ray": side by side as
    # ray_address = "auto"                 #   tasks on a Ray cluster, each asking for arm_cpus CPUs
    # arm_cpus = 2                         #   and arm_gpus GPUs (the folder must be on a file system
    # arm_gpus = 0                         #   that every node shares)

    [eval]                                 # the held-out evaluation at the start and end of every arm
    suites = ["envs", "reasoning_gym"]     # the same keys as a run's [eval]; every = E > 0 also
    limit = 8                              # evaluates inside every arm's loop, for the curves
    seed = 1000
    [eval.options.envs]
    envs = ["maze", "lights"]

    [scores]                               # optional: named scores over the envs suite's games, the
    primary = ["sequence", "oddword"]      #   first the primary one (comparison.md gives each its own
    pool = ["maze"]                        #   table, pooled over seeds, tested against base and baseline)

    [arms.fixed-pool]                      # arms run in the order of the file
    overrides = ["designer.source='none'"]
    [arms.spade]
    config = "other.toml"                  # optional: this arm's own base configuration
    overrides = []

An arm's configuration is ``load_config(config or base, experiment overrides + arm overrides +
budget and seed)``: the budget and the seed are applied last, so that every arm runs the same. Unknown
keys, bad values and impossible configurations of any arm fail here, naming the arm and the key,
before anything runs. A suite of ``[eval]`` whose optional package is not installed here is no error of
the file: the rest is checked, ``Experiment.unavailable`` names the package and how to install it, and
``run_experiment`` refuses to start until it is installed.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade_rl.loop.config import ConfigError, EvalConfig, RunConfig, build, load_config, to_data

EXPERIMENT_KEYS = (
    "name",
    "base",
    "seeds",
    "iterations",
    "wall_time_s",
    "max_iterations",
    "baseline",
    "overrides",
    "placement",
    "ray_address",
    "arm_cpus",
    "arm_gpus",
)
PLACEMENTS = ("in-turn", "ray")
ARM_KEYS = ("config", "overrides")
SCORE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ExperimentError(ConfigError):
    """An experiment file that cannot run: the message names the file, the arm or key, and what is allowed."""


@dataclass(frozen=True)
class Budget:
    """Iterations per arm, or seconds of training per arm (then at most ``iterations`` iterations)."""

    iterations: int
    wall_time_s: float = 0.0  # 0: the budget is ``iterations``

    def describe(self) -> str:
        if self.wall_time_s > 0:
            return f"{self.wall_time_s:g} s of training per arm (at most {self.iterations} iterations)"
        return f"{self.iterations} iteration{'s' if self.iterations != 1 else ''} per arm"


@dataclass(frozen=True)
class Placement:
    """Where the arms run: one after another in this process (``in-turn``), or side by side as Ray tasks
    (``ray``), each asking the cluster for ``arm_cpus`` CPUs and ``arm_gpus`` GPUs. It does not change
    the results, so an experiment may be resumed with another placement."""

    kind: str = "in-turn"
    ray_address: str = "auto"  # "auto": RAY_ADDRESS, else a cluster started on this machine
    arm_cpus: float = 1.0
    arm_gpus: float = 0.0

    def describe(self) -> str:
        if self.kind == "in-turn":
            return "arms one after another"
        gpus = f" and {self.arm_gpus:g} GPU" if self.arm_gpus else ""
        each = f"{self.arm_cpus:g} CPU{gpus} each"
        return f"arms side by side on the Ray cluster at {self.ray_address} ({each})"


@dataclass(frozen=True)
class Arm:
    name: str
    config_path: Path | None  # the base configuration file (None: the built-in defaults)
    overrides: tuple[str, ...]  # the experiment's, then the arm's own
    budget: Budget

    def overrides_for(self, seed: int) -> list[str]:
        """Every override of this arm's run with ``seed``: the budget and the seed come last."""
        return [
            *self.overrides,
            f"loop.iterations={self.budget.iterations}",
            f"loop.seed={seed}",
            f"train.seed={seed}",
        ]

    def config(self, seed: int, evaluation: EvalConfig | None = None) -> RunConfig:
        """The run configuration of this arm with ``seed`` (raises ``ExperimentError`` naming the arm).
        An ``evaluation`` with ``every > 0`` replaces the run's in-loop evaluation."""
        try:
            config = load_config(self.config_path, self.overrides_for(seed))
            if evaluation is not None and evaluation.every > 0:
                config = dataclasses.replace(config, eval=evaluation)
        except ConfigError as exc:
            raise ExperimentError(f"arm {self.name!r} (seed {seed}): {exc}") from None
        return config


@dataclass(frozen=True)
class ScoreGroup:
    """A named score over some of the envs suite's games (their categories): the primary held-out score
    on families no arm trains on, or the pool's own games as a second, separate score."""

    name: str
    categories: tuple[str, ...]
    suite: str = "envs"


@dataclass(frozen=True)
class Experiment:
    name: str
    path: Path  # the experiment file
    seeds: tuple[int, ...]
    budget: Budget
    baseline: str  # the arm every other arm is compared with; "" for none
    evaluation: EvalConfig
    arms: tuple[Arm, ...]
    placement: Placement = Placement()
    # [scores]: named groups of the evaluation's games, the first the primary score. They decide how the
    # comparison reads the results, not the results: left out of ``resolved()``, so a folder resumes.
    scores: tuple[ScoreGroup, ...] = ()
    # The evaluation's suites whose optional packages are not installed here, each as its message (which
    # names the package and the line that installs it): everything else is checked; a run refuses to
    # start until they are installed. Not part of ``resolved()``: the same file on another machine.
    unavailable: tuple[str, ...] = ()

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)

    def resolved(self) -> dict:
        """Plain data of everything that decides the results: stored in the experiment folder, compared
        on resume (a folder holding a different experiment is refused)."""
        return {
            "format": "spade-rl-experiment/1",
            "name": self.name,
            "seeds": list(self.seeds),
            "budget": dataclasses.asdict(self.budget),
            "baseline": self.baseline,
            "eval": to_data(self.evaluation),
            "arms": {
                arm.name: {str(seed): to_data(arm.config(seed, self.evaluation)) for seed in self.seeds}
                for arm in self.arms
            },
        }


def start_key(config: RunConfig, evaluation: EvalConfig) -> str:
    """Arms that start from the same model share their start evaluation: the key of that evaluation."""
    return start_key_of_data(to_data(config.policy), to_data(evaluation))


# Settings of a run's configuration added since experiment folders were first written (paths in the
# resolved configuration), each with the value that behaves as the releases before it did: a stored
# experiment that lacks one ran at that value, so it resumes only at that value (experiment.runner), and
# a policy setting at that value is left out of the start key, so that a folder's start evaluation keeps
# its name. A setting added to the configuration later belongs here with its "as before" value.
ADDED_SETTINGS: dict[tuple[str, ...], object] = {
    ("policy", "transformers", "batch_tokens"): 0,
    ("design", "validation", "max_common_answer_win_rate"): None,
    ("design", "validation", "max_copy_win_rate"): None,
    ("design", "validation", "refuse_undetermined_answers"): False,
}


def start_key_of_data(policy: dict, evaluation: dict) -> str:
    """:func:`start_key` from the plain data of the policy and the evaluation (as an experiment folder's
    ``experiment.json`` stores them); the in-loop evaluations (``every``) do not change the start."""
    policy = copy.deepcopy(policy)
    for path, value in ADDED_SETTINGS.items():
        if path[0] != "policy":
            continue
        *tables, key = path[1:]
        table = policy
        for name in tables:
            table = table.get(name) if isinstance(table, dict) else None
        if isinstance(table, dict) and table.get(key, value) == value:
            table.pop(key, None)
    data = {"policy": policy, "eval": {**evaluation, "every": 0}}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment file; every arm's configuration is built for every seed."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ExperimentError(f"cannot read the experiment {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"experiment", "eval", "arms", "scores"})
    if unknown:
        raise ExperimentError(
            f"{path}: unknown table [{unknown[0]}]; allowed: [experiment], [eval], [scores], [arms.NAME]"
        )
    head = _table(data.get("experiment", {}), "[experiment]", path)
    _known(head, EXPERIMENT_KEYS, "[experiment]", path)
    folder = path.parent
    name = _get(head, "name", str, path.stem, path)
    seeds = _get(head, "seeds", list, [0], path)
    if not seeds or not all(type(s) is int and s >= 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ExperimentError(f"{path}: experiment.seeds must be distinct integers >= 0, got {seeds!r}")
    budget = _budget(head, path)
    base = _get(head, "base", str, "", path)
    base_path = _config_file(folder, base, "experiment.base", path) if base else None
    shared = _overrides(head, "experiment.overrides", path)

    evaluation, unavailable = _evaluation(data.get("eval", {}), path)
    arms_data = _table(data.get("arms", {}), "[arms]", path)
    if not arms_data:
        raise ExperimentError(f"{path}: no arm; add at least one [arms.NAME] table")
    arms = []
    for arm_name, arm_data in arms_data.items():
        if not ARM_NAME.match(arm_name):
            raise ExperimentError(
                f"{path}: arm name {arm_name!r}: letters, digits, '.', '_' and '-' only (64 at most)"
            )
        where = f"[arms.{arm_name}]"
        arm_data = _table(arm_data, where, path)
        _known(arm_data, ARM_KEYS, where, path)
        own = _get(arm_data, "config", str, "", path, f"arms.{arm_name}")
        config_path = _config_file(folder, own, f"arms.{arm_name}.config", path) if own else base_path
        overrides = (*shared, *_overrides(arm_data, f"arms.{arm_name}.overrides", path))
        arms.append(Arm(arm_name, config_path, overrides, budget))

    baseline = _get(head, "baseline", str, "fixed-pool" if "fixed-pool" in arms_data else "", path)
    if baseline and baseline not in arms_data:
        raise ExperimentError(
            f"{path}: experiment.baseline {baseline!r} is not an arm; arms: {', '.join(arms_data)} "
            '(or "" for no baseline)'
        )
    placement = _placement(head, path)
    scores = _scores(data.get("scores", {}), evaluation, path)
    experiment = Experiment(
        name, path, tuple(seeds), budget, baseline, evaluation, tuple(arms), placement, scores, unavailable
    )
    for arm in experiment.arms:
        for seed in experiment.seeds:
            arm.config(seed, evaluation)  # every configuration checked before anything runs
    return experiment


def _budget(head: dict, path: Path) -> Budget:
    iterations = head.get("iterations")
    wall = head.get("wall_time_s")
    if (iterations is None) == (wall is None):
        raise ExperimentError(
            f"{path}: give the budget as exactly one of experiment.iterations (per arm) or "
            "experiment.wall_time_s (seconds of training per arm)"
        )
    if iterations is not None:
        if type(iterations) is not int or iterations < 1:
            raise ExperimentError(
                f"{path}: experiment.iterations must be an integer >= 1, got {iterations!r}"
            )
        if "max_iterations" in head:
            raise ExperimentError(f"{path}: experiment.max_iterations goes with wall_time_s, not iterations")
        return Budget(iterations)
    if type(wall) not in (int, float) or not wall > 0:
        raise ExperimentError(f"{path}: experiment.wall_time_s must be a positive number, got {wall!r}")
    cap = _get(head, "max_iterations", int, 10_000, path)
    if cap < 1:
        raise ExperimentError(f"{path}: experiment.max_iterations must be at least 1, got {cap}")
    return Budget(cap, float(wall))


def _placement(head: dict, path: Path) -> Placement:
    kind = _get(head, "placement", str, "in-turn", path)
    if kind not in PLACEMENTS:
        raise ExperimentError(
            f"{path}: experiment.placement = {kind!r}; allowed: {', '.join(repr(p) for p in PLACEMENTS)}"
        )
    ray_keys = [key for key in ("ray_address", "arm_cpus", "arm_gpus") if key in head]
    if kind != "ray" and ray_keys:
        raise ExperimentError(f'{path}: experiment.{ray_keys[0]} goes with placement = "ray"')
    address = _get(head, "ray_address", str, "auto", path)
    if not address.strip():
        raise ExperimentError(f'{path}: experiment.ray_address is empty; give "auto" or HOST:PORT')
    amounts = {}
    for key, default, least in (("arm_cpus", 1.0, 0.001), ("arm_gpus", 0.0, 0.0)):
        value = head.get(key, default)
        if type(value) not in (int, float) or not value >= least or value != value:
            raise ExperimentError(f"{path}: experiment.{key} must be a number >= {least:g}, got {value!r}")
        amounts[key] = float(value)
    return Placement(kind, address, amounts["arm_cpus"], amounts["arm_gpus"])


def _evaluation(data: Any, path: Path) -> tuple[EvalConfig, tuple[str, ...]]:
    """The [eval] table, every suite built with its options (unknown options and bad values fail here),
    and the messages of the suites whose optional packages are not installed here: a file that names
    such a suite is not wrong, the machine lacks a package (``Experiment.unavailable``)."""
    from spade_rl.evaluate.base import SuiteUnavailable
    from spade_rl.evaluate.runner import build_suites

    table = _table(data, "[eval]", path)
    try:
        evaluation = build(EvalConfig, table, "eval")
    except ConfigError as exc:
        raise ExperimentError(f"{path}: {exc}") from None
    unavailable = []
    for suite in evaluation.suites:
        try:
            build_suites([suite], {k: v for k, v in evaluation.options.items() if k == suite})
        except SuiteUnavailable as exc:
            unavailable.append(str(exc))
        except ValueError as exc:
            raise ExperimentError(f"{path}: eval: {exc}") from None
    return evaluation, tuple(unavailable)


def _scores(data: Any, evaluation: EvalConfig, path: Path) -> tuple[ScoreGroup, ...]:
    """The [scores] table: name = [games of the envs suite], each game one that the evaluation plays by
    name (``[eval.options.envs] envs``), in no two groups."""
    table = _table(data, "[scores]", path)
    if not table:
        return ()
    if "envs" not in evaluation.suites:
        raise ExperimentError(f"{path}: [scores] groups the envs suite's games, but eval.suites has no envs")
    options = evaluation.options.get("envs", {})
    named = options.get("envs", ())
    named = [part.strip() for part in named.split(",")] if isinstance(named, str) else list(named)
    if not named:
        raise ExperimentError(
            f"{path}: [scores] needs the games named in [eval.options.envs] envs (the environments of an "
            "archive or of the default selection are not known before the runs)"
        )
    groups, seen = [], {}
    for name, games in table.items():
        if not SCORE_NAME.match(name):
            raise ExperimentError(
                f"{path}: score name {name!r}: a letter, then letters, digits, '_' or '-' (32 at most)"
            )
        if not isinstance(games, list) or not games or not all(isinstance(g, str) for g in games):
            raise ExperimentError(
                f"{path}: scores.{name} must be a non-empty list of game names, got {games!r}"
            )
        for game in games:
            if game not in named:
                raise ExperimentError(
                    f"{path}: scores.{name}: {game!r} is not evaluated; [eval.options.envs] envs has "
                    f"{', '.join(named)}"
                )
            if game in seen:
                raise ExperimentError(f"{path}: scores.{name}: {game!r} is already in scores.{seen[game]}")
            seen[game] = name
        groups.append(ScoreGroup(name, tuple(games)))
    return tuple(groups)


def _config_file(folder: Path, value: str, key: str, path: Path) -> Path:
    config = (folder / value).resolve()
    if not config.is_file():
        raise ExperimentError(f"{path}: {key} = {value!r}: no such file ({config})")
    return config


def _overrides(table: dict, key: str, path: Path) -> tuple[str, ...]:
    value = table.get(key.rsplit(".", 1)[-1], [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ExperimentError(f"{path}: {key} must be a list of 'section.key=value' strings, got {value!r}")
    return tuple(value)


def _table(value: Any, where: str, path: Path) -> dict:
    if not isinstance(value, dict):
        raise ExperimentError(f"{path}: {where} must be a table, got {value!r}")
    return value


def _known(table: dict, allowed: tuple[str, ...], where: str, path: Path) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ExperimentError(f"{path}: unknown key {unknown[0]!r} in {where}; allowed: {', '.join(allowed)}")


def _get(table: dict, key: str, kind: type, default: Any, path: Path, where: str = "experiment") -> Any:
    value = table.get(key, default)
    if type(value) is not kind:
        raise ExperimentError(f"{path}: {where}.{key} must be a {kind.__name__}, got {value!r}")
    return value
