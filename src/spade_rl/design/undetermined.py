"""The undetermined-answer check of the validation battery (``refuse_undetermined_answers``): a first
observation that does not determine what wins. Played as training plays (:class:`~spade_rl.design.
trivial_search.TrainingPlay`), at the trivial and answer seeds whose first observations and solutions the
trivial-policy search gathered (:class:`~spade_rl.design.trivial_search.AnswerSpace`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spade_rl.design.report import Failed
from spade_rl.design.transcripts import canonical, ended, short
from spade_rl.design.trivial_search import won

if TYPE_CHECKING:
    from spade_rl.design.trivial_search import AnswerSpace, TrainingPlay
    from spade_rl.design.validate import _Battery


UNDETERMINED_PAIRS = 4  # at most this many pairs of look-alike seeds are played (two episodes each)


def undetermined(battery: _Battery, play: TrainingPlay, space: AnswerSpace) -> None:
    """The undetermined answer: among the trivial and answer seeds, those whose first observations are
    the same and whose solutions' first actions differ each play the other's first action. When both
    episodes end at once, unwon, the observation does not determine what wins: whatever the agent
    answers to it, it loses at one of the two (a question whose answer is drawn from the seed apart from
    what it states, ``return question, rng.randint(2, 10)``, is won by any constant 1 time in 9, below
    the common-answer cap, and reads to the designer's reward as a design at the agent's frontier:
    experiments/results/cpu-curriculum, spade-caps seed 1). A game whose first observation is the same
    at every seed but that answers a wrong move (a guessing game's "too low") goes on after it, and is
    not refused; neither is a task with more than one right answer, where the other seed's action wins."""
    alike: dict[str, dict[str, int]] = {}  # first observation -> first action -> the first seed with it
    for seed in dict.fromkeys([*space.trivial_seeds, *space.answer_seeds]):
        actions = space.solutions.get(seed)
        if actions:
            alike.setdefault(canonical(space.observations[seed]), {}).setdefault(actions[0], seed)
    pairs = [tuple(firsts.items())[:2] for firsts in alike.values() if len(firsts) > 1]
    for (first_a, a), (first_b, b) in pairs[:UNDETERMINED_PAIRS]:
        at_a, at_b = play.play([(a, [first_b], False), (b, [first_a], False)])
        if all(ended(t) and not won(battery, t) for t in (at_a, at_b)):
            raise Failed(
                "undetermined_answer",
                f"the answer is not determined by what the task shows: seeds {a} and {b} show the same "
                f"first observation {short(space.observations[a])}, their solutions begin "
                f"{short(first_a)} and {short(first_b)}, and each ends the other seed's episode unwon: "
                "no answer to that observation wins both (design.validation.refuse_undetermined_answers)",
            )
