"""The play-time guard: training notices an environment that behaves otherwise in play than validation
saw it, flags it in the archive and so drops it from the training pool and the designer's memory.

Validation plays an environment a few hundred times; training plays it for the whole run, in workers
that have made many instances, at seeds validation never drew. Whatever the battery checks, an
environment can change its behaviour after it (a counter of resets, the date, a seed range). Two signs
of that in an iteration's play, each a stable reason code (``FLAG_REASONS``):

- ``empty_action_won``: an episode was won by an empty action: nothing but spaces, an empty
  ``\\boxed{}`` or ``<answer></answer>``, or one of validation's malformed actions (which validation
  saw lose). No task is answered by nothing: the environment rewards whatever it is sent.
- ``trivial_policy_won``: validation's random policy, played by the probe (:mod:`spade_rl.loop.probe`)
  after the iteration's play, where and as training plays, won ``k`` of its ``n`` episodes with
  ``k / n - max_trivial_win_rate >= shift`` and ``P(X >= k) < p_value``, ``X ~ Binomial(n,
  max_trivial_win_rate)``: validation saw that policy win at most that share. An environment that
  tells validation from training (a seed, a call, a count it sees) is honest only in validation.
- ``one_answer_won``: one answer, the only one of its episodes (said once, or repeated every turn),
  won at ``k`` of the ``n`` distinct seeds played this iteration, ``k >= MIN_DISTINCT_SEEDS`` and

      P(X >= k) < p_value,  X ~ Binomial(n, ONE_ANSWER_RATE)

  (answers compared as :func:`~spade_rl.design.answer_space.answer_key` does). Validation refuses an
  environment whose most common answer wins more than half of its seeds as a constant (its answer
  replay, ``max_answer_replay_win_rate``) and one whose constants of its answer space win where the
  task answers otherwise; an answer that wins far more seeds than that in play is a reward for not
  reading the task (a constant the search did not try, a parser that takes any answer of a shape).
- ``win_rate_shift``: the share of episodes won now (both arms, with and without the hint) lies far
  from the share the archive recorded for the environment in earlier iterations: ``|p_now - p_before|
  >= shift`` and the binomial tail of the count won now under the earlier rate is below ``p_value``,

      tail = P(X >= k) (or P(X <= k) for a drop),  X ~ Binomial(n, p'),  p' = (w + 1) / (m + 2)

  with ``k`` of ``n`` episodes won now, ``w`` of ``m`` before (``p'`` smoothed by Laplace's rule, so
  that a short history of no wins does not make every win impossible). Only when this iteration's
  episodes were played at ``MIN_DISTINCT_SEEDS`` seeds or more: the episodes of one shared seed
  (``loop.group_seeds = "shared"``) rise and fall together, and their count says nothing of a change.
  Not for the package's own games (origin ``reference``, ``TRUSTED_ORIGINS``): their code cannot rig a
  reward, and their win rate rising is the agent learning them. A designed or imported environment
  the agent learns fast can still be flagged by it: the test cannot tell learning from rigging.

The checks are pure functions of episodes and statistics; ``flag_changed`` applies them to an
iteration's play (``SelfPlay.iteration``, after its statistics are recorded) with the thresholds of
``ArchiveConfig`` (``flag_changed``, ``flag_win_rate_shift``, ``flag_p_value``). A flag keeps the
environment's verdict and statistics (``EnvRecord.flagged`` says why); see ``Archive.flag``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spade_rl.archive import Archive, PlayStats
from spade_rl.archive.records import merge_stats
from spade_rl.design.answer_space import answer_key
from spade_rl.design.answers import final_answer
from spade_rl.design.report import MALFORMED_ACTIONS
from spade_rl.loop.stages import PlayedEnv
from spade_rl.rollout import Episode

log = logging.getLogger(__name__)

FLAG_REASONS = ("empty_action_won", "trivial_policy_won", "one_answer_won", "win_rate_shift")
MIN_DISTINCT_SEEDS = 4
# The share of seeds one answer may win (ValidationSettings.max_answer_replay_win_rate's default): more,
# beyond noise, is one_answer_won
ONE_ANSWER_RATE = 0.5
# Origins whose code is the package's (spade_rl.envs.reference): left out of the win-rate test
TRUSTED_ORIGINS = ("reference",)


@dataclass(frozen=True)
class Flag:
    """One environment flagged in one iteration: a code of ``FLAG_REASONS`` and what was seen."""

    env_id: int
    iteration: int
    reason: str
    message: str


def empty_action(action: str) -> bool:
    """Whether an action answers nothing: spaces only, an empty ``\\boxed{}`` or ``<answer></answer>``,
    or one of validation's malformed actions."""
    return not final_answer(action).strip() or action in MALFORMED_ACTIONS


def empty_action_win(episodes: Sequence[Episode]) -> Episode | None:
    """The first won episode whose winning (last) action is empty, or None."""
    return next((e for e in episodes if e.won and e.turns and empty_action(e.turns[-1].action)), None)


def one_answer_win(episodes: Sequence[Episode], p_value: float) -> str:
    """Why one answer won too widely in ``episodes`` (see the module docstring), or ''."""
    played = {e.spec.seed for e in episodes}
    seeds_won: dict[str, set[int]] = {}
    examples: dict[str, str] = {}
    for episode in episodes:
        if not (episode.won and episode.turns):
            continue
        keys = {answer_key(turn.action) for turn in episode.turns}
        if len(keys) == 1:
            key = keys.pop()
            seeds_won.setdefault(key, set()).add(episode.spec.seed)
            examples.setdefault(key, episode.turns[-1].action)
    for key, seeds in sorted(seeds_won.items(), key=lambda item: -len(item[1])):
        k, n = len(seeds), len(played)
        if k < MIN_DISTINCT_SEEDS:
            break
        tail = binomial_tail(k, n, ONE_ANSWER_RATE, upper=True)
        if tail < p_value:
            return (
                f"the answer {examples[key][:80]!r}, the only one of its episodes, won at {k} of {n} seeds "
                f"played (a tail probability of {tail:.1e} if one answer won at most {ONE_ANSWER_RATE:.0%} "
                f"of them; flag_p_value {p_value:g})"
            )
    return ""


def probe_shift(k: int, n: int, rate: float, shift: float, p_value: float) -> str:
    """Why ``k`` wins of ``n`` probe episodes depart from the ``rate`` validation allowed (see the
    module docstring), or ''."""
    if not n or k / n - rate < shift:
        return ""
    tail = binomial_tail(k, n, rate, upper=True)
    if tail >= p_value:
        return ""
    return (
        f"validation's random policy, played as training plays, won {k} of {n} episodes; validation let it "
        f"win at most {rate:.0%} (a tail probability of {tail:.1e}; flag_p_value {p_value:g}, "
        f"flag_win_rate_shift {shift:g})"
    )


def won_count(stats: PlayStats) -> tuple[int, int]:
    """Episodes won and played, both arms together: ``(round(w_n * n_n + w_h * n_h), n_n + n_h)``."""
    won = stats.win_rate_nohint * stats.episodes_nohint + stats.win_rate_hint * stats.episodes_hint
    return round(won), stats.episodes


def binomial_tail(k: int, n: int, p: float, upper: bool) -> float:
    """``P(X >= k)`` (``upper``) or ``P(X <= k)`` for ``X ~ Binomial(n, p)``, summed exactly."""
    terms = range(k, n + 1) if upper else range(0, k + 1)
    return min(1.0, sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in terms))


def win_rate_shift(before: Sequence[PlayStats], now: PlayStats, shift: float, p_value: float) -> str:
    """Why ``now`` departs from ``before`` (the earlier iterations' statistics), or '' when it does not
    or there is no history: see the module docstring for the test."""
    if not before:
        return ""
    w = m = 0
    for stats in before:
        won, played = won_count(stats)
        w, m = w + won, m + played
    k, n = won_count(now)
    if not m or not n:
        return ""
    rate_before, rate_now = w / m, k / n
    if abs(rate_now - rate_before) < shift:
        return ""
    tail = binomial_tail(k, n, (w + 1) / (m + 2), upper=rate_now > rate_before)
    if tail >= p_value:
        return ""
    return (
        f"won {k} of {n} episodes this iteration against {w} of {m} before (a tail probability of "
        f"{tail:.1e} under the earlier rate; flag_p_value {p_value:g}, flag_win_rate_shift {shift:g})"
    )


def changed(
    episodes: Sequence[Episode],
    before: Sequence[PlayStats],
    now: PlayStats,
    shift: float,
    p_value: float,
    check_rate: bool = True,
    probe: tuple[int, int] | None = None,
    trivial_rate: float = 0.15,
) -> tuple[str, str] | None:
    """The first sign of a change in one environment's play of one iteration, as (reason, message), or
    None. ``episodes``: all its episodes of the iteration; ``now``: their statistics; ``probe``: (won,
    played) of the probe's random policy, which validation let win at most ``trivial_rate``;
    ``check_rate`` False leaves out the probe, one-answer and win-rate tests (the empty-action one
    always runs)."""
    won = empty_action_win(episodes)
    if won is not None:
        return (
            "empty_action_won",
            f"an episode (seed {won.spec.seed}) was won by the empty action {won.turns[-1].action[:80]!r}",
        )
    if check_rate and probe is not None:
        why = probe_shift(*probe, trivial_rate, shift, p_value)
        if why:
            return "trivial_policy_won", why
    if check_rate and len({e.spec.seed for e in episodes}) >= MIN_DISTINCT_SEEDS:
        why = one_answer_win(episodes, p_value)
        if why:
            return "one_answer_won", why
        why = win_rate_shift(before, now, shift, p_value)
        if why:
            return "win_rate_shift", why
    return None


def flag_changed(
    archive: Archive,
    played: Sequence[PlayedEnv],
    iteration: int,
    probe: Callable[[int], tuple[int, int]] | None = None,
    trivial_rate: float = 0.15,
) -> list[Flag]:
    """Apply ``changed`` to each environment played in ``iteration`` (its groups together, against its
    statistics of earlier iterations, and ``probe(env_id)``'s (won, played) when given: see
    ``loop.probe.make_probe``; ``trivial_rate``: validation's ``max_trivial_win_rate``) and flag in
    ``archive`` those that changed; the flags set. Off when ``archive.config.flag_changed`` is false."""
    config = archive.config
    if not config.flag_changed:
        return []
    groups: dict[int, list[PlayedEnv]] = {}
    for env in played:
        groups.setdefault(env.env_id, []).append(env)
    flags = []
    for env_id, envs in groups.items():
        episodes = [e for env in envs for e in (*env.nohint, *env.hint)]
        now = envs[0].stats
        for env in envs[1:]:
            now = merge_stats(now, env.stats)
        before = [h.stats for h in archive.stats_history(env_id) if h.iteration < iteration]
        # The package's own games cannot rig their rewards: a rise in their win rate is the agent learning
        # (a fixed-pool run saw maze go from 21 of 64 to 31 of 32 won and lose it from its pool)
        check_rate = archive.get(env_id).origin not in TRUSTED_ORIGINS
        probed = probe(env_id) if probe is not None and check_rate else None
        found = changed(
            episodes,
            before,
            now,
            config.flag_win_rate_shift,
            config.flag_p_value,
            check_rate,
            probed,
            trivial_rate,
        )
        if found is not None and archive.flag(env_id, iteration, *found):
            flags.append(Flag(env_id, iteration, *found))
            log.warning("environment %d flagged in iteration %d (%s): %s", env_id, iteration, *found)
    return flags
