"""Synthetic designs in the "question" form: the examples of the designer's supervised warm-up.

    code, hint = synthetic_design(random.Random(0), "math", "Honey bees visit flowers ...")

A small model cannot write a valid environment by prompting alone (measured: 0 of 32 with
SmolLM2-135M, in either form). The warm-up (:mod:`spade_rl.designer.warmup`) first teaches it the form on
designs written here: for each of the six game skills a few task families (a sum, a product, a
sequence, an ordering, a walk, a cheapest choice, a rate over time, ...), each instantiated with
words taken from the grounding document (as the nouns of the question, the variables and the class
name) and with random ranges, operations and wording, at one of three levels of difficulty (``LEVELS``:
easy ones add a small number to a two-digit one or compare two things; medium ones are the one-shot
arithmetic of earlier releases; hard ones have three-digit numbers, more steps or more things to
compare), so that the base agent wins some of them often, some sometimes and some never (the warm-up
measures which: ``warmup.measure_plays``). Every design is a ``QuestionTask`` subclass
(:mod:`spade_rl.envs.kits`) that draws its numbers with ``rng`` and computes its answer, with a hint
that states the method, never the answer. What the warm-up teaches is the form; what is worth
designing is left to the designer's reward.
"""

from __future__ import annotations

import builtins
import keyword
import random
import re
from dataclasses import dataclass

FALLBACK_WORDS = (
    "apple", "stone", "river", "lamp", "coin", "book", "tree", "cloud", "horse", "candle",
    "garden", "ticket", "bottle", "basket", "window", "letter", "bridge", "engine", "planet", "seed",
)  # fmt: skip
_STOP = frozenset(
    "this that with from have been were their there which would about other these those into than then "
    "them they what when where while your more most some such only also each many much very just like "
    "over under after before between because could should none true false self return class import "
    "def list dict value values type types object objects string strings".split()
)
_RESERVED = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {"rng", "question", "answer", "hint"}


def document_words(text: str, limit: int = 40) -> list[str]:
    """Plain lowercase nouns-to-be from ``text``: alphabetic words of 4 to 10 letters that are not stop
    words and can name a Python variable, in order of first appearance, at most ``limit``."""
    seen: dict[str, None] = {}
    for word in re.findall(r"[A-Za-z]+", text):
        low = word.lower()
        if 4 <= len(low) <= 10 and low not in _STOP and low not in _RESERVED and low.isidentifier():
            seen.setdefault(low)
        if len(seen) >= limit:
            break
    return list(seen)


def _camel(*words: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in words)


def _pick(rng, level, *ranges):
    """A number from the ``level``-th of three ``(low, high)`` ranges: easy, medium, hard."""
    low, high = ranges[level]
    return rng.randint(low, high)


def _sum(rng, a, b, level):
    ask = rng.choice(["How many are there in all?", "How many is that altogether?", "What is the total?"])
    first = [(10, 20), (rng.randint(1, 5), rng.randint(9, 30)), (100, rng.randint(300, 999))][level]
    second = [(1, 3), first, (100, rng.randint(300, 999))][level]
    return (
        [
            f"{a} = rng.randint({first[0]}, {first[1]})",
            f"{b} = rng.randint({second[0]}, {second[1]})",
            f'question = f"There are {{{a}}} {a}s and {{{b}}} {b}s. {ask}"',
        ],
        f"{a} + {b}",
        "Add the two counts together.",
    )


def _product(rng, a, b, level):
    ask = rng.choice([f"How many {b}s are there?", f"How many {b}s in all?"])
    groups = [(2, 4), (2, rng.randint(5, 9)), (12, rng.randint(20, 40))][level]
    size = [(10, 10), (2, rng.randint(6, 12)), (12, rng.randint(20, 40))][level]
    return (
        [
            f"{a} = rng.randint({groups[0]}, {groups[1]})",
            f"each = rng.randint({size[0]}, {size[1]})",
            f'question = f"There are {{{a}}} {a}s and each holds {{each}} {b}s. {ask}"',
        ],
        f"{a} * each",
        "Multiply the number of groups by the size of each group.",
    )


def _difference(rng, a, b, level):
    verb = rng.choice(["taken away", "lost", "used up", "given away"])
    have = [(11, 19), (rng.randint(10, 20), rng.randint(30, 60)), (200, rng.randint(500, 999))][level]
    gone = ["rng.randint(1, 2)", f"rng.randint(1, {a} - 1)", f"rng.randint(50, {a} - 1)"][level]
    return (
        [
            f"{a} = rng.randint({have[0]}, {have[1]})",
            f"gone = {gone}",
            f'question = f"A shop had {{{a}}} {a}s, and {{gone}} were {verb}. How many {a}s are left?"',
        ],
        f"{a} - gone",
        "Subtract what went away from what there was.",
    )


def _sequence(rng, a, b, level):
    start = [(10, 30), (1, rng.randint(9, 20)), (10, 99)][level]
    step = [(1, 1), (2, rng.randint(4, 9)), (11, rng.randint(20, 49))][level]
    return (
        [
            f"start = rng.randint({start[0]}, {start[1]})",
            f"step = rng.randint({step[0]}, {step[1]})",
            "first, second, third = start, start + step, start + 2 * step",
            f'question = f"The {a} count grows: {{first}}, {{second}}, {{third}}, ... What comes next?"',
        ],
        "start + 3 * step",
        "Find the difference between neighbouring numbers and add it once more.",
    )


def _doubling(rng, a, b, level):
    factor = [2, rng.choice([2, 3]), 3][level]
    days = [1, 3, rng.choice([4, 5])][level]
    word = {2: "doubles", 3: "triples"}[factor]
    when = "after 1 day" if days == 1 else f"after {days} days"
    start = [(10, 20), (1, rng.randint(5, 9)), (2, 9)][level]
    return (
        [
            f"start = rng.randint({start[0]}, {start[1]})",
            f'question = f"A number of {a}s {word} each day, starting at {{start}}. How many {when}?"',
        ],
        f"start * {factor**days}",
        f"Multiply by {factor} once for each day.",
    )


def _ordering(rng, a, b, level):
    adjective, most = rng.choice([("heavier", "heaviest"), ("older", "oldest"), ("taller", "tallest")])
    count = (3, 3, 4)[level]  # things in the chain (two would let a word of the question win too often)
    things = [a, b, *rng.sample([w for w in FALLBACK_WORDS if w not in (a, b)], 3)]
    names = ["x", "y", "z", "w"][:count]
    facts = [f'f"The {{{names[i]}}} is {adjective} than the {{{names[i + 1]}}}."' for i in range(count - 1)]
    return (
        [
            f"{', '.join(names)} = rng.sample({things}, {count})",
            f"facts = [{', '.join(facts)}]",
            # told in another order at every seed: in order, the answer is always the question's second
            # word, and copying it wins (design.validation.max_copy_win_rate refuses that)
            "rng.shuffle(facts)",
            f'question = " ".join(facts) + " Which is the {most}?"',
        ],
        "x",
        "Follow the chain of comparisons to the one that nothing beats.",
    )


def _walk(rng, a, b, level):
    there, back = rng.choice([("east", "west"), ("north", "south"), ("up", "down")])
    out = [(10, 19), (rng.randint(8, 10), rng.randint(16, 25)), (100, rng.randint(200, 400))][level]
    # an answer of 3 or more: "1" is no guess that wins
    back_range = ["rng.randint(1, 2)", "rng.randint(2, out - 3)", "rng.randint(11, out - 3)"][level]
    return (
        [
            f"out = rng.randint({out[0]}, {out[1]})",
            f"back = {back_range}",
            f'question = f"A {a} moves {{out}} steps {there}, then {{back}} steps {back}. '
            f'How many steps {there} of the start is it?"',
        ],
        "out - back",
        f"Steps {back} cancel steps {there}: subtract them.",
    )


def _cheapest(rng, a, b, level):
    count = (3, 3, 5)[level]  # things to compare (two would let a word of the question win too often)
    names = [a, b, *rng.sample([w for w in FALLBACK_WORDS if w not in (a, b)], count - 2)]
    pick, name = rng.choice([("min", "cheapest"), ("max", "most expensive")])
    top = [rng.randint(40, 99), rng.randint(12, 30), rng.randint(40, 99)][level]  # easy: far apart
    listed = ", ".join(f"a {n} {{{n}}}" for n in names[1:])
    return (
        [
            f"{', '.join(names)} = rng.sample(range(2, {top}), {count})",
            f'question = f"A {names[0]} costs {{{names[0]}}} coins, {listed}. Which is {name}?"',
            "prices = {" + ", ".join(f'"{n}": {n}' for n in names) + "}",
        ],
        f"{pick}(prices, key=prices.get)",
        f"Compare the prices and name the {name} one.",
    )


def _budget(rng, a, b, level):
    price = [(10, 10), (2, rng.randint(6, 12)), (7, rng.randint(13, 19))][level]
    money = [(20, 99), (rng.randint(15, 30), rng.randint(40, 90)), (100, rng.randint(300, 999))][level]
    return (
        [
            f"price = rng.randint({price[0]}, {price[1]})",
            f"money = rng.randint({money[0]}, {money[1]})",
            f'question = f"One {a} costs {{price}} coins. How many {a}s can you buy with {{money}} coins?"',
        ],
        "money // price",
        "Divide the money by the price and drop the remainder.",
    )


def _rate(rng, a, b, level):
    unit, per = rng.choice([("hours", "an hour"), ("days", "a day"), ("weeks", "a week")])
    start = [(10, 20), (rng.randint(5, 15), rng.randint(20, 40)), (100, rng.randint(200, 500))][level]
    rate = [(1, 1), (2, rng.randint(5, 9)), (11, rng.randint(15, 29))][level]
    time = [(2, 2), (2, rng.randint(4, 7)), (5, rng.randint(8, 12))][level]
    return (
        [
            f"start = rng.randint({start[0]}, {start[1]})",
            f"rate = rng.randint({rate[0]}, {rate[1]})",
            f"{unit} = rng.randint({time[0]}, {time[1]})",
            f'question = f"A store has {{start}} {a}s and gets {{rate}} more {per}. '
            f'How many {a}s after {{{unit}}} {unit}?"',
        ],
        f"start + rate * {unit}",
        "Each step adds the same amount: multiply it by the time and add the start.",
    )


def _drain(rng, a, b, level):
    start = [(20, 40), (rng.randint(30, 50), rng.randint(60, 99)), (200, rng.randint(300, 500))][level]
    loss = [(1, 1), (2, rng.randint(5, 9)), (7, rng.randint(12, 19))][level]
    hours = [(2, 2), (2, 5), (4, 9)][level]
    return (
        [
            f"start = rng.randint({start[0]}, {start[1]})",
            f"loss = rng.randint({loss[0]}, {loss[1]})",
            f"hours = rng.randint({hours[0]}, {hours[1]})",
            f'question = f"A {a} holds {{start}} litres and loses {{loss}} litres an hour. '
            f'How many litres are left after {{hours}} hours?"',
        ],
        "start - loss * hours",
        "Multiply the loss per hour by the hours and subtract it from the start.",
    )


FAMILIES = {
    "math": (_sum, _product, _difference),
    "pattern": (_sequence, _doubling),
    "logic": (_ordering,),
    "spatial": (_walk,),
    "optimisation": (_cheapest, _budget),
    "causal": (_rate, _drain),
}


LEVELS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Recipe:
    """What a synthetic design is made of before its numbers and wording are drawn: the skill, the level,
    the task family (a name of ``FAMILIES[skill]``) and the two document words it is about. The same
    recipe at another level is the warm-up's edit of a design (:func:`render` with ``name_suffix``)."""

    skill: str
    level: str
    family: str
    words: tuple[str, str]


def draw_recipe(rng: random.Random, skill: str, document: str = "", level: str | None = None) -> Recipe:
    """A recipe for ``skill`` about ``document`` at ``level`` (None: drawn uniformly from ``LEVELS``)."""
    if skill not in FAMILIES:
        raise ValueError(f"no synthetic designs for skill {skill!r}; allowed: {sorted(FAMILIES)}")
    if level is None:
        level = rng.choice(LEVELS)
    if level not in LEVELS:
        raise ValueError(f"synthetic design level {level!r}; allowed: {list(LEVELS)}")
    words = document_words(document) or list(FALLBACK_WORDS)
    pool = words if len(words) >= 2 else [*words, *FALLBACK_WORDS]
    a, b = rng.sample(pool, 2)
    family = rng.choice(FAMILIES[skill])
    return Recipe(skill, level, family.__name__, (a, b))


def render(rng: random.Random, recipe: Recipe, name_suffix: str = "") -> tuple[str, str]:
    """The code of the ``QuestionTask`` design of ``recipe`` (its class named after the words and the
    family, then ``name_suffix``) and its hint; the ranges and wording drawn from ``rng``."""
    if recipe.level not in LEVELS:
        raise ValueError(f"synthetic design level {recipe.level!r}; allowed: {list(LEVELS)}")
    [family] = [f for f in FAMILIES[recipe.skill] if f.__name__ == recipe.family]
    a, b = recipe.words
    lines, answer, hint = family(rng, a, b, LEVELS.index(recipe.level))
    name = _camel(a, b, family.__name__.strip("_"), name_suffix) + "Env"
    body = "\n".join("        " + line for line in lines)
    code = f"class {name}(QuestionTask):\n    def make(self, rng):\n{body}\n"
    code += f'        return question, {answer}\n\n    hint = "{hint}"\n'
    return code, hint


def synthetic_design(
    rng: random.Random, skill: str, document: str = "", level: str | None = None
) -> tuple[str, str]:
    """The code of one ``QuestionTask`` design for ``skill`` (a game skill) about ``document`` at
    difficulty ``level`` (one of ``LEVELS``; None: drawn uniformly), and its hint. Deterministic for a
    given ``rng`` state."""
    return render(rng, draw_recipe(rng, skill, document, level))
