"""The loop's own tables of a run's configuration: ``[loop]`` (how an iteration is played and trained),
``[designer]`` (who designs, whether that role trains) and ``[pool]`` (what seeds the training pool).

:mod:`spade_rl.loop.config` gathers them with every component's table into ``RunConfig``; each refuses a
value it cannot use with the key and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from spade_rl.configdata import ConfigError
from spade_rl.envs import reference
from spade_rl.policy import PolicyConfig

DESIGNER_GROUPS = ("iteration", "skill")
GROUP_SEEDS = ("distinct", "shared")
HINT_PLAYS_FOR = ("all", "designs")


@dataclass(frozen=True)
class LoopConfig:
    iterations: int = 3
    seed: int = 0
    designs_per_iteration: int = 2  # environments the designer proposes in a design iteration
    regenerate_every: int = 1  # design every R iterations; in between the agent trains on the pool
    envs_per_iteration: int = 2  # environments played per iteration: new valid designs, then the pool
    plays_per_env: int = 4  # K episodes without the hint and K with it
    # Episodes with the hint per environment (None: plays_per_env, as in the paper). They only measure
    # regret (no-hint episodes are the agent's samples): 0 plays none, for runs whose designer is not
    # rewarded (designer.source = "none"); the archive then records 0 hint episodes and regret 0.
    hint_plays_per_env: int | None = None
    # "distinct": every episode of an environment draws its own seed; "shared": the plays of one
    # environment in one iteration (with and without the hint) share one seed, so that a GRPO group
    # compares actions on one instance (same prompt) and regret pairs the two arms on it.
    group_seeds: str = "distinct"
    # The same choice for the groups of designed environments (origin "designer"); None: group_seeds. A
    # designed game played 8 times at one shared seed is one instance: one win in 8 is that instance's
    # answer, not a rate. "distinct" makes its 8 plays 8 instances; GRPO then compares the actions of one
    # game over instances (the advantage is still the return against the group's mean).
    design_group_seeds: str | None = None
    # At least this share of envs_per_iteration (rounded up) is drawn from the pool's older entries: not
    # this iteration's designs, nor those held for a delayed reward. 0: new designs may take every group.
    pool_share: float = 0.0
    # A new valid design is first played probe_plays times without the hint (and as many, at most
    # hint_plays_per_env, with it where it has a hint), in a rollout of its own; only the designs whose
    # probe won at least probe_min_wins of its no-hint plays then take full groups in the same iteration.
    # The probe's episodes are a (small) training group of their own. 0: no probe, every new design takes
    # a full group.
    probe_plays: int = 0
    probe_min_wins: int = 1
    # A designed environment whose recorded no-hint plays reach retire_after_plays without a single win
    # leaves the pool sampler (it stays in the archive and the designer's memory, as a too-hard example).
    # 0: never retires. Read from the archive's statistics, so that a resumed run retires the same ones.
    retire_after_plays: int = 0
    # Which environments play episodes with the hint: "all" (every one with a non-empty hint) or
    # "designs" (only designed ones: the pool's reference and imported games then play none, and their
    # pool weight comes from their win rate alone, as their regret is recorded as 0). An environment
    # without a hint never plays hint episodes.
    hint_plays_for: str = "all"
    # The agent's training return of an episode, minus format_penalty times the share of its turns that
    # were malformed (no closed \boxed{}) or illegal (the environment said the action was invalid), before
    # the z-score (the win statistics keep the environment's return). 0: off.
    format_penalty: float = 0.0
    # Draw the pool's environments with replacement: an environment can be played as several groups in
    # one iteration (each with its own seed), so envs_per_iteration can exceed the pool's size.
    pool_replace: bool = False
    designer_group_by: str = "iteration"  # centre designer rewards over the iteration's designs or a skill
    drop_zero_signal_groups: bool = True  # groups whose rewards are all equal carry no signal
    # The update of one iteration: 0 trains all of its groups in one optimiser step; G > 0 cuts them into
    # optimiser steps of at most G groups each (minibatches). update_epochs passes over them, each pass in
    # a new order: every step after the first is off-policy, bounded by the clipped importance ratio
    # against the old log-probs (train.old_logprobs).
    groups_per_step: int = 0
    update_epochs: int = 1
    checkpoint_every: int = 1
    transcripts_per_iteration: int = 2
    # The gaming gauge (designer/gauge.py): each iteration's new designs that the agent won are validated
    # again with every gate on; the share refused is designer/gaming_gauge. False: not measured (it costs
    # one validation, about a second, per won design).
    gaming_gauge: bool = True

    @property
    def hint_plays(self) -> int:
        """Episodes with the hint per environment (``hint_plays_per_env``, else ``plays_per_env``)."""
        return self.plays_per_env if self.hint_plays_per_env is None else self.hint_plays_per_env

    @property
    def probe_hint_plays(self) -> int:
        """Episodes with the hint in a new design's probe: as many as without, at most ``hint_plays``."""
        return min(self.probe_plays, self.hint_plays)

    @property
    def pool_groups(self) -> int:
        """The least number of an iteration's groups drawn from the pool's older entries (pool_share)."""
        return math.ceil(self.pool_share * self.envs_per_iteration - 1e-9)

    def seeds_shared(self, designed: bool) -> bool:
        """Whether the plays of one group of a (designed or other) environment share one seed."""
        mode = self.group_seeds
        if designed and self.design_group_seeds is not None:
            mode = self.design_group_seeds
        return mode == "shared"

    def __post_init__(self) -> None:
        for name in (
            "iterations",
            "designs_per_iteration",
            "regenerate_every",
            "envs_per_iteration",
            "plays_per_env",
            "checkpoint_every",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"loop.{name} must be at least 1, got {getattr(self, name)}")
        if self.hint_plays_per_env is not None and (
            type(self.hint_plays_per_env) is not int or self.hint_plays_per_env < 0
        ):
            raise ConfigError(
                "loop.hint_plays_per_env must be an integer >= 0 (0: no episode with the hint), or left out "
                f"(as many as loop.plays_per_env), got {self.hint_plays_per_env!r}"
            )
        if self.group_seeds not in GROUP_SEEDS:
            raise ConfigError(f"loop.group_seeds {self.group_seeds!r}; allowed: {list(GROUP_SEEDS)}")
        if self.design_group_seeds is not None and self.design_group_seeds not in GROUP_SEEDS:
            raise ConfigError(
                f"loop.design_group_seeds {self.design_group_seeds!r}; allowed: {list(GROUP_SEEDS)}, or "
                "left out (as loop.group_seeds)"
            )
        if not _number(self.pool_share) or not 0.0 <= self.pool_share <= 1.0:
            raise ConfigError(
                "loop.pool_share must be a number in [0, 1] (the least share of an iteration's groups drawn "
                f"from the pool's older entries), got {self.pool_share!r}"
            )
        for name in ("probe_plays", "retire_after_plays"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ConfigError(f"loop.{name} must be an integer >= 0 (0: off), got {value!r}")
        if self.probe_plays and (
            type(self.probe_min_wins) is not int or not 1 <= self.probe_min_wins <= self.probe_plays
        ):
            raise ConfigError(
                f"loop.probe_min_wins must be an integer from 1 to loop.probe_plays ({self.probe_plays}), "
                f"got {self.probe_min_wins!r}"
            )
        if self.hint_plays_for not in HINT_PLAYS_FOR:
            raise ConfigError(f"loop.hint_plays_for {self.hint_plays_for!r}; allowed: {list(HINT_PLAYS_FOR)}")
        if not _number(self.format_penalty) or not 0.0 <= self.format_penalty <= 1.0:
            raise ConfigError(
                "loop.format_penalty must be a number in [0, 1] (subtracted from a return of at most 1, "
                f"times the share of bad turns; 0: off), got {self.format_penalty!r}"
            )
        if self.groups_per_step < 0:
            raise ConfigError(
                "loop.groups_per_step must be 0 (all of an iteration's groups in one optimiser step) or a "
                f"number of groups per step, got {self.groups_per_step}"
            )
        if self.update_epochs < 1:
            raise ConfigError(f"loop.update_epochs must be at least 1, got {self.update_epochs}")
        if not isinstance(self.gaming_gauge, bool):
            raise ConfigError(f"loop.gaming_gauge must be true or false, got {self.gaming_gauge!r}")
        if self.seed < 0 or self.transcripts_per_iteration < 0:
            raise ConfigError("loop.seed and loop.transcripts_per_iteration must not be negative")
        if self.designer_group_by not in DESIGNER_GROUPS:
            raise ConfigError(
                f"loop.designer_group_by {self.designer_group_by!r}; allowed: {list(DESIGNER_GROUPS)}"
            )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


DESIGNER_SOURCES = ("policy", "frozen", "none")


@dataclass(frozen=True)
class DesignerConfig:
    """Who designs the environments, and whether the designer role is trained.

    - ``source = "policy"`` (SPADE): the trained policy designs; ``train = false`` keeps its designer
      samples out of the update (the ablation "no designer training").
    - ``source = "frozen"`` (the fixed-designer baseline): a model that is never trained designs. With
      ``[designer.policy]`` unset it is a frozen copy of the starting weights (the run's own model,
      twice in memory); otherwise any policy, e.g. ``backend = "openai"`` for an OpenAI-compatible
      endpoint. Its samples never reach the update.
    - ``source = "none"`` (the fixed-pool baseline): nothing is designed; the agent trains on the pool
      (``[pool]``) alone.
    """

    source: str = "policy"
    train: bool = True  # only meaningful for source = "policy": a frozen designer is never trained
    policy: PolicyConfig | None = None  # source = "frozen" only: the model that designs

    def __post_init__(self) -> None:
        if self.source not in DESIGNER_SOURCES:
            raise ConfigError(f"designer.source {self.source!r}; allowed: {list(DESIGNER_SOURCES)}")
        if self.policy is not None and self.source != "frozen":
            raise ConfigError(
                f"designer.policy is only used with designer.source = 'frozen' (got source {self.source!r})"
            )

    @property
    def trains(self) -> bool:
        """Whether designer samples reach the GRPO update."""
        return self.source == "policy" and self.train


@dataclass(frozen=True)
class PoolConfig:
    """What seeds the archive's training pool before anything is designed (iteration 0).

    ``reference``: the built-in reference environments to add (all by default; ``[]`` for none, or a
    subset, keeping the others held out for evaluation). ``jsonl``: a pool written by ``spade-rl envs
    export`` (a path, relative to the working directory); its environments are validated again under
    this run's settings and added. ``reasoning_gym``: Reasoning Gym tasks, each wrapped as one
    single-turn environment (generated source, run in the sandbox like any other) holding
    ``reasoning_gym_items`` questions generated from ``reasoning_gym_seed`` (needs the ``eval`` extra).
    ``reference_kwargs``: constructor arguments per reference environment (``[pool.reference_kwargs]``
    ``guess = {high = 20}``), which it is validated and always played with when it is in the pool: the
    CPU default makes the games small enough for a small model to win some of the time. An argument
    the constructor does not take makes it invalid (``init_raised``), with the reason in the log.
    ``reasoning_gym_attempts``: 1 (the default) answers each question once; N > 1 makes each task a
    multi-turn environment that says "wrong, try again" and ends at the right answer or after N answers.
    ``gem`` / ``textarena``: GEM and single-player TextArena games by id (the games of
    ``spade_rl.envs.external`` that have a reference solution), each an adapter source that runs in the
    sandbox, whose workers then preload the package; ``gem_kwargs`` / ``textarena_kwargs``: their
    constructor arguments per id, on top of the registered ones (``"game:Mastermind-v0-easy" =
    {num_numbers = 4}``).
    """

    reference: tuple[str, ...] = reference.NAMES
    reference_kwargs: dict = field(default_factory=dict)  # name -> constructor arguments (a table)
    jsonl: str = ""
    reasoning_gym: tuple[str, ...] = ()
    reasoning_gym_items: int = 50
    reasoning_gym_seed: int = 0
    reasoning_gym_attempts: int = 1  # answers per question; > 1: "wrong, try again" until right or out
    gem: tuple[str, ...] = ()  # GEM game ids, e.g. "game:GuessTheNumber-v0-hard"
    gem_kwargs: dict = field(default_factory=dict)  # id -> constructor arguments (a table)
    textarena: tuple[str, ...] = ()  # single-player TextArena ids, e.g. "TowerOfHanoi-v0"
    textarena_kwargs: dict = field(default_factory=dict)  # id -> constructor arguments (a table)

    def __post_init__(self) -> None:
        unknown = [name for name in self.reference if name not in reference.NAMES]
        if unknown:
            raise ConfigError(
                f"pool.reference: unknown reference environment(s) {unknown}; "
                f"allowed: {list(reference.NAMES)}"
            )
        for name, kwargs in self.reference_kwargs.items():
            if name not in reference.NAMES:
                raise ConfigError(
                    f"pool.reference_kwargs.{name}: unknown reference environment; "
                    f"allowed: {list(reference.NAMES)}"
                )
            if not isinstance(kwargs, dict) or "max_turns" in kwargs:
                raise ConfigError(
                    f"pool.reference_kwargs.{name} must be a table of constructor arguments other than "
                    f"max_turns (the run's turn limit, rollout.max_turns, sets it), got {kwargs!r}"
                )
        if self.jsonl and not Path(self.jsonl).is_file():
            raise ConfigError(
                f"pool.jsonl: no such file {self.jsonl!r} (a JSONL pool from spade-rl envs export)"
            )
        if self.reasoning_gym_items < 1 or self.reasoning_gym_seed < 0:
            raise ConfigError(
                "pool.reasoning_gym_items must be at least 1 and pool.reasoning_gym_seed not negative, got "
                f"{self.reasoning_gym_items} and {self.reasoning_gym_seed}"
            )
        if self.reasoning_gym:
            from spade_rl.envs.external.reasoning_gym_source import check_reasoning_gym_tasks

            try:
                check_reasoning_gym_tasks(self.reasoning_gym)
            except ValueError as exc:
                raise ConfigError(f"pool.reasoning_gym: {exc}") from None
        if self.reasoning_gym_attempts < 1:
            raise ConfigError(
                "pool.reasoning_gym_attempts must be at least 1 (1: one answer), got "
                f"{self.reasoning_gym_attempts}"
            )
        from spade_rl.envs.external import check_games

        for package in ("gem", "textarena"):
            try:
                check_games(
                    package,
                    getattr(self, package),
                    getattr(self, f"{package}_kwargs"),
                    for_pool=True,
                    key=f"pool.{package}",
                )
            except ValueError as exc:
                raise ConfigError(str(exc)) from None

    @property
    def empty(self) -> bool:
        return not (self.reference or self.jsonl or self.reasoning_gym or self.gem or self.textarena)

    @property
    def packages(self) -> tuple[str, ...]:
        """The external packages whose games the pool holds (their workers preload them)."""
        return tuple(p for p in ("gem", "textarena") if getattr(self, p))
