"""The text checks of the validation battery: what a final action answers, whether a hint names that
answer, and the actions of the trivial and answer-replay policies that a valid environment must not
let win.

Pure functions of strings, linear in their inputs (an environment chooses the texts: no regular
expression here can backtrack without bound). ``spade_rl.design.validate`` runs them.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence

_NUMBER = re.compile(r"-?\d{1,12}(?:\.\d{1,6})?(?!\.?\d)")
_WORD = re.compile(r"[^\W\d_]{1,12}")
_GUESSES = (
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    "yes",
    "no",
    "true",
    "false",
    "A",
    "B",
    "C",
    "D",
)


def trivial_actions(observation: str, seed: int, max_turns: int) -> dict[str, list[str]]:
    """The trivial policies' actions for an episode that opened with ``observation``, by name: one
    short action repeated, and answers drawn without replacement from the numbers and words of the
    observation (and a few usual answers), each in the format the observation asks for
    (``\\boxed{}``, ``<answer></answer>`` or plain)."""
    text = observation[:4000]  # what an agent sees of it (rollout max_observation_chars)
    if "\\boxed" in text:
        wrap = "\\boxed{%s}"
    elif "<answer>" in text:
        wrap = "<answer>%s</answer>"
    else:
        wrap = "%s"
    policies = {"repeat " + wrap % c: [wrap % c] * max_turns for c in ("0", "1", "yes")}
    candidates = list(dict.fromkeys([*_NUMBER.findall(text)[:64], *_WORD.findall(text)[:64], *_GUESSES]))
    random.Random(seed).shuffle(candidates)
    policies["random answers"] = [wrap % c for c in candidates[:max_turns]]
    return policies


# What a model in play writes around its answer: openings and closings of a turn, joined at random.
_OPENINGS = (
    "",
    "Let me think about this step by step.",
    "I read the question carefully.",
    "Looking at the numbers given,",
    "OK.",
    "Based on the rules of the game, I will try this.",
    "My reasoning: the task asks for one answer, so I will give it now.",
    "Hmm, this one needs some care. Checking each part of the question again before I answer.",
)
_LEADS = ("The answer is", "I choose", "Final answer:", "My move:", "So:", "I think it is", "")
_CLOSINGS = ("", ".", " That is my final answer.", " Let me know if that is right.", "\n\nDone.")


def in_words(action: str, rng: random.Random) -> str:
    """``action`` with words around it, as a model in play writes a turn: an opening sentence or
    none, a lead-in, the action, a closing (drawn from ``rng``). The action itself is unchanged, so an
    environment that reads the ``\\boxed{}`` or ``<answer>`` in a turn reads the same answer."""
    opening, lead, closing = rng.choice(_OPENINGS), rng.choice(_LEADS), rng.choice(_CLOSINGS)
    text = " ".join(part for part in (opening, lead, action) if part)
    return text + closing if text != action or closing else f"{rng.choice(_LEADS[:-1])} {action}"


def common_answer(solutions: Sequence[Sequence[str]]) -> tuple[str, int]:
    """The final action whose answer (:func:`final_answer`, ignoring case) is the most common among
    ``solutions`` (the actions of ``solution()`` at several seeds), the first of them on a tie, and
    how many solutions end with that answer; ``("", 0)`` without solutions.

    Played at other seeds as a constant it is the answer-replay policy: a task whose answer is the
    same word on most seeds is won by it without being read."""
    finals = [actions[-1] for actions in solutions if actions]
    if not finals:
        return "", 0
    counts = Counter(final_answer(action).lower() for action in finals)
    most = max(counts.values())
    return next(action for action in finals if counts[final_answer(action).lower()] == most), most


def final_answer(action: str) -> str:
    """The answer of a final action: the content of ``\\boxed{...}`` (from the first opening to the
    last closing brace) or of the first ``<answer>...</answer>``, or the action itself. Linear in the
    action's length (an environment chooses it: no regular expression that can backtrack)."""
    answer = action.strip()
    start = answer.find("\\boxed{")
    end = answer.rfind("}")
    if start >= 0 and end >= start + 7:
        return answer[start + 7 : end].strip()
    start = answer.find("<answer>")
    if start >= 0:
        end = answer.find("</answer>", start + 8)
        if end >= 0:
            return answer[start + 8 : end].strip()
    return answer


def leaked_answer(hint: str, final_action: str) -> str:
    """The final answer if the hint contains it as a whole word or number (case-insensitive), else ''.

    The answer is ``final_answer(final_action)``. Every answer is checked, a one-character one too
    (a hint "the answer is 7" leaks): a hint should describe a strategy, not name values. Linear in
    the lengths of both."""
    answer = final_answer(final_action)
    low, needle = hint.lower(), answer.lower()
    if not needle or len(needle) > len(low):
        return ""
    at = low.find(needle)
    while at >= 0:
        before = low[at - 1] if at else ""
        after = low[at + len(needle)] if at + len(needle) < len(low) else ""
        if not (before.isalnum() or before in "_.") and not (after.isalnum() or after == "_"):
            return answer
        at = low.find(needle, at + 1)
    return ""
