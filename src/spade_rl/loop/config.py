"""The configuration of a self-play run: one dataclass per component, loaded from TOML with overrides.

    config = load_config("run.toml", overrides=["loop.iterations=5", "policy.model='/models/qwen3-4b'"])

A TOML file names the profile it builds on (a top-level ``profile = "cpu"`` or ``"none"``:
:mod:`spade_rl.loop.profiles`; without a file, ``spade-rl run``'s "cpu") and has one table per component
(``[loop]``, ``[policy]``, ``[sandbox]``, ``[corpus]``,
``[design]``, ``[rollout]``, ``[rewards]``, ``[train]``, ``[archive]``, ``[executor]``: ``kind = "local"``
or ``"ray"``, with the Ray ``address`` and the actors; ``[designer]``: who designs and whether that role
trains; ``[pool]``: what seeds the training pool; ``[eval]``: in-loop evaluation; ``[warmup]``: the
designer's supervised warm-up); every key is optional and
anything unknown, of the wrong type, or impossible is refused before anything runs, with the key
and what is allowed, and so is a run whose optimiser steps would round to nothing
(:meth:`RunConfig.check_precision`). The resolved configuration is written into the run directory as JSON
and read back on ``--resume``; :func:`resolve_config` also says where each value came from.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spade_rl.archive import ArchiveConfig
from spade_rl.configdata import (
    ConfigError,
    build,
    get_dotted,
    leaf_keys,
    merge_tables,
    parse_override,
    pop_dotted,
    set_dotted,
    to_data,
    upgrade_renamed,
)
from spade_rl.corpus import CorpusConfig
from spade_rl.design.validate import ValidationSettings
from spade_rl.designer.phase import DesignPhaseConfig
from spade_rl.designer.reward import cohorts_due_at_once
from spade_rl.designer.warmup import WarmupConfig
from spade_rl.evaluate.config import EvalConfig
from spade_rl.executor.config import ExecutorConfig
from spade_rl.loop.profiles import DEFAULT_PROFILE, PROFILES, profile_data
from spade_rl.loop.sections import (
    DesignerConfig,
    LoopConfig,
    PoolConfig,
)
from spade_rl.policy import PolicyConfig
from spade_rl.rewards import DesignerRewardConfig
from spade_rl.rollout import RolloutConfig
from spade_rl.sandbox import SandboxConfig
from spade_rl.train import TrainConfig
from spade_rl.train.config import rounds_away

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunConfig:
    """A run's configuration: one table per component. Its defaults are the components' own (the profile
    "none"); :func:`load_config` resolves a profile, a file and overrides into one
    (:mod:`spade_rl.loop.profiles`), and ``profile`` records which profile that was."""

    profile: str = "none"  # the profile the configuration was resolved over (load_config applies it)
    loop: LoopConfig = field(default_factory=LoopConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    design: DesignPhaseConfig = field(default_factory=DesignPhaseConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rewards: DesignerRewardConfig = field(default_factory=DesignerRewardConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    archive: ArchiveConfig = field(default_factory=ArchiveConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)  # where environments run
    designer: DesignerConfig = field(default_factory=DesignerConfig)  # who designs; designer training
    pool: PoolConfig = field(default_factory=PoolConfig)  # what seeds the training pool
    eval: EvalConfig = field(default_factory=EvalConfig)  # in-loop evaluation (off by default)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)  # the designer's warm-up (off by default)

    def __post_init__(self) -> None:
        loop, train = self.loop, self.train
        if self.profile not in PROFILES:
            raise ConfigError(f"profile {self.profile!r} does not exist; allowed: {list(PROFILES)}")
        if self.warmup.enabled:
            if self.design.form != "question":
                raise ConfigError(
                    f"warmup.designs = {self.warmup.designs} teaches the 'question' design form, but "
                    f"design.form is {self.design.form!r}: set design.form = 'question' or warmup.designs = 0"
                )
            if self.policy.backend != "transformers":
                raise ConfigError(
                    "the warm-up trains the in-process model: it needs policy.backend = 'transformers', "
                    f"got {self.policy.backend!r}; set warmup.designs = 0 with this backend"
                )
        preloaded = {name.split(".")[0] for name in self.sandbox.preload}  # "numpy.linalg" loads numpy
        unloaded = [m for m in self.design.validation.extra_imports if m not in preloaded]
        if unloaded:
            raise ConfigError(
                f"design.validation.extra_imports allows {unloaded}, which the sandbox workers do not "
                "preload: an environment importing them would fail to load once a worker has hardened "
                f"itself; add them to sandbox.preload (it holds {len(self.sandbox.preload)} modules) or "
                "drop them from extra_imports"
            )
        if self.design.n is not None and self.design.n != loop.designs_per_iteration:
            raise ConfigError(
                f"design.n ({self.design.n}) is loop.designs_per_iteration ({loop.designs_per_iteration}) "
                "in a run and cannot differ from it: set loop.designs_per_iteration (and leave design.n out)"
            )
        # Derived values given apart from their source (load_config also refuses one written in a file
        # at its default): environments are validated with the turn limit they are played with, and one
        # update trains both roles at the temperature they sampled at.
        turns = self.design.validation.max_turns
        if turns not in (self.rollout.max_turns, _DEFAULT_VALIDATION_TURNS):
            raise ConfigError(
                _derived_message("design.validation.max_turns", turns, "rollout.max_turns", self)
            )
        if train.temperature not in (self.rollout.temperature, _DEFAULT_TRAIN_TEMPERATURE):
            raise ConfigError(
                _derived_message("train.temperature", train.temperature, "rollout.temperature", self)
            )
        group = train.group_size
        if loop.plays_per_env > group or loop.designs_per_iteration > group:
            raise ConfigError(
                f"train.group_size ({group}) is the size of a GRPO group: it must be at least "
                f"loop.plays_per_env ({loop.plays_per_env}) and loop.designs_per_iteration "
                f"({loop.designs_per_iteration})"
            )
        if loop.probe_plays > group:
            raise ConfigError(
                f"loop.probe_plays ({loop.probe_plays}) plays a probe group of a new design: at most "
                f"train.group_size ({group})"
            )
        designs = self.designer.source != "none"
        for name in ("probe_plays", "retire_after_plays"):
            if getattr(loop, name) and not designs:
                raise ConfigError(
                    f"loop.{name} = {getattr(loop, name)} acts on designed environments, but designer.source "
                    "is 'none' (nothing is designed): leave it at 0"
                )
        if loop.probe_plays and self.rewards.delay > 0:
            raise ConfigError(
                f"loop.probe_plays = {loop.probe_plays} probes each new design in its own iteration, but "
                f"rewards.delay = {self.rewards.delay} plays a design phase's designs first in every "
                "iteration of its window: use one of them (set loop.probe_plays = 0 or rewards.delay = 0)"
            )
        if designs and loop.pool_groups >= loop.envs_per_iteration and not loop.probe_plays:
            raise ConfigError(
                f"loop.pool_share = {loop.pool_share} keeps every group of an iteration on the pool's older "
                "entries: a new design would never be played in its iteration, and its designer never "
                "rewarded; lower it, or probe new designs (loop.probe_plays > 0)"
            )
        frozen = self.designer.policy
        if frozen is not None and frozen.backend == "servers" and frozen.servers.weight_sync != "none":
            raise ConfigError(
                "designer.policy is never trained: its servers take no weights "
                "(set designer.policy.servers.weight_sync = 'none')"
            )
        if abs(self.design.temperature - self.rollout.temperature) > 1e-9:
            raise ConfigError(
                f"design.temperature ({self.design.temperature}) must equal rollout.temperature "
                f"({self.rollout.temperature}): one update trains both roles, and its importance ratio "
                "compares against the distribution the samples were drawn from at one temperature"
            )
        if loop.hint_plays == 0 and self.designer.source != "none":
            raise ConfigError(
                "loop.hint_plays_per_env = 0 plays no episode with the hint, but designs are rewarded and "
                f"remembered by their regret (designer.source = {self.designer.source!r}): play at least one "
                "with the hint, or set designer.source = 'none' (the fixed pool)"
            )
        if self.designer.source == "none" and self.pool.empty:
            raise ConfigError(
                "designer.source = 'none' trains on the pool alone, but [pool] adds nothing: name "
                "pool.reference environments, a pool.jsonl file or pool.reasoning_gym tasks"
            )
        if self.eval.every > 0:
            self.eval.check_suites()
        try:
            self.update_config  # noqa: B018 (old_logprobs "auto" decided for this backend, or refused)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def design_phase(self) -> DesignPhaseConfig:
        """The design phase of one iteration: ``design`` with its derived values (``n`` =
        loop.designs_per_iteration, ``validation.max_turns`` = rollout.max_turns). They are derived here
        only: the stored ``design`` stays as it was given, and a saved configuration carries none."""
        validation = dataclasses.replace(self.design.validation, max_turns=self.rollout.max_turns)
        return dataclasses.replace(self.design, n=self.loop.designs_per_iteration, validation=validation)

    @property
    def update_config(self) -> TrainConfig:
        """``train`` with its derived temperature (rollout.temperature: what the samples were drawn at) and
        ``old_logprobs = "auto"`` decided: the trainer samples itself only with ``policy.backend =
        "transformers"``; vLLM and servers sample for it (recomputed old log-probs, truncated importance
        sampling)."""
        train = dataclasses.replace(self.train, temperature=self.rollout.temperature)
        return train.resolved(sampler_is_trainer=self.policy.backend == "transformers")

    def check_precision(self) -> None:
        """Refuse a run whose optimiser steps would round to nothing: full fine-tuning of bfloat16 or float16
        weights at a learning rate below 1e-5 (:func:`spade_rl.train.config.rounds_away`). The trained
        weights are ``policy.transformers``'s, in process or as the trainer's copy beside servers;
        ``dtype = "auto"`` is bfloat16 (float16 without bf16 support) on a GPU, which ``device = "auto"``
        picks where CUDA is available."""
        policy = self.policy
        if policy.backend not in ("transformers", "servers"):
            return  # no in-process model is trained (make_learner refuses to train these backends)
        if policy.backend == "servers" and policy.servers.weight_sync == "none":
            return  # inference only
        settings = policy.transformers
        weights = settings.dtype
        if weights == "auto":
            weights = "float32"
            if settings.device.startswith("cuda") or (settings.device == "auto" and _cuda_available()):
                weights = "bfloat16 (dtype 'auto' on a GPU)"
        rates = [("train.learning_rate", self.train.learning_rate)]
        if self.warmup.enabled:
            rates.append(("warmup.learning_rate", self.warmup.learning_rate))
        for key, rate in rates:
            reason = rounds_away(weights.split()[0], rate, self.train.use_lora)
            if reason is not None:
                raise ConfigError(f"{key}: {reason.replace(weights.split()[0], weights, 1)}")

    def check_launch(self, processes: int) -> None:
        """Refuse what this configuration cannot do with ``processes`` processes (``accelerate launch``
        starts several, each training whole groups of its share: loop/distributed.py). The configuration
        itself does not depend on the launch; :func:`load_config` calls this for the launch it runs in."""
        loop, train = self.loop, self.train
        group = train.group_size
        if processes > 1 and self.warmup.enabled:
            raise ConfigError(
                "the warm-up trains the model of a single process, not under accelerate launch "
                f"({processes} processes): set warmup.designs = 0"
            )
        designer_blocks = 1 if loop.designer_group_by == "iteration" else loop.designs_per_iteration
        # With a delayed reward the last iteration trains every design phase still held (designer/reward.py).
        phases = cohorts_due_at_once(loop.iterations, loop.regenerate_every, self.rewards.delay)
        designer_blocks *= phases
        if not self.designer.trains:
            designer_blocks = 0  # no designer sample reaches the update
        # With a probe, each new design (at most designs_per_iteration) adds a group of loop.probe_plays.
        probe_blocks = loop.designs_per_iteration if loop.probe_plays else 0
        blocks = -(-(loop.envs_per_iteration + probe_blocks + designer_blocks) // processes)
        if loop.groups_per_step:
            # Cut into steps of at most groups_per_step groups (SelfPlay._update); a step dealt to processes.
            blocks = min(blocks, -(-loop.groups_per_step // processes))
        if train.rows_per_update >= group * blocks:
            return
        holds = (
            f"one update holds train.per_device_train_batch_size * train.gradient_accumulation_steps = "
            f"{train.rows_per_update} rows per process, but "
        )
        if loop.groups_per_step:
            raise ConfigError(
                f"{holds}loop.groups_per_step = {loop.groups_per_step} brings up to {group * blocks} to "
                f"each of {processes} process(es) (blocks of group_size={group}): raise the batch or "
                "accumulation, or train fewer groups per step"
            )
        delayed = (
            f"; with rewards.delay = {self.rewards.delay} the last iteration trains the designs of "
            f"{phases} design phases"
            if phases > 1 and designer_blocks
            else ""
        )
        raise ConfigError(
            f"{holds}an iteration can bring {group * blocks} to each of {processes} process(es) (blocks of "
            f"group_size={group} for {loop.envs_per_iteration} environments, {probe_blocks} probe(s) and "
            f"{designer_blocks} designer "
            f"group(s){delayed}): raise the batch or accumulation, or play fewer environments"
        )


# Values a run derives from another key (RunConfig.design_phase, update_config): a file or override may
# set one only to the value it is derived as (configurations saved by earlier releases hold them).
DERIVED_KEYS = {
    "design.n": "loop.designs_per_iteration",
    "design.validation.max_turns": "rollout.max_turns",
    "design.prompt.setting": "design.setting",
    "design.prompt.hint_mode": "design.hint_mode",
    "train.temperature": "rollout.temperature",
}
_DEFAULT_VALIDATION_TURNS = ValidationSettings().max_turns
_DEFAULT_TRAIN_TEMPERATURE = TrainConfig().temperature


def _value(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def _derived_message(key: str, value: Any, source: str, config: Any) -> str:
    return (
        f"{key} ({value!r}) is {source} ({_value(config, source)!r}) in a run and cannot be set apart from "
        f"it: set {source} (and leave {key} out)"
    )


def _check_derived(data: dict, config: RunConfig) -> None:
    """Refuse a derived key that a file or override sets to anything but its source's value."""
    for key, source in DERIVED_KEYS.items():
        found, value = get_dotted(data, key)
        if found and value is not None and value != _value(config, source):
            raise ConfigError(_derived_message(key, value, source, config))


# Keys and values renamed for the glossary (docs/architecture.md): the old name is read, with a warning
# that names the new one, for one release.
RENAMED_KEYS = {
    "archive.band_low": "archive.frontier_low",
    "archive.band_high": "archive.frontier_high",
    "rewards.band_low": "rewards.plateau_low",
    "rewards.band_high": "rewards.plateau_high",
    "rewards.band_ramp": "rewards.plateau_ramp",
    "rewards.w_band": "rewards.w_plateau",
    "train.num_generations": "train.group_size",
}
RENAMED_VALUES = {"rewards.mode": {"band": "plateau"}}


@dataclass(frozen=True)
class ResolvedConfig:
    """A configuration and where each of its values came from: ``sources`` maps a dotted key (or the key
    of a table set whole, such as ``rollout.action_prefix``) to "override", "file PATH" or "profile NAME";
    a key it does not hold took its component's default (:meth:`source`)."""

    config: RunConfig
    sources: dict[str, str]

    def source(self, dotted: str) -> str:
        """Where the value of ``dotted`` came from: the source of it or of the table holding it."""
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            found = self.sources.get(".".join(parts[:end]))
            if found is not None:
                return found
        return "default"


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    processes: int | None = None,
    learner: bool = True,
) -> RunConfig:
    """The run configuration from a TOML (or resolved JSON) file and ``key=value`` overrides, over the
    profile the file names (the CPU profile without a file), checked for ``processes`` processes (None:
    those of this launch, ``WORLD_SIZE`` under accelerate launch). ``learner=False``: for a process that
    trains nothing and loads no model (the verifiers environment: its seats' models and trainer are
    verifiers' and prime-rl's), the learner's checks (weights' precision, the launch) are not made, and
    torch is not imported."""
    return resolve_config(path, overrides, processes=processes, learner=learner).config


def resolve_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    processes: int | None = None,
    learner: bool = True,
) -> ResolvedConfig:
    """:func:`load_config` with the source of every value. The layers, the later winning: the components'
    defaults, the profile, the file, the overrides; a table of a component is merged key by key, any other
    value (a plain table such as ``rollout.action_prefix`` included) replaces what is below it whole."""
    file_data: dict = _read_file(Path(path)) if path is not None else {}
    override_data: dict = {}
    for override in overrides:
        key, value = parse_override(override)
        set_dotted(override_data, key, value)
    where = f"file {path}"
    file_data = _renamed(file_data, str(path))
    override_data = _renamed(override_data, "the overrides")
    profile = override_data.get("profile", file_data.get("profile"))
    named = profile is not None
    if not named:
        profile = _unnamed_profile(path)
    try:
        layers = [
            (f"profile {profile}", profile_data(profile)),
            (where, file_data),
            ("override", override_data),
        ]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    data: dict = {}
    sources: dict[str, str] = {}
    for name, layer in layers:
        data = merge_tables(data, layer, RunConfig)
        sources.update(dict.fromkeys(leaf_keys(layer, RunConfig), name))
    data["profile"] = profile
    if not named:
        sources["profile"] = "default: " + (
            "spade-rl run's without a file" if path is None else "a saved run's"
        )
    config = build(RunConfig, data, "")
    _check_derived(data, config)
    if learner:
        config.check_precision()
        config.check_launch(launch_processes() if processes is None else processes)
    return ResolvedConfig(config, sources)


def _read_file(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration {path}: {exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"{path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a table of settings, got {type(data).__name__}")
    return data


def _renamed(data: dict, where: str) -> dict:
    """``data`` with renamed keys under their new names, each old name found shown as a deprecation."""
    data, notes = upgrade_renamed(data, RENAMED_KEYS, RENAMED_VALUES, where)
    for note in notes:
        log.warning("%s", note)
        warnings.warn(note, FutureWarning, stacklevel=3)
    return data


def _unnamed_profile(path: str | Path | None) -> str:
    """The profile of a configuration that names none: the CPU profile for a run without a file, and for a
    resolved ``config.json`` saved before profiles existed (it holds every key, and was resolved over the
    CPU defaults then); a TOML file must name its own."""
    if path is None:
        return DEFAULT_PROFILE
    if Path(path).suffix == ".json":
        log.warning(
            "%s names no profile: a saved configuration, read over the %r profile", path, DEFAULT_PROFILE
        )
        return DEFAULT_PROFILE
    raise ConfigError(
        f"{path} names no profile: add a top-level profile = 'cpu' (spade-rl run's CPU settings) or "
        "profile = 'none' (the components' own defaults), above its first table; every key the file does "
        f"not set comes from the profile (allowed: {list(PROFILES)}; spade-rl config --explain shows them)"
    )


def _cuda_available() -> bool:
    """Whether torch sees a CUDA device (imports torch: asked only where the answer decides)."""
    import torch

    return torch.cuda.is_available()


def launch_processes() -> int:
    """How many processes this launch has: ``WORLD_SIZE`` as torchrun / accelerate launch set it, else 1."""
    value = os.environ.get("WORLD_SIZE", "1")
    try:
        return max(1, int(value))
    except ValueError:
        raise ConfigError(f"WORLD_SIZE={value!r} is not a number of processes") from None


def load_run_config(config_path: Path | None, overrides: list[str], run_dir: Path, resume: bool) -> RunConfig:
    """The configuration of ``spade-rl run``: from a config file and overrides for a new run, or the
    resolved ``config.json`` of the run being resumed (and the overrides)."""
    if resume:
        if not (run_dir / "config.json").exists():
            raise ConfigError(f"{run_dir} holds no run to resume (no config.json)")
        return load_config(run_dir / "config.json", overrides)
    return load_config(config_path, overrides)


def saved_data(config: RunConfig) -> dict:
    """The data of a resolved configuration as ``config.json`` holds it: every key but the derived ones."""
    data = to_data(config)
    for key in DERIVED_KEYS:
        pop_dotted(data, key)
    return data


def save_config(config: RunConfig, path: Path) -> None:
    """The resolved configuration as JSON, without the derived keys (they follow their sources)."""
    data = saved_data(config)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
