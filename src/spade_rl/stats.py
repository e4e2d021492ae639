"""Episode statistics, computed in one place: what the loop records, the report shows and the CLI prints.

    summary = summarise(episodes)                  # win rate, mean return, mean turns, how they ended
    stats = play_stats(nohint, hint)               # one environment's play: the archive's PlayStats
    means = iteration_means(all_stats, (0.15, 0.85))   # one iteration: plain means over its environments

A win is the rollout's (``Episode.won``: terminated with a final reward of 1); regret is the rewards
module's (mean hint return minus mean no-hint return, floored at 0). The frontier is the archive's
range of no-hint win rates (``archive.frontier_low`` .. ``frontier_high``) that counts an environment as
learnable; ``frontier_fraction`` is the share of an iteration's environments inside it.

The agent's format (:func:`format_counts`): a turn is **malformed** when its action holds no closed answer
(:func:`malformed_action`: no ``\\boxed{...}`` and no ``<answer>...</answer>``; in the tool-use setting a
``<tool_call>...</tool_call>`` counts too), and **illegal** when the environment said the action was invalid
(``Turn.invalid``: :func:`spade_rl.rollout.invalid_action`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from spade_rl.archive import PlayStats
from spade_rl.rewards import regret
from spade_rl.rollout import Episode


@dataclass(frozen=True)
class EpisodeSummary:
    """Episodes taken together; the means are None for no episodes."""

    episodes: int
    win_rate: float | None
    mean_return: float | None
    mean_turns: float | None
    ended_by: dict[str, int] = field(default_factory=dict)  # stop reason -> episodes


def summarise(episodes: Sequence[Episode]) -> EpisodeSummary:
    """Win rate, mean return, mean turns and the stop reasons of ``episodes``."""
    n = len(episodes)
    if n == 0:
        return EpisodeSummary(0, None, None, None, {})
    return EpisodeSummary(
        episodes=n,
        win_rate=sum(e.won for e in episodes) / n,
        mean_return=sum(e.return_ for e in episodes) / n,
        mean_turns=sum(len(e.turns) for e in episodes) / n,
        ended_by=dict(sorted(Counter(e.stop_reason for e in episodes).items())),
    )


def play_stats(nohint: Sequence[Episode], hint: Sequence[Episode]) -> PlayStats:
    """One environment's play in one iteration (K episodes without the hint, K with it) as the archive
    records it. The no-hint arm needs at least one episode; without hint episodes (a run that plays none:
    ``loop.hint_plays_per_env = 0``) the hint's numbers are recorded as 0 over ``episodes_hint = 0``, as
    the archive's merge does while one kind has no episode, and :func:`iteration_means` leaves them out."""
    if not nohint:
        raise ValueError(f"play_stats needs episodes without the hint, got none ({len(hint)} with it)")
    without, with_hint = summarise(nohint), summarise(hint)
    return PlayStats(
        episodes_nohint=without.episodes,
        episodes_hint=with_hint.episodes,
        win_rate_nohint=without.win_rate,
        win_rate_hint=with_hint.win_rate if hint else 0.0,
        regret=regret([e.return_ for e in hint], [e.return_ for e in nohint]) if hint else 0.0,
        mean_turns=summarise([*nohint, *hint]).mean_turns,
        mean_return_nohint=without.mean_return,
        mean_return_hint=with_hint.mean_return if hint else 0.0,
    )


@dataclass(frozen=True)
class IterationMeans:
    """Plain means over the environments played in one iteration (None when none was played)."""

    envs: int
    win_rate: float | None
    win_rate_hint: float | None
    regret: float | None
    mean_turns: float | None
    frontier_fraction: float | None


def iteration_means(stats: Sequence[PlayStats], frontier: tuple[float, float]) -> IterationMeans:
    """The iteration's agent numbers from its environments' :class:`PlayStats`; ``frontier`` is the
    archive's (low, high) range of no-hint win rates."""
    n = len(stats)
    if n == 0:
        return IterationMeans(0, None, None, None, None, None)
    low, high = frontier
    hinted = [s for s in stats if s.episodes_hint]  # the hint's numbers mean nothing without its episodes
    return IterationMeans(
        envs=n,
        win_rate=sum(s.win_rate_nohint for s in stats) / n,
        win_rate_hint=sum(s.win_rate_hint for s in hinted) / len(hinted) if hinted else None,
        regret=sum(s.regret for s in hinted) / len(hinted) if hinted else None,
        mean_turns=sum(s.mean_turns for s in stats) / n,
        frontier_fraction=sum(low <= s.win_rate_nohint <= high for s in stats) / n,
    )


def _closed(action: str, opening: str, closing: str) -> bool:
    start = action.find(opening)
    return start >= 0 and action.find(closing, start + len(opening)) >= 0


def malformed_action(action: str, setting: str = "games") -> bool:
    """Whether a turn's action holds no closed answer: ``\\boxed{`` with a ``}`` after it, or ``<answer>``
    with ``</answer>`` after it (and in the ``tool_use`` setting ``<tool_call>`` with ``</tool_call>``)."""
    if _closed(action, "\\boxed{", "}") or _closed(action, "<answer>", "</answer>"):
        return False
    return not (setting == "tool_use" and _closed(action, "<tool_call>", "</tool_call>"))


@dataclass(frozen=True)
class FormatCounts:
    """The agent's turns and how many were malformed or illegal (see the module docstring)."""

    turns: int = 0
    malformed: int = 0
    illegal: int = 0

    def __add__(self, other: FormatCounts) -> FormatCounts:
        return FormatCounts(
            self.turns + other.turns, self.malformed + other.malformed, self.illegal + other.illegal
        )

    @property
    def malformed_rate(self) -> float | None:
        return self.malformed / self.turns if self.turns else None

    @property
    def illegal_rate(self) -> float | None:
        return self.illegal / self.turns if self.turns else None


def format_counts(episodes: Sequence[Episode]) -> FormatCounts:
    """The turns of ``episodes``, malformed and illegal ones counted."""
    total = FormatCounts()
    for e in episodes:
        setting = e.spec.setting
        total += FormatCounts(
            len(e.turns),
            sum(malformed_action(t.action, setting) for t in e.turns),
            sum(t.invalid for t in e.turns),
        )
    return total


def bad_turn_share(episode: Episode) -> float:
    """The share of an episode's turns that were malformed or illegal (0 for an episode without turns)."""
    if not episode.turns:
        return 0.0
    setting = episode.spec.setting
    bad = sum(t.invalid or malformed_action(t.action, setting) for t in episode.turns)
    return bad / len(episode.turns)
