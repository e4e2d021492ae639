"""The stages of one iteration as data: what each step of ``SelfPlay.iteration`` hands to the next.

    Proposal      what the designer was asked and wrote, parsed        (designer/phase.py)
      -> Design   the proposal with its verdict and its archive id     (design/validate.py, the archive)
      -> PlayedEnv  one environment's episodes with and without the hint, and their PlayStats (rollout.py)
      -> TrainingBatch  the samples of both roles with their advantages (rewards.py, train/samples.py)
      -> UpdateResult   what the GRPO step reported, or why there was none (train/)

:func:`iteration_metrics` computes an iteration's metrics line from them, once. An episode's
``EpisodeSpec.tag`` is a :class:`PlayTag` (the archive id and whether the hint was shown).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from spade_rl.archive.records import PlayStats, merge_stats
from spade_rl.stats import FormatCounts, format_counts, iteration_means

if TYPE_CHECKING:
    from spade_rl.design.parse import Parsed
    from spade_rl.design.validate import ValidationReport
    from spade_rl.policy import Generation
    from spade_rl.rollout import Episode
    from spade_rl.train import Sample


@dataclass(frozen=True)
class Proposal:
    """One request to the designer: the skill, the grounding document and the memory it was shown
    (``parents``: archive ids), the chat and what the policy wrote, parsed; in the two-call hint mode
    also the hint call's chat and generation."""

    skill: str
    document_id: str | None  # None without grounding
    parents: tuple[int, ...]
    chat: list[dict]
    generation: Generation
    parsed: Parsed
    hint_chat: list[dict] | None = None
    hint_generation: Generation | None = None


@dataclass(frozen=True)
class Design:
    """A proposal with its verdict: the validation report (None when parsing already failed) and the
    archive id it was recorded under (``duplicate``: the archive already held that source)."""

    proposal: Proposal
    report: ValidationReport | None
    env_id: int
    duplicate: bool

    @property
    def valid(self) -> bool:
        return self.report is not None and self.report.valid

    @property
    def reason(self) -> str:
        return self.report.reason if self.report is not None else self.proposal.parsed.reason

    # The proposal's fields, read through the design.
    @property
    def skill(self) -> str:
        return self.proposal.skill

    @property
    def document_id(self) -> str | None:
        return self.proposal.document_id

    @property
    def parents(self) -> tuple[int, ...]:
        return self.proposal.parents

    @property
    def chat(self) -> list[dict]:
        return self.proposal.chat

    @property
    def generation(self) -> Generation:
        return self.proposal.generation

    @property
    def parsed(self) -> Parsed:
        return self.proposal.parsed

    @property
    def hint_chat(self) -> list[dict] | None:
        return self.proposal.hint_chat

    @property
    def hint_generation(self) -> Generation | None:
        return self.proposal.hint_generation


class PlayTag(NamedTuple):
    """The label of one episode of the play phase (``EpisodeSpec.tag``): the environment, whether the hint
    was shown, and which of the iteration's groups of that environment it belongs to (``slot``: several
    when the pool is drawn with replacement, ``loop.pool_replace``)."""

    env_id: int
    use_hint: bool
    slot: int = 0


@dataclass
class PlayedEnv:
    """One group of an environment's play in one iteration: K episodes without the hint, K with it (none
    where it has no hint); ``probe``: a new design's probe (loop.probe_plays); ``family``: the game family its
    format metrics are counted under (a reference or imported game's skill, "designed" for a design)."""

    env_id: int
    nohint: list[Episode]
    hint: list[Episode]
    stats: PlayStats
    probe: bool = False
    family: str = ""


DESIGNED_FAMILY = "designed"  # the format metrics' family of every designed environment


def merged_played(played: list[PlayedEnv]) -> list[PlayedEnv]:
    """One entry per environment, in order of first play: the groups of one environment (a probe and a full
    group, or several pool draws) with their episodes joined and their statistics merged as the archive
    merges them; an environment played once is its own entry."""
    by_env: dict[int, list[PlayedEnv]] = {}
    for p in played:
        by_env.setdefault(p.env_id, []).append(p)
    out = []
    for groups in by_env.values():
        if len(groups) == 1:
            out.append(groups[0])
            continue
        stats = groups[0].stats
        for g in groups[1:]:
            stats = merge_stats(stats, g.stats)
        nohint = [e for g in groups for e in g.nohint]
        hint = [e for g in groups for e in g.hint]
        out.append(PlayedEnv(groups[0].env_id, nohint, hint, stats, family=groups[0].family))
    return out


@dataclass
class TrainingBatch:
    """The samples of one update: the agent's (one group per played environment, z-scored returns of the
    no-hint episodes) and the designer's (one per proposal rewarded now, centred per group: with a delay,
    proposals of an earlier iteration); ``groups`` and ``zero_signal`` count the groups of each role,
    dropped or not."""

    agent: list[Sample] = field(default_factory=list)
    designer: list[Sample] = field(default_factory=list)
    agent_groups: int = 0
    agent_zero_signal: int = 0
    designer_groups: int = 0
    designer_zero_signal: int = 0
    designer_reward_mean: float | None = None
    designer_scale: float = 1.0  # the factor of the designer's advantages (rewards.scale)
    designer_masked: int = 0  # designs left out for a negative reward (rewards.mask_negative)
    designer_trains: bool = True  # False: the designer's samples are rewarded but kept out of the update
    # With rewards.delay > 0: designs still held for their reward after this iteration; those rewarded in it.
    designer_held: int | None = None
    designer_rewarded: int | None = None
    designer_metrics: dict[str, float] = field(default_factory=dict)  # designer/lp/<skill>/... (delayed.py)

    @property
    def samples(self) -> list[Sample]:
        """What the update trains on."""
        return self.agent + (self.designer if self.designer_trains else [])


@dataclass
class UpdateResult:
    """The GRPO step's metrics (``train/...``), or ``skipped`` when the batch was empty."""

    metrics: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False


# Metrics renamed in a metrics.jsonl line: readers of older runs see the new names (upgrade_metrics).
RENAMED_METRICS = {"band/fraction": "frontier/fraction"}


def upgrade_metrics(line: dict[str, Any]) -> dict[str, Any]:
    """A metrics line of any release with today's names (a new name already there wins)."""
    upgraded = dict(line)
    for old, new in RENAMED_METRICS.items():
        if old in upgraded:
            value = upgraded.pop(old)
            upgraded.setdefault(new, value)
    return upgraded


def iteration_metrics(
    designs: list[Design],
    played: list[PlayedEnv],
    batch: TrainingBatch,
    update: UpdateResult,
    frontier: tuple[float, float],
) -> dict[str, Any]:
    """The stage-derived part of an iteration's metrics line (times and executor counters are the
    loop's): designer verdicts, the agent's play (``spade_rl.stats.iteration_means``), the batch and
    the update."""
    metrics: dict[str, Any] = {
        "designer/proposed": len(designs),
        "designer/valid_rate": sum(d.valid for d in designs) / len(designs) if designs else None,
        "designer/reasons": dict(Counter(d.reason for d in designs)),
    }
    # Per environment: the groups of one environment (loop.pool_replace) taken together, as the archive
    # records them (merge_stats), so that these numbers are the archive's and the report's.
    by_env: dict[int, PlayStats] = {}
    for p in played:
        by_env[p.env_id] = merge_stats(by_env[p.env_id], p.stats) if p.env_id in by_env else p.stats
    means = iteration_means(list(by_env.values()), frontier)
    if played:
        metrics["agent/envs"] = means.envs
        metrics["agent/groups"] = len(played)
    metrics["agent/win_rate"] = means.win_rate
    metrics["agent/win_rate_hint"] = means.win_rate_hint
    if played:
        metrics["agent/mean_turns"] = means.mean_turns
    metrics["regret/mean"] = means.regret
    metrics["frontier/fraction"] = means.frontier_fraction
    if not batch.designer_trains:
        metrics["samples/designer_untrained"] = len(batch.designer)
    metrics["designer/reward_mean"] = batch.designer_reward_mean
    if batch.designer_masked:
        metrics["designer/masked_negative"] = batch.designer_masked
    if batch.designer_scale != 1.0:
        metrics["designer/advantage_scale"] = batch.designer_scale
    if batch.designer_held is not None:
        metrics["designer/held"] = batch.designer_held
        metrics["designer/rewarded"] = batch.designer_rewarded
    metrics.update(batch.designer_metrics)
    metrics["groups/total"] = batch.agent_groups + batch.designer_groups
    metrics["groups/zero_signal"] = batch.agent_zero_signal + batch.designer_zero_signal
    trained = batch.samples
    metrics["samples/agent"] = sum(s.role == "agent" for s in trained)
    metrics["samples/designer"] = sum(s.role == "designer" for s in trained)
    if update.skipped:
        metrics["train/skipped"] = 1.0
    else:
        metrics.update(update.metrics)
    return metrics


def curriculum_metrics(
    designs: list[Design], played: list[PlayedEnv], frontier: tuple[float, float]
) -> dict[str, Any]:
    """How the iteration's new valid designs played (their groups taken together, probe included):
    ``designer/new_played`` (how many were played), ``designer/new_win_rate`` (the mean of their no-hint win
    rates) and ``designer/band_fraction`` (the share of them whose no-hint win rate lies in the frontier
    [low, high], inclusive); both None when no new design was played."""
    low, high = frontier
    new = {d.env_id for d in designs if d.valid}
    rates = [p.stats.win_rate_nohint for p in merged_played(played) if p.env_id in new]
    return {
        "designer/new_played": len(rates),
        "designer/new_win_rate": sum(rates) / len(rates) if rates else None,
        "designer/band_fraction": sum(low <= r <= high for r in rates) / len(rates) if rates else None,
    }


def format_metrics(played: list[PlayedEnv]) -> dict[str, float]:
    """The agent's malformed- and illegal-action rates over the iteration's turns (no-hint and hint episodes,
    :func:`spade_rl.stats.format_counts`): ``format/malformed`` and ``format/illegal`` over all of them, and
    ``format/<family>/malformed`` / ``illegal`` per game family (``PlayedEnv.family``); none without turns."""
    by_family: dict[str, FormatCounts] = {}
    for p in played:
        counts = format_counts([*p.nohint, *p.hint])
        family = p.family or "unknown"
        by_family[family] = by_family.get(family, FormatCounts()) + counts
    metrics: dict[str, float] = {}
    total = FormatCounts()
    for family, counts in sorted(by_family.items()):
        total += counts
        if counts.turns:
            metrics[f"format/{family}/malformed"] = counts.malformed_rate
            metrics[f"format/{family}/illegal"] = counts.illegal_rate
    if total.turns:
        metrics["format/malformed"] = total.malformed_rate
        metrics["format/illegal"] = total.illegal_rate
    return metrics
