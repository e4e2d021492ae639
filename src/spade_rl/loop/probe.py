"""The play-time guard's probe: validation's random policy, played where and as training plays.

Validation refused every environment whose random policy (answers drawn at random from the numbers and
words of the first observation, one per turn: ``design.answers.trivial_actions``, "random answers")
won more than ``max_trivial_win_rate`` of its episodes. An environment that tells validation from
training (a first seed, a call validation makes and training does not, a count of instances) is honest
only there; the probe plays the same policy after an iteration's play, through the same executor, in
the workers the pool places it in (those that just played it, or fresh ones), at seeds drawn from the
run's generator, so that what it wins is what that policy wins in training. The guard compares the two
(``loop.guard``, ``trivial_policy_won``).

Usage::

    won, played = probe_wins(executor, source, env_kwargs, seeds=[...], max_turns=4, timeout_s=5.0)
    probe = make_probe(executor, archive, random.Random(seed), validation_settings, timeout_s=5.0)
    won, played = probe(env_id)  # PROBE_EPISODES episodes of an archived environment, as it is played

Everything the environment answers is data: a failed call or an answer off the contract ends that
episode as a loss; nothing raises here for anything it does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from spade_rl.archive import Archive
from spade_rl.design.answers import trivial_actions
from spade_rl.design.report import ValidationSettings
from spade_rl.design.static import play_kwargs
from spade_rl.envs.contract import ContractViolation, check_reset_value, check_step_value
from spade_rl.executor import Executor
from spade_rl.sandbox import CallResult, Sandbox

POLICY = "random answers"  # the policy of trivial_actions the probe plays
PROBE_EPISODES = 16  # episodes per environment and iteration


def make_probe(
    executor: Executor | Sandbox,
    archive: Archive,
    rng: random.Random,
    validation: ValidationSettings,
    timeout_s: float,
) -> Callable[[int], tuple[int, int]]:
    """``probe(env_id)``: ``probe_wins`` for an environment of ``archive``, with the constructor
    arguments it is played with, ``validation.max_turns`` turns and ``PROBE_EPISODES`` seeds of ``rng``."""

    def probe(env_id: int) -> tuple[int, int]:
        record = archive.get(env_id)
        kwargs = play_kwargs(record.source, record.env_kwargs, validation.max_turns)
        seeds = [rng.randrange(2**31) for _ in range(PROBE_EPISODES)]
        return probe_wins(
            executor, record.source, kwargs, seeds, validation.max_turns, timeout_s, validation.reward_range
        )

    return probe


def probe_wins(
    executor: Executor | Sandbox,
    source: str,
    kwargs: dict,
    seeds: Sequence[int],
    max_turns: int,
    timeout_s: float,
    reward_range: tuple[float, float] = (0.0, 1.0),
) -> tuple[int, int]:
    """One episode of validation's random policy at each of ``seeds``, every instance opened together
    and stepped in turn as ``rollout.run_episodes`` plays a batch; returns (episodes won, episodes).
    A win is terminated with a reward of at least 1, as ``Episode.won`` counts it; a reward outside
    ``reward_range`` is off the contract."""
    opened = executor.open_many([(source, kwargs)] * len(seeds), timeout_s)
    handles = [result.value if result.ok else None for result in opened]
    won = 0
    try:
        live = [i for i, handle in enumerate(handles) if handle is not None]
        resets = executor.call_many([(handles[i], "reset", {"seed": seeds[i]}) for i in live], timeout_s)
        actions: dict[int, list[str]] = {}
        for i, result in zip(live, resets, strict=True):
            observation = _observation(result)
            if observation is not None:
                actions[i] = trivial_actions(observation, seeds[i], max_turns)[POLICY]
        turn = 0
        live = [i for i in actions if actions[i]]
        while live:
            results = executor.call_many(
                [(handles[i], "step", {"action": actions[i][turn]}) for i in live], timeout_s
            )
            turn += 1
            going = []
            for i, result in zip(live, results, strict=True):
                ended, win = _ended(result, reward_range)
                won += win
                if not ended and turn < len(actions[i]):
                    going.append(i)
            live = going
    finally:
        for handle in handles:
            if handle is not None:
                executor.close_env(handle)
    return won, len(seeds)


def _observation(result: CallResult) -> str | None:
    if not result.ok:
        return None
    try:
        return check_reset_value(result.value)[0]
    except ContractViolation:
        return None


def _ended(result: CallResult, reward_range: tuple[float, float]) -> tuple[bool, bool]:
    """(the episode ended, it was won) after a step's answer; a failure or an answer off the contract
    ends it, lost."""
    if not result.ok:
        return True, False
    try:
        step = check_step_value(result.value, reward_range)
    except ContractViolation:
        return True, False
    ended = step.terminated or step.truncated
    return ended, step.terminated and step.reward >= 1.0
