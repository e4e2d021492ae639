"""Episode statistics in one place (spade_rl.stats): the loop, the report and the CLI read the same."""

import pytest

from spade_rl.archive import PlayStats
from spade_rl.rollout import Episode, EpisodeSpec, Turn
from spade_rl.stats import iteration_means, play_stats, summarise


def episode(reward: float, turns: int, stop: str = "terminated", use_hint: bool = False) -> Episode:
    steps = [Turn("a", "o", 0.0, False, False, "stop") for _ in range(turns - 1)]
    steps.append(Turn("a", "o", reward, stop == "terminated", stop != "terminated", "stop"))
    return Episode(EpisodeSpec("", use_hint=use_hint), turns=steps, stop_reason=stop)


def test_summarise_counts_wins_returns_turns_and_endings():
    episodes = [episode(1.0, 2), episode(0.5, 4), episode(0.0, 3, stop="max_turns")]
    summary = summarise(episodes)
    assert summary.episodes == 3
    assert summary.win_rate == pytest.approx(1 / 3)  # a partial reward is no win
    assert summary.mean_return == pytest.approx(sum(e.return_ for e in episodes) / 3)
    assert summary.mean_turns == pytest.approx(3.0)
    assert summary.ended_by == {"max_turns": 1, "terminated": 2}
    empty = summarise([])
    assert (empty.episodes, empty.win_rate, empty.mean_return, empty.ended_by) == (0, None, None, {})


def test_play_stats_is_what_the_archive_records():
    nohint = [episode(0.0, 4, stop="max_turns"), episode(1.0, 2)]
    hint = [episode(1.0, 1, use_hint=True), episode(1.0, 3, use_hint=True)]
    stats = play_stats(nohint, hint)
    assert isinstance(stats, PlayStats)
    assert (stats.episodes_nohint, stats.episodes_hint) == (2, 2)
    assert (stats.win_rate_nohint, stats.win_rate_hint) == (0.5, 1.0)
    returns_no, returns_hint = [e.return_ for e in nohint], [e.return_ for e in hint]
    assert stats.regret == pytest.approx(max(0.0, sum(returns_hint) / 2 - sum(returns_no) / 2))
    assert stats.mean_turns == pytest.approx(2.5)  # over both arms
    with pytest.raises(ValueError, match="without the hint, got none"):
        play_stats([], hint)
    alone = play_stats(nohint, [])  # a run that plays no hint episode (loop.hint_plays_per_env = 0)
    assert (alone.episodes_hint, alone.win_rate_hint, alone.regret, alone.mean_return_hint) == (
        0,
        0.0,
        0.0,
        0.0,
    )
    assert alone.win_rate_nohint == 0.5 and alone.mean_turns == pytest.approx(3.0)


def test_iteration_means_over_environments_with_the_frontier():
    low = play_stats([episode(0.0, 2, stop="max_turns")], [episode(1.0, 1, use_hint=True)])
    mid = play_stats(
        [episode(1.0, 1), episode(0.0, 1, stop="max_turns")], [episode(1.0, 1, use_hint=True)] * 2
    )
    means = iteration_means([low, mid], (0.15, 0.85))
    assert means.envs == 2
    assert means.win_rate == pytest.approx(0.25) and means.win_rate_hint == 1.0
    assert means.frontier_fraction == 0.5  # 0.0 is outside [0.15, 0.85], 0.5 inside
    assert means.regret == pytest.approx((low.regret + mid.regret) / 2)
    assert iteration_means([], (0.15, 0.85)).win_rate is None
    # environments played without the hint count for the win rate, not for the hint's numbers
    alone = play_stats([episode(1.0, 1)], [])
    means = iteration_means([low, alone], (0.15, 0.85))
    assert means.win_rate == pytest.approx(0.5) and means.win_rate_hint == 1.0 and means.regret == low.regret
    none = iteration_means([alone], (0.15, 0.85))
    assert (none.win_rate, none.win_rate_hint, none.regret) == (1.0, None, None)
