"""The trivial-policy search of the validation battery, played as training plays.

An environment cannot tell these episodes from training's: each is an instance of its own, made in
a worker that has run nothing of validation's (no ``solution()`` call, no replayed seed), several
opened together and reset first, then stepped in turn, as ``rollout.run_episodes`` plays a batch;
a worker is left once it has made as many instances as the sandbox lets one make
(``SandboxConfig.episodes_per_worker``), as the pool retires it. The seeds are those of the battery,
drawn from a random source the environment cannot read (``ValidationReport.seed``).

What is played (the answer space comes from :mod:`spade_rl.design.answer_space`):

- each malformed action once (``malformed_action_wins`` if it wins);
- the trivial policies of :func:`~spade_rl.design.answers.trivial_actions` at every trivial seed, and
  ``shaped_guesses`` random answers of each seed's solution's shape (a random number of its digit
  count, a random word of its length), each repeated every turn: none may win more than
  ``max_trivial_win_rate`` of its episodes (``trivial_policy_wins``). One that wins more at the
  trivial seeds plays again at ``trivial_confirm_seeds`` more, and its rate over all of them decides:
  a sound environment that a policy wins 8% (10%) of the time is then refused by the luck of the draw
  1.6% (5.6%) of the time rather than 13% (21%) at 16 seeds alone, one that it wins 20% of the time
  60% rather than 65%, one that it wins half the seeds as before (binomial tails, 48 more seeds);
- up to ``answer_space_constants`` constants of the answer space, each repeated every turn, first at
  ``SCREEN_SEEDS`` seeds, then, when one won there where its answer is not the task's, at every
  trivial seed: none may win more than ``max_answer_replay_win_rate`` (half) of them where the
  solution answers something else (``trivial_policy_wins``; a constant that is the seed's answer wins
  fairly; one answer may win half the seeds, as the answer replay lets the most common one: a task with
  more than one right answer, such as an optimal schedule, is won by another seed's at some seeds);
- the answer replay's constant (``answer_replay_wins``, see ``answer_replay``);
- with ``max_copy_win_rate`` set, the copy policies (``copy_search``): each answers one place of the
  first observation at every seed, its k-th number or its k-th word; a place that holds the seed's
  answer at more than that share of the trivial seeds is played, and may win at most that share
  (``trivial_policy_wins``; over it at the trivial seeds, ``trivial_confirm_seeds`` more decide);
- with ``refuse_undetermined_answers`` set, the undetermined answer (:mod:`spade_rl.design.undetermined`):
  two seeds that show the same first observation but whose solutions begin differently each play the
  other's first action; when both episodes end there, unwon, nothing the agent can see tells the seeds
  apart and no first action wins both (``undetermined_answer``): the answer is drawn, not asked;
- where the environment is played with several answers (the constructor argument ``attempts`` > 1: the
  question kit's ``design.question_attempts``), the known answers in turn: at every trivial seed, the
  most common answers of other seeds' solutions (the answer seeds', else the other trivial seeds'), most
  common first, one a turn; it may win at most ``max_trivial_win_rate`` of its episodes
  (``trivial_policy_wins``), counting every win, as the random policy's: a question of three options
  allowed two answers is won two times in three without being read. With one answer it would be the
  first of them as a constant, which the search plays already.

:mod:`spade_rl.design.validate` runs it after its other checks; it raises ``Failed`` as they do.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade_rl.design.answer_space import (
    answer_key,
    constant_candidates,
    numbers_of,
    shaped_guess,
    source_literals,
    undeserved,
    words_of,
    wrap_like,
)
from spade_rl.design.answers import common_answer, final_answer, in_words, trivial_actions
from spade_rl.design.report import MALFORMED_ACTIONS, Failed
from spade_rl.design.transcripts import canonical, ended, short, value_of

if TYPE_CHECKING:
    from spade_rl.design.validate import _Battery
    from spade_rl.sandbox import EnvHandle

BATCH = 8  # instances opened together in one worker, as training opens the episodes of a group
SCREEN_SEEDS = 3  # seeds every constant plays before the suspicious ones play every trivial seed
# An episode of one action repeated stops once this many steps in a row gave the same answer
# (observation, reward, flags, info) but for its numbers (a count of turns left): the environment no
# longer changes under it (a guessing game's "too low" to the same guess), and its remaining turns would
# cost most of the search. The random answers play every turn. (An environment that rewards a constant
# after some repeats that look alike is left to the play-time guard, which sees one answer win across
# instances.)
STALL_STEPS = 2
HELD = ("trivial", "shaped", "in turn")  # the policies held to max_trivial_win_rate
# Trivial policies also played with words around their answers, as a model in play writes a turn (text
# around its \\boxed{}), in other words each turn: an environment that tells validation's short actions
# from play's, and is honest only with the short ones, is met by these. The first repeated answer and
# the random answers, where the task asks for a format to put words around.
IN_WORDS = ("repeat ", "random answers")
COPY_POSITIONS = (
    16  # the copy policies answer one of the first (or last) 16 numbers or words of the first observation
)
COPY_WORDS_FROM_END = 2  # the copy policies answer one of the last 2 words (see copies)
COPY_SCAN = 1024  # numbers and words read of a first observation to find the last ones
COPY_SUSPECTS = 4  # at most this many places are played (those most often the answer first)
Play = tuple[str, str, int, list[str]]  # kind, name, seed, actions
_DIGITS = re.compile(r"\d+")


@dataclass
class AnswerSpace:
    """What the battery's worker showed at the trivial and answer seeds: each seed's first
    observation and ``solution()``."""

    trivial_seeds: list[int]
    answer_seeds: list[int]
    observations: dict[int, str]
    solutions: dict[int, list[str]]
    worker: EnvHandle | None = None  # the battery's worker, which showed them


class TrainingPlay:
    """Episodes played as training plays them (see the module docstring)."""

    def __init__(self, battery: _Battery, kwargs: dict):
        self.battery = battery
        self.kwargs = kwargs
        self.anchor: EnvHandle | None = None  # an open instance of the current worker
        # The words put around the trivial policies' answers, drawn from a source the environment cannot
        # read (not from the battery's seed, which its first reset is given).
        self.words = battery.private

    def play(self, plays: list[tuple[int, list[str], bool]]) -> list[list]:
        """One transcript per (seed, actions, stall), in order: the reset, then each action until the
        episode ends, or, when ``stall``, until ``STALL_STEPS`` steps in a row answered the same."""
        transcripts: list[list] = []
        for start in range(0, len(plays), BATCH):
            chunk = plays[start : start + BATCH]
            envs = self.open(len(chunk))
            together = [
                [self.battery.reset(env, seed)] for env, (seed, _, _) in zip(envs, chunk, strict=True)
            ]
            for turn in range(max(len(actions) for _, actions, _ in chunk)):
                for env, (_, actions, stall), transcript in zip(envs, chunk, together, strict=True):
                    if turn < len(actions) and not ended(transcript) and not (stall and stalled(transcript)):
                        transcript.append(self.battery.step(env, actions[turn]))
            for env in envs[:-1]:
                self.battery.discard(env)
            if self.anchor is not None:
                self.battery.discard(self.anchor)
            self.anchor = envs[-1]  # kept open until the next batch is made beside it
            transcripts += together
            self.battery.within_budget(f"in trivial_policies, after {len(transcripts)} episodes")
        return transcripts

    def open(self, count: int) -> list[EnvHandle]:
        """``count`` new instances in the current worker, or in a fresh one when it has none open or
        would make more than the sandbox lets a worker make."""
        battery = self.battery
        limit = battery.sandbox.config.episodes_per_worker
        if self.anchor is not None and self.anchor.worker_instances + count > limit:
            battery.discard(self.anchor)
            self.anchor = None
        envs = []
        if self.anchor is None:
            envs.append(battery.open(self.kwargs, fresh_worker=True))
        beside = self.anchor or envs[0]
        requests = [(battery.source, self.kwargs)] * (count - len(envs))
        if requests:
            opened = battery.sandbox.open_many(requests, battery.settings.call_timeout_s, beside=beside)
            for result in opened:
                handle = value_of(result, "open")
                battery.handles.append(handle)
                envs.append(handle)
        return envs


def stalled(transcript: list) -> bool:
    """Whether the last ``STALL_STEPS`` steps of ``transcript`` gave one answer but for its numbers."""
    last = [_DIGITS.sub("#", canonical(step)) for step in transcript[1:][-STALL_STEPS:]]
    return len(last) == STALL_STEPS and len(set(last)) == 1


def answer_space(battery: _Battery, env: EnvHandle) -> AnswerSpace:
    """Reset ``env`` (the battery's worker) at the trivial and answer seeds, and ask each for its
    ``solution()``."""
    s = battery.settings
    trivial = battery.derived("trivial", s.trivial_seeds)
    answers = battery.derived("answers", s.answer_seeds)
    space = AnswerSpace(trivial, answers, {}, {}, env)
    for seed in dict.fromkeys([*trivial, *answers]):
        space.observations[seed] = battery.reset(env, seed)[0]
        space.solutions[seed] = battery.solution(env)
    return space


def extend(battery: _Battery, space: AnswerSpace, seeds: list[int]) -> None:
    """Add ``seeds``' first observations and solutions to ``space``, from the battery's worker."""
    for seed in seeds:
        if seed not in space.observations:
            space.observations[seed] = battery.reset(space.worker, seed)[0]
            space.solutions[seed] = battery.solution(space.worker)


def won(battery: _Battery, transcript: list) -> bool:
    return len(transcript) > 1 and battery.won(transcript[-1])


def episode_return(battery: _Battery, transcript: list) -> float:
    """An episode's return as a share of the reward range: its final reward if it terminated, else the
    range's low end (a truncated or unfinished episode returns nothing, as training counts it)."""
    low, high = battery.settings.reward_range
    last = transcript[-1] if len(transcript) > 1 else None
    reward = last[1] if last is not None and last[2] else low
    return (reward - low) / (high - low)


def played_won(battery: _Battery, play: TrainingPlay, plays: list[Play]) -> list[tuple[bool, float]]:
    """Whether each of ``plays`` (kind, name, seed, actions) won, and its return (``episode_return``),
    played as training plays; every policy that repeats one action may stop once the game no longer
    changes."""
    episodes = [(seed, actions, len(set(actions)) == 1) for _, _, seed, actions in plays]
    return [(won(battery, t), episode_return(battery, t)) for t in play.play(episodes)]


def final_of(space: AnswerSpace, seed: int) -> str:
    """The final action of ``seed``'s solution ("" for none)."""
    actions = space.solutions[seed]
    return actions[-1] if actions else ""


def policy_plays(
    battery: _Battery, play: TrainingPlay, space: AnswerSpace, seeds: list[int], rng: random.Random
) -> list[Play]:
    """The plays of the policies held to ``max_trivial_win_rate`` at ``seeds`` (kind, name, seed,
    actions): the trivial policies, the shaped guesses and, where the environment takes several
    answers, the known answers in turn."""
    s = battery.settings
    plays = []
    for seed in seeds:
        policies = trivial_actions(space.observations[seed], seed, s.max_turns)
        for name, actions in policies.items():
            plays.append(("trivial", name, seed, actions))
        for prefix in IN_WORDS:
            name = next(name for name in policies if name.startswith(prefix))
            actions = policies[name]
            if actions and actions[0] != final_answer(actions[0]):  # a format to put words around
                worded = [in_words(action, play.words) for action in actions]
                plays.append(("trivial", f"{name}, in words around it", seed, worded))
        final = final_of(space, seed)
        for _ in range(s.shaped_guesses):
            guess = wrap_like(final) % shaped_guess(final_answer(final), rng)
            plays.append(("shaped", guess, seed, [guess] * s.max_turns))
        if several_answers(play.kwargs):
            plays.append(("in turn", "", seed, known_in_turn(space, seed, s.max_turns)))
    return plays


def policy_name(kind: str, name: str, play: TrainingPlay) -> str:
    """A policy held to the trivial caps, as a message names it."""
    if kind == "trivial":
        return f"the trivial policy '{name}'"
    if kind == "shaped":
        return "random answers of its answers' shape"
    return (
        f"other seeds' most common answers, one a turn (the environment takes {play.kwargs.get('attempts')})"
    )


def policy_key(kind: str, name: str) -> tuple[str, str]:
    """The policy a play belongs to: the shaped guesses are one policy whatever they guess."""
    return (kind, name if kind != "shaped" else "")


def search(battery: _Battery, play: TrainingPlay, space: AnswerSpace) -> None:
    """The trivial policies, the shaped guesses, the malformed actions and the answer space's constants
    (see the module docstring); ``Failed`` for the first that wins too often."""
    s = battery.settings
    seeds, cap = space.trivial_seeds, s.max_trivial_win_rate
    rng = random.Random(f"trivial_search:{battery.seed}")
    finals = {seed: final_of(space, seed) for seed in space.solutions}
    wraps = {seed: wrap_like(finals[seed]) for seed in seeds}
    known = {final_answer(action) for action in finals.values()}
    plays: list[Play] = [("malformed", a, seeds[0], [a]) for a in MALFORMED_ACTIONS]
    plays += policy_plays(battery, play, space, seeds, rng)
    shown = [*(space.observations[seed] for seed in space.observations), battery.hint]
    constants = constant_candidates(
        sorted(known), shown, source_literals(battery.source), s.answer_space_constants, rng
    )
    screen = seeds[:SCREEN_SEEDS]
    plays += [("constant", c, seed, [wraps[seed] % c] * s.max_turns) for c in constants for seed in screen]
    rng.shuffle(plays)  # no order of the policies for an environment to learn
    outcomes = played_won(battery, play, plays)

    wins: dict[tuple[str, str], list[int]] = {}
    returns: dict[tuple[str, str], list[float]] = {}
    for (kind, name, seed, _), (outcome, share) in zip(plays, outcomes, strict=True):
        if kind == "malformed" and outcome:
            raise Failed(
                "malformed_action_wins",
                f"the malformed action {name!r} wins the episode at seed {seed}, played as training plays",
            )
        if kind == "constant":
            outcome = outcome and undeserved(name, finals[seed])
        wins.setdefault(policy_key(kind, name), []).append(int(outcome))
        returns.setdefault(policy_key(kind, name), []).append(share)

    def over_cap(key: tuple[str, str]) -> bool:
        results, shares = wins[key], returns[key]
        return sum(results) > cap * len(results) or (
            s.max_trivial_mean_return is not None and sum(shares) > s.max_trivial_mean_return * len(shares)
        )

    over = {key for key in wins if key[0] in HELD and over_cap(key)}
    first = {key: (sum(wins[key]), len(wins[key]), sum(returns[key])) for key in over}
    if over and s.trivial_confirm_seeds:
        # Over the cap at the first seeds: played again at more seeds before a verdict, the pooled rate
        # deciding, so that a sound environment a policy wins a little less often than the cap is not
        # refused by the luck of 16 seeds (at a true rate of 8%, 3 wins of 16 come 13% of the time, 1.6%
        # with 48 more; see the module docstring).
        more_seeds = battery.derived("trivial_confirm", s.trivial_confirm_seeds)
        extend(battery, space, more_seeds)
        candidates = policy_plays(battery, play, space, more_seeds, rng)
        again = [p for p in candidates if policy_key(p[0], p[1]) in over]
        rng.shuffle(again)
        for (kind, name, _, _), (outcome, share) in zip(again, played_won(battery, play, again), strict=True):
            wins[policy_key(kind, name)].append(int(outcome))
            returns[policy_key(kind, name)].append(share)
    for key in sorted(over):
        kind, name = key
        results = wins[key]
        if not over_cap(key):
            continue
        count, total, earned = first[key]
        more = len(results) - total
        if sum(results) <= cap * len(results):  # over the cap on its mean return, not its wins
            after = (
                f", {sum(returns[key]) / len(results):.2f} over {len(results)} with {more} more"
                if more
                else ""
            )
            raise Failed(
                "trivial_policy_wins",
                f"{policy_name(kind, name, play)} earns a mean return of {earned / total:.2f} of the "
                f"reward range over {total} episodes{after} without playing (it wins {sum(results)} of "
                f"them): partial credit for an answer that needs no reading; at most "
                f"{s.max_trivial_mean_return:.2f} may be earned that way (max_trivial_mean_return)",
            )
        after = f", and {sum(results)} of {len(results)} with {more} more seeds" if more else ""
        if kind == "trivial":
            what = f"the trivial policy '{name}' wins {count} of {total} seeds{after}"
        elif kind == "shaped":
            what = (
                f"random answers of its answers' shape win {count} of {total} episodes "
                f"({s.shaped_guesses} at each of {len(seeds)} seeds){after}"
            )
        else:
            what = (
                f"other seeds' most common answers, one a turn, win {count} of {total} seeds{after} "
                f"(the environment takes {play.kwargs.get('attempts')} answers)"
            )
        raise Failed(
            "trivial_policy_wins",
            f"{what}; at most {cap:.0%} may be won without playing (max_trivial_win_rate)",
        )
    suspects = [name for (kind, name), results in wins.items() if kind == "constant" and any(results)]
    rest = seeds[SCREEN_SEEDS:]
    more = [(c, seed, [wraps[seed] % c] * s.max_turns) for c in suspects for seed in rest]
    outcomes = [won(battery, t) for t in play.play([(seed, actions, True) for _, seed, actions in more])]
    for (c, seed, _), outcome in zip(more, outcomes, strict=True):
        wins[("constant", c)].append(int(outcome and undeserved(c, finals[seed])))
    rate = s.max_answer_replay_win_rate
    for c in suspects:
        count = sum(wins[("constant", c)])
        if count > rate * len(seeds):
            raise Failed(
                "trivial_policy_wins",
                f"the constant answer {short(wraps[seeds[0]] % c)}, repeated, wins {count} of "
                f"{len(seeds)} seeds whose solution answers otherwise; one answer may win at most "
                f"{rate:.0%} of them (max_answer_replay_win_rate)",
            )


def copies(observation: str) -> dict[str, str]:
    """The copy policies' answers for an episode that opened with ``observation``, by place: its k-th
    number (``"number k"``) and its k-th word (``"word k"``), k up to ``COPY_POSITIONS``, and its numbers
    counted from its end (``"number k from the end"``: an answer printed last, after a question of any
    length, is at one place from the end), and its last ``COPY_WORDS_FROM_END`` words. (Not more words
    from the end: a repeating pattern cut off at the end holds its next word at a fixed distance back,
    and the held-out pattern game is won 68% of the time by its 4th word from the end.) What an agent
    sees of it counts (its first 4000 characters)."""
    numbers, words = numbers_of(observation, COPY_SCAN), words_of(observation, COPY_SCAN)
    found = {f"number {k}": text for k, text in enumerate(numbers[:COPY_POSITIONS], 1)}
    found.update({f"word {k}": text for k, text in enumerate(words[:COPY_POSITIONS], 1)})
    found.update({f"number {k} from the end": t for k, t in enumerate(numbers[::-1][:COPY_POSITIONS], 1)})
    found.update({f"word {k} from the end": t for k, t in enumerate(words[::-1][:COPY_WORDS_FROM_END], 1)})
    return found


def copy_search(battery: _Battery, play: TrainingPlay, space: AnswerSpace) -> None:
    """The copy policies, with ``max_copy_win_rate`` set (else nothing): a place of the first
    observation (``copies``) whose text is the seed's answer (its solution's final answer) at more than
    that share of the trivial seeds is played there, answered every turn, as training plays; over the
    cap, it plays ``trivial_confirm_seeds`` more, and ``Failed`` when the rate over all of them is still
    over: the answer is printed in the task, at a place that does not change with the seed. Every win
    counts (copying is the point), and a seed whose first observation has no such place is a loss."""
    s = battery.settings
    cap = s.max_copy_win_rate
    if cap is None:
        return
    seeds = space.trivial_seeds
    matches: Counter[str] = Counter()
    for seed in seeds:
        final = final_of(space, seed)
        if final:
            key = answer_key(final)
            matches.update(
                place for place, text in copies(space.observations[seed]).items() if answer_key(text) == key
            )
    suspects = [place for place, count in matches.most_common(COPY_SUSPECTS) if count > cap * len(seeds)]

    def wins_at(place: str, at: list[int]) -> int:
        extend(battery, space, at)  # the confirmation seeds' first observations and solutions
        plays = []
        for seed in at:
            text = copies(space.observations[seed]).get(place)
            if text is not None:
                plays.append((seed, [wrap_like(final_of(space, seed)) % text] * s.max_turns, True))
        return sum(won(battery, t) for t in play.play(plays))

    for place in suspects:
        first = wins_at(place, seeds)
        if first <= cap * len(seeds):
            continue
        after = confirmed_over(battery, lambda at, place=place: wins_at(place, at), first, len(seeds), cap)
        if after is None:
            continue
        raise Failed(
            "trivial_policy_wins",
            f"the answer is printed in the task: answering the {place} of the first observation, at every "
            f"seed, wins {first} of {len(seeds)} seeds{after}; at most {cap:.0%} may be won by copying "
            "(design.validation.max_copy_win_rate)",
        )


def confirmed_over(
    battery: _Battery,
    wins_at: Callable[[list[int]], int],
    first: int,
    count: int,
    cap: float,
    more_count: int | None = None,
) -> str | None:
    """A policy won ``first`` of ``count`` trivial seeds, more than ``cap`` of them: over the cap by the
    luck of the draw? With ``trivial_confirm_seeds`` it plays that many more (``wins_at(seeds)``: its wins
    there) and the rate over all of them decides. None when that brings it within the cap; else the
    refusal's account of the more seeds (", and W of T with M more seeds", or "" when none played)."""
    more_count = battery.settings.trivial_confirm_seeds if more_count is None else more_count
    if not more_count:
        return ""
    more = battery.derived("trivial_confirm", more_count)
    wins, total = first + wins_at(more), count + len(more)
    if wins <= cap * total:
        return None
    return f", and {wins} of {total} with {len(more)} more seeds"


def several_answers(kwargs: dict) -> bool:
    """Whether an environment constructed with ``kwargs`` takes more than one answer (``attempts`` > 1,
    the question kit's constructor argument)."""
    attempts = kwargs.get("attempts", 1)
    return isinstance(attempts, int) and not isinstance(attempts, bool) and attempts > 1


def known_in_turn(space: AnswerSpace, seed: int, turns: int) -> list[str]:
    """Up to ``turns`` final actions, one per answer (ignoring case), the most common answer among other
    seeds' solutions first (the answer seeds', or without them the trivial seeds' but ``seed``); ties in
    the order the seeds came."""
    others = space.answer_seeds or [other for other in space.trivial_seeds if other != seed]
    finals = [space.solutions[other][-1] for other in others if space.solutions[other]]
    counts = Counter(final_answer(action).lower() for action in finals)
    first = {}
    for action in finals:
        first.setdefault(final_answer(action).lower(), action)
    ranked = sorted(first, key=lambda answer: -counts[answer])  # stable: ties keep the seeds' order
    return [first[answer] for answer in ranked[:turns]]


def common_enough(space: AnswerSpace, action: str, cap: float) -> bool:
    """Whether ``action``'s answer is the answer of more than three quarters of ``cap`` of every seed whose
    solution the battery knows (the trivial and answer seeds, 48 by default): the screen before the
    common-answer cap plays it at 256 seeds. A key of 2 or 3 drawn at random (half the seeds) gets past it
    but about 0.6% of the time; a question of five answers (a fifth) about 2% of the time."""
    key = final_answer(action).lower()
    finals = [final_answer(actions[-1]).lower() for actions in space.solutions.values() if actions]
    return bool(finals) and sum(f == key for f in finals) > 0.75 * cap * len(finals)


def answer_replay(battery: _Battery, play: TrainingPlay, space: AnswerSpace) -> None:
    """The cross-seed answer replay: the solutions of the answer seeds give their most common answer
    (``answers.common_answer``); when it ends more than ``max_answer_replay_win_rate`` of them, it is
    played as a constant (repeated every turn) at the trivial seeds, other seeds than those it came
    from, and fails when it wins more than that share of them: the answer needs no reading of the task.
    With ``max_common_answer_win_rate`` set, it is also played when it is the answer of more than three
    quarters of that share of every seed whose solution is known (``common_enough``), at the trivial
    seeds and ``common_answer_confirm_seeds`` more, and fails when it wins more than that share of them
    all: one answer that is right too often. (The cap lies between a third and a half,
    so the verdict needs many seeds: at 16 and 32, a key of 2 or 3 drawn at random passed one time in
    three.)"""
    s = battery.settings
    action, count = common_answer([space.solutions[seed] for seed in space.answer_seeds])
    rate, common = s.max_answer_replay_win_rate, s.max_common_answer_win_rate
    suspect = common is not None and common_enough(space, action, common)  # for the common-answer cap
    if count <= rate * len(space.answer_seeds) and not suspect:
        return  # no answer is common enough to win as a constant
    seeds = space.trivial_seeds

    def wins_at(at: list[int]) -> int:
        return sum(won(battery, t) for t in play.play([(seed, [action] * s.max_turns, False) for seed in at]))

    wins = wins_at(seeds)
    if wins > rate * len(seeds):
        raise Failed(
            "answer_replay_wins",
            f"the final action {short(action)}, the answer of {count} of {len(space.answer_seeds)} seeds' "
            f"solution(), played as a constant wins {wins} of {len(seeds)} other seeds; at most "
            f"{rate:.0%} may be won without reading the task (max_answer_replay_win_rate)",
        )
    if not suspect:
        return
    more = s.common_answer_confirm_seeds
    if more:
        after = confirmed_over(battery, wins_at, wins, len(seeds), common, more)
    else:
        after = "" if wins > common * len(seeds) else None
    if after is None:
        return
    raise Failed(
        "answer_replay_wins",
        f"one answer is right too often: the final action {short(action)}, the answer of {count} of "
        f"{len(space.answer_seeds)} seeds' solution(), played as a constant wins {wins} of {len(seeds)} "
        f"other seeds{after}; at most {common:.0%} may be won by one answer "
        "(design.validation.max_common_answer_win_rate)",
    )
