"""The fixed training pool: what seeds the archive before anything is designed (``[pool]``).

    added = seed_pool(archive, executor, PoolConfig(reference=("guess",), reasoning_gym=("chain_sum",)),
                      ValidationSettings(max_turns=4))
    source = reasoning_gym_env_source("chain_sum", items=20, seed=0)   # one generated environment

These sources, any mix of them, all validated in the sandbox under the run's settings and added to
the archive at iteration 0 (an environment already there is left alone, so seeding again on resume
adds nothing):

- the built-in **reference environments** (all, or a subset; the others can be held out for
  evaluation: :func:`seed_reference_environments`, which ``spade-rl design`` uses too);
- a **JSONL pool** written by ``spade-rl envs export``: each line's source and hint, validated again
  here (a pool from another run may have been validated with other turn limits); statistics of the
  other run are not carried over;
- **Reasoning Gym tasks wrapped as single-turn environments**: for each task, the source of one
  environment (:mod:`spade_rl.envs.external.reasoning_gym_source`) holding ``items`` generated
  questions and their reference answers; an episode's seed picks the question; the agent answers once
  in ``\\boxed{}`` (or ``<answer>`` tags). The
  generated source is plain standard-library Python, validated and run in the sandbox like any
  designed environment. It scores by the common core of Reasoning Gym's scorers (the reference answer,
  equal after collapsing whitespace, or numerically equal), not by each task's own scorer; the
  evaluation suite (:mod:`spade_rl.evaluate.reasoning_gym_suite`) uses the task's own scorer, in the
  sandbox. Training questions come from ``create_dataset(task, seed=S)`` with ``S`` derived from
  ``seed`` and a ``train:`` prefix, a different seed from any evaluation's (``task_seed``), so the
  training questions are not the evaluation's items (short tasks with few possible questions can
  still repeat one by chance). With ``reasoning_gym_attempts`` = N > 1 each task is a multi-turn
  environment instead, allowing N answers ("wrong, try again");
- **GEM and TextArena games** (``gem``, ``textarena``): the adapter sources of
  :mod:`spade_rl.envs.external`, validated with their package's imports allowed and played by workers
  that preload it (``SelfPlay`` adds the preload to the run's sandbox configuration).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from spade_rl.archive import Archive
from spade_rl.archive.jsonl import read_valid_envs
from spade_rl.archive.sampling import retired
from spade_rl.design.validate import ValidationReport, ValidationSettings
from spade_rl.envs import reference
from spade_rl.envs.external.reasoning_gym_source import reasoning_gym_env_source
from spade_rl.executor import Executor, as_executor
from spade_rl.sandbox import Sandbox

log = logging.getLogger(__name__)

# An external game's validation starts fresh workers that load its package first (a second or two each).
EXTERNAL_VALIDATION_S = 60.0
RG_SKILL_PREFIX = "rg:"  # the skill of a wrapped Reasoning Gym task is "rg:<task>"
RG_HINT = (
    "Work through the question step by step before answering, check the result against every condition "
    "in the question, and put only the final answer inside \\boxed{}, in exactly the format asked for."
)


EXTERNAL_HINT = (
    "Read the rules and the action format in the first message, keep track of what each answer of the "
    "game tells you, and make every move in exactly the format it asks for."
)


@dataclass(frozen=True)
class PoolEntry:
    """One environment to add: its source, hint, skill and setting, where it came from, and the modules
    beyond the standard library its validation allows (an external game's package)."""

    source: str
    hint: str
    skill: str
    setting: str
    metadata: dict
    imports: tuple[str, ...] = ()


def seed_reference_environments(
    archive: Archive,
    executor: Executor | Sandbox,
    settings: ValidationSettings,
    names: tuple[str, ...] | None = None,
    env_kwargs: dict[str, dict] | None = None,
) -> int:
    """Validate the built-in reference environments (``names``, default all) and add the missing ones
    (iteration 0, origin "reference", with their hints): the designer's memory and the training pool
    before anything valid is designed. ``env_kwargs`` maps a name to constructor arguments (for
    example an easier size) that it is validated, and then always played, with."""
    added = 0
    names = reference.NAMES if names is None else names
    env_kwargs = env_kwargs or {}
    missing = [name for name in names if archive.find(reference.source(name)) is None]
    by_kwargs: dict[str, list[str]] = {}  # one batch of validations per set of constructor arguments
    for name in missing:
        by_kwargs.setdefault(json.dumps(env_kwargs.get(name, {}), sort_keys=True), []).append(name)
    reports: dict[str, ValidationReport] = {}
    for kwargs, group in by_kwargs.items():
        # The trivial-policy check guards against designs that can be won without playing; the
        # reference games are ours, and their difficulty is what pool.reference_kwargs asks for (the
        # CPU default's two-number arithmetic stories can be guessed from the story 2 times in 8).
        extra = dataclasses.replace(
            settings, env_kwargs={**settings.env_kwargs, **json.loads(kwargs)}, trivial_seeds=0
        )
        requests = [(reference.source(name), reference.HINTS[name]) for name in group]
        reports.update(zip(group, as_executor(executor).validate_many(requests, extra), strict=True))
    for name in missing:
        report = reports[name]
        source = reference.source(name)
        result = archive.add(
            source,
            valid=report.valid,
            reason=report.reason,
            message=report.message,
            skill=name,
            setting=reference.SETTINGS[name],
            iteration=0,
            hint=reference.HINTS[name],
            class_name=report.class_name,
            origin="reference",
            metadata={"name": name, "validation_seconds": report.seconds, "validation_seed": report.seed},
            env_kwargs=report.env_kwargs if report.valid else None,
        )
        added += not result.duplicate
        if not report.valid and "max_turns is" in report.message:
            # Expected on short-episode settings (the CPU default plays 4 turns): not in the pool.
            log.info("reference environment %s left out of the pool: %s", name, report.message)
        elif not report.valid:
            log.warning("reference environment %s failed validation: %s", name, report.message)
    return added


def reasoning_gym_entries(tasks: Sequence[str], items: int, seed: int, attempts: int = 1) -> list[PoolEntry]:
    more = {"attempts": attempts} if attempts > 1 else {}
    return [
        PoolEntry(
            reasoning_gym_env_source(task, items, seed, attempts),
            RG_HINT,
            RG_SKILL_PREFIX + task,
            "games",
            {"name": f"reasoning_gym/{task}", "pool": "reasoning_gym", "items": items, "seed": seed, **more},
        )
        for task in tasks
    ]


def external_entries(package: str, ids: Sequence[str], kwargs: dict) -> list[PoolEntry]:
    """GEM or TextArena games as pool entries: adapter sources (spade_rl.envs.external) whose
    validation allows the package's imports (``PoolEntry.imports``)."""
    from spade_rl.envs import external

    make = external.gem_source if package == "gem" else external.textarena_source
    return [
        PoolEntry(
            make(game_id, kwargs.get(game_id)),
            EXTERNAL_HINT,
            f"{package}:{game_id}",
            "games",
            {"name": f"{package}/{game_id}", "pool": package, "kwargs": kwargs.get(game_id, {})},
            imports=external.needed_imports(package),
        )
        for game_id in ids
    ]


def pool_entries_of_jsonl(path: str | Path) -> list[PoolEntry]:
    """The environments of a JSONL pool that were valid where they were exported (an invalid line
    stays out: it never could be played). Raises ``ValueError`` naming the line that is malformed."""
    path = Path(path)
    try:
        records = read_valid_envs(path)
    except OSError as exc:
        raise ValueError(f"cannot read the pool {path}: {exc}") from None
    entries = [
        PoolEntry(
            record.source,
            record.hint,
            record.skill,
            record.setting,
            {"pool": str(path), "line": number, "exported_env_id": record.env_id},
        )
        for number, record in records
    ]
    if not entries:
        raise ValueError(f"the pool {path} holds no valid environment")
    return entries


def add_entries(
    archive: Archive,
    executor: Executor | Sandbox,
    entries: Sequence[PoolEntry],
    settings: ValidationSettings,
) -> int:
    """Validate the entries not yet in the archive and add them (origin "import", iteration 0), valid or
    not; returns how many were added. An entry that fails validation stays out of the training pool."""
    missing = [e for e in entries if archive.find(e.source) is None]
    reports = []
    for imports in dict.fromkeys(e.imports for e in missing):  # one batch per allow-list, in order
        group = [e for e in missing if e.imports == imports]
        extra = settings
        if imports:  # an external game: its package's imports, and time for fresh workers to load it
            extra = replace(
                settings,
                extra_imports=(*settings.extra_imports, *imports),
                total_timeout_s=max(settings.total_timeout_s, EXTERNAL_VALIDATION_S),
            )
        checked = as_executor(executor).validate_many([(e.source, e.hint) for e in group], extra)
        reports += zip(group, checked, strict=True)
    for entry, report in reports:
        archive.add(
            entry.source,
            valid=report.valid,
            reason=report.reason,
            message=report.message,
            skill=entry.skill,
            setting=entry.setting,
            iteration=0,
            hint=entry.hint,
            class_name=report.class_name,
            origin="import",
            metadata={**entry.metadata, "validation_seconds": report.seconds, "validation_seed": report.seed},
            env_kwargs=report.env_kwargs if report.valid else None,
        )
        if not report.valid:
            log.warning("pool environment %s failed validation: %s", entry.metadata, report.message)
    return len(missing)


def seed_pool(
    archive: Archive,
    executor: Executor | Sandbox,
    config,  # spade_rl.loop.config.PoolConfig (not imported: the config module imports this one)
    settings: ValidationSettings,
) -> int:
    """Add the configured pool to the archive (what is already there stays); returns how many were added."""
    added = seed_reference_environments(
        archive, executor, settings, names=config.reference, env_kwargs=config.reference_kwargs
    )
    entries: list[PoolEntry] = []
    if config.jsonl:
        entries += pool_entries_of_jsonl(config.jsonl)
    if config.reasoning_gym:
        entries += reasoning_gym_entries(
            config.reasoning_gym,
            config.reasoning_gym_items,
            config.reasoning_gym_seed,
            config.reasoning_gym_attempts,
        )
    for package in config.packages:
        entries += external_entries(package, getattr(config, package), getattr(config, f"{package}_kwargs"))
    if entries:
        added += add_entries(archive, executor, entries, settings)
    return added


def retired_designs(archive: Archive, after_plays: int) -> set[int]:
    """The valid designed environments (origin "designer") that ``loop.retire_after_plays`` takes out of
    the pool sampler: at least ``after_plays`` no-hint plays recorded in the archive, none won
    (:func:`spade_rl.archive.sampling.retired`). 0: none. Read from the archive alone, so a resumed run
    (whose archive forgot the discarded iterations) retires the same ones."""
    if after_plays <= 0:
        return set()
    plays = {
        env_id: [
            (row.stats.episodes_nohint, row.stats.win_rate_nohint) for row in archive.stats_history(env_id)
        ]
        for env_id in archive.ids(valid=True, origin="designer")
    }
    return retired(plays, after_plays)
