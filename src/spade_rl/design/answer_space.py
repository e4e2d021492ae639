"""The answer space an environment shows, for the trivial-policy search of the validation battery.

A rigged environment can reward one constant answer (a negative number, a word no task asks for) or
any answer of a given shape (any number of two or more digits). No fixed list of guesses meets every
such answer, so the search draws its constants from what the environment itself shows: the numbers
and words of its observations, of its hint, of its solutions' answers and of its source's literals,
neighbours of those numbers (n - 1, n + 1, -n, 10 n, n // 10), negative numbers, the empty answer and
random words; and its random policy guesses answers of the solution's own shape (a random number of
the same digit count, a random word of the same length). What it does not cover: a constant computed
at run time that none of those shows (``str(-6 * 7)``), or one hidden among more literals than the
search plays (``ValidationSettings.answer_space_constants``); the agent must find such an answer
too, and the play-time guard (:mod:`spade_rl.loop.guard`) flags one answer that wins too widely.

Pure functions of strings (linear in their inputs: an environment chooses the texts) and of the
source's syntax tree (parsed, never run). :mod:`spade_rl.design.validate` plays what they give.
"""

from __future__ import annotations

import ast
import math
import random
import re
import string
from collections.abc import Iterable, Sequence

from spade_rl.design.answers import final_answer

_NUMBER = re.compile(r"-?\d{1,12}(?:\.\d{1,6})?(?!\.?\d)")
_WORD = re.compile(r"[^\W\d_]{1,12}")
_EDGES = " \t\n()[]{}.,;:'\"`"
MAX_LITERAL_CHARS = 24  # longer string literals are prose (a prompt, a docstring), not answers
# Always tried: the empty answer, negatives, a word no task asks for (answers, unwrapped)
FIXED = ("", "-1", "-2", "-10", "none", "null", "n/a", "?")


def answer_key(answer: str) -> str:
    """One text per answer, so that two spellings of one answer compare equal: the final answer
    (:func:`~spade_rl.design.answers.final_answer`) in lower case with its spaces collapsed and its
    edge punctuation stripped, a number as its value (``"42"``, ``"42.0"`` and ``"4,2e1"`` are one)."""
    text = " ".join(final_answer(answer)[:200].lower().split()).strip(_EDGES)
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return text
    return f"{value:.10g}" if math.isfinite(value) else text


def wrap_like(final_action: str) -> str:
    """The format of a solution's final action, with ``%s`` where its answer goes: ``\\boxed{%s}``,
    ``<answer>%s</answer>`` or ``%s``."""
    if "\\boxed{" in final_action:
        return "\\boxed{%s}"
    if "<answer>" in final_action:
        return "<answer>%s</answer>"
    return "%s"


def source_literals(source: str, limit: int = 256) -> list[str]:
    """The short string literals and the numbers of ``source`` (an int or float literal, and its
    negative), in the order they appear, at most ``limit``; none when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if len(found) >= limit:
            break
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
            continue
        value = node.value
        if isinstance(value, str) and 0 < len(value.strip()) <= MAX_LITERAL_CHARS and "\n" not in value:
            found.append(final_answer(value))  # "\\boxed{-7}" compared whole is the answer "-7"
        elif isinstance(value, (int, float)) and math.isfinite(value) and abs(value) < 10**12:
            found += [str(value), str(-value)]
    return found[:limit]


def numbers_of(text: str, limit: int = 32) -> list[str]:
    """The first ``limit`` numbers written in ``text``."""
    return [m.group() for m, _ in zip(_NUMBER.finditer(text[:4000]), range(limit), strict=False)]


def words_of(text: str, limit: int = 32) -> list[str]:
    """The first ``limit`` words (letters only) of ``text``."""
    return [m.group() for m, _ in zip(_WORD.finditer(text[:4000]), range(limit), strict=False)]


def neighbours(number: str) -> list[str]:
    """The numbers a rigged check may hide next to ``number``: n - 1, n + 1, -n, 10 n and n // 10 (for
    an integer), -x (for a decimal)."""
    try:
        n = int(number)
    except ValueError:
        return [number[1:] if number.startswith("-") else "-" + number]
    return [str(v) for v in (n - 1, n + 1, -n, 10 * n, n // 10)]


def constant_candidates(
    answers: Sequence[str], shown: Sequence[str], literals: Sequence[str], limit: int, rng: random.Random
) -> list[str]:
    """The constants the search plays (answers, unwrapped), at most ``limit``, each answer once (by
    :func:`answer_key`): the fixed ones (``FIXED``) first, then one of each tier in turn, each tier in
    an order drawn with ``rng``, until ``limit``: the answers' shapes and neighbours (a random number
    of each answer's digit count, a random word of each word answer's length, the neighbours of every
    number in them), the answers themselves (those of other seeds are wrong at a seed), the numbers of
    the source's literals (and their negatives), its short strings, the numbers and words of ``shown``
    (observations, the hint) and their neighbours. No tier, however long, crowds out the others.

    ``answers``: the final answers of the solutions played; ``shown``: texts the agent is shown."""
    known = {answer_key(a) for a in answers}
    shapes = [shaped_guess(a, rng, known) for a in dict.fromkeys(answers)]
    near = [n for a in answers for number in numbers_of(a, 4) for n in neighbours(number)]
    seen = [n for text in shown for n in numbers_of(text)]
    numeric = [c for c in literals if numbers_of(c, 1) == [c]]
    tiers = [
        [*shapes, *near],
        list(answers),
        numeric,
        [c for c in literals if c not in numeric],
        [*seen, *(n for s in seen[:16] for n in neighbours(s))],
        [w for text in shown for w in words_of(text)],
    ]
    for tier in tiers:
        rng.shuffle(tier)
    chosen: list[str] = []
    keys: set[str] = set()

    def add(candidate: str) -> bool:
        key = answer_key(candidate)
        if key in keys or len(chosen) >= limit:
            return False
        keys.add(key)
        chosen.append(candidate)
        return True

    for candidate in FIXED:
        add(candidate)
    while len(chosen) < limit and any(tiers):
        for tier in tiers:
            while tier and not add(tier.pop()):
                pass
    return chosen


def shaped_guess(answer: str, rng: random.Random, avoid: Iterable[str] = ()) -> str:
    """A random answer of the shape of ``answer`` (a final answer, unwrapped) that is none of ``avoid``
    (answer keys) nor ``answer`` itself: an integer of the same digit count and sign, a decimal with
    as many digits on each side of the point, a word of the same length and case, or else random
    letters as long as it (1 to 12)."""
    avoid = {*avoid, answer_key(answer)}
    text = final_answer(answer)[:64].strip()
    for _ in range(32):
        guess = _shaped(text, rng)
        if answer_key(guess) not in avoid:
            return guess
    return guess  # only when the shape holds no other answer (one digit, every one of them avoided)


def _shaped(text: str, rng: random.Random) -> str:
    sign = "-" if text.startswith("-") else ""
    digits = text.lstrip("-")
    if re.fullmatch(r"\d{1,12}", digits):
        low = 10 ** (len(digits) - 1) if len(digits) > 1 else 0
        return sign + str(rng.randrange(low, 10 ** len(digits)))
    if re.fullmatch(r"\d{1,12}\.\d{1,6}", digits):
        whole, part = digits.split(".")
        return sign + _shaped(whole, rng) + "." + "".join(rng.choice(string.digits) for _ in part)
    letters = string.ascii_uppercase if text.isupper() else string.ascii_lowercase
    word = "".join(rng.choice(letters) for _ in range(min(max(len(text), 1), 12)))
    return word.capitalize() if text[:1].isupper() and not text.isupper() else word


def undeserved(constant: str, answer: str) -> bool:
    """Whether a win of ``constant`` (an answer) at a seed whose solution answers ``answer`` (its final
    action) is not the task's answer under another spelling."""
    return answer_key(constant) != answer_key(answer)
