"""Synthetic designs in the "question" form: the examples of the designer's supervised warm-up.

    code, hint = synthetic_design(random.Random(0), "math", "Honey bees visit flowers ...")

A small model cannot write a valid environment by prompting alone (measured: 0 of 32 with
SmolLM2-135M, in either form). The warm-up (:mod:`spade_rl.loop.warmup`) first teaches it the form on
designs written here: for each of the six game skills a few task families (a sum, a product, a
sequence, an ordering, a walk, a cheapest choice, a rate over time, ...), each instantiated with
words taken from the grounding document (as the nouns of the question, the variables and the class
name) and with random ranges, operations and wording. Every design is a ``QuestionTask`` subclass
(:mod:`spade_rl.envs.kits`) that draws its numbers with ``rng`` and computes its answer, with a hint
that states the method, never the answer. What the warm-up teaches is the form; what is worth
designing is left to the designer's reward.
"""

from __future__ import annotations

import builtins
import keyword
import random
import re

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


def _sum(rng, a, b):
    lo, hi = rng.randint(1, 5), rng.randint(9, 30)
    ask = rng.choice(["How many are there in all?", "How many is that altogether?", "What is the total?"])
    return (
        [
            f"{a} = rng.randint({lo}, {hi})",
            f"{b} = rng.randint({lo}, {hi})",
            f'question = f"There are {{{a}}} {a}s and {{{b}}} {b}s. {ask}"',
        ],
        f"{a} + {b}",
        "Add the two counts together.",
    )


def _product(rng, a, b):
    ask = rng.choice([f"How many {b}s are there?", f"How many {b}s in all?"])
    return (
        [
            f"{a} = rng.randint(2, {rng.randint(5, 9)})",
            f"each = rng.randint(2, {rng.randint(6, 12)})",
            f'question = f"There are {{{a}}} {a}s and each holds {{each}} {b}s. {ask}"',
        ],
        f"{a} * each",
        "Multiply the number of groups by the size of each group.",
    )


def _difference(rng, a, b):
    verb = rng.choice(["taken away", "lost", "used up", "given away"])
    return (
        [
            f"{a} = rng.randint({rng.randint(10, 20)}, {rng.randint(30, 60)})",
            f"gone = rng.randint(1, {a} - 1)",
            f'question = f"A shop had {{{a}}} {a}s, and {{gone}} were {verb}. How many {a}s are left?"',
        ],
        f"{a} - gone",
        "Subtract what went away from what there was.",
    )


def _sequence(rng, a, b):
    return (
        [
            f"start = rng.randint(1, {rng.randint(9, 20)})",
            f"step = rng.randint(2, {rng.randint(4, 9)})",
            "first, second, third = start, start + step, start + 2 * step",
            f'question = f"The {a} count grows: {{first}}, {{second}}, {{third}}, ... What comes next?"',
        ],
        "start + 3 * step",
        "Find the difference between neighbouring numbers and add it once more.",
    )


def _doubling(rng, a, b):
    factor = rng.choice([2, 3])
    word = {2: "doubles", 3: "triples"}[factor]
    return (
        [
            f"start = rng.randint(1, {rng.randint(5, 9)})",
            f'question = f"A number of {a}s {word} each day, starting at {{start}}. How many after 3 days?"',
        ],
        f"start * {factor**3}",
        f"Multiply by {factor} once for each day.",
    )


def _ordering(rng, a, b):
    adjective, most = rng.choice([("heavier", "heaviest"), ("older", "oldest"), ("taller", "tallest")])
    things = [a, b, *rng.sample([w for w in FALLBACK_WORDS if w not in (a, b)], 2)]
    return (
        [
            f"x, y, z = rng.sample({things}, 3)",
            f'question = f"The {{x}} is {adjective} than the {{y}}. The {{y}} is {adjective} than the {{z}}. '
            f'Which is the {most}?"',
        ],
        "x",
        "Follow the chain of comparisons to the one that nothing beats.",
    )


def _walk(rng, a, b):
    there, back = rng.choice([("east", "west"), ("north", "south"), ("up", "down")])
    return (
        [
            f"out = rng.randint({rng.randint(8, 10)}, {rng.randint(16, 25)})",
            "back = rng.randint(2, out - 3)",  # an answer of 3 or more: "1" is no guess that wins
            f'question = f"A {a} moves {{out}} steps {there}, then {{back}} steps {back}. '
            f'How many steps {there} of the start is it?"',
        ],
        "out - back",
        f"Steps {back} cancel steps {there}: subtract them.",
    )


def _cheapest(rng, a, b):
    c = rng.choice([w for w in FALLBACK_WORDS if w not in (a, b)])
    pick, name = rng.choice([("min", "cheapest"), ("max", "most expensive")])
    return (
        [
            f"{a}, {b}, {c} = rng.sample(range(2, {rng.randint(12, 30)}), 3)",
            f'question = f"A {a} costs {{{a}}} coins, a {b} {{{b}}} and a {c} {{{c}}}. Which is {name}?"',
            f'prices = {{"{a}": {a}, "{b}": {b}, "{c}": {c}}}',
        ],
        f"{pick}(prices, key=prices.get)",
        f"Compare the three prices and name the {name} one.",
    )


def _budget(rng, a, b):
    return (
        [
            f"price = rng.randint(2, {rng.randint(6, 12)})",
            f"money = rng.randint({rng.randint(15, 30)}, {rng.randint(40, 90)})",
            f'question = f"One {a} costs {{price}} coins. How many {a}s can you buy with {{money}} coins?"',
        ],
        "money // price",
        "Divide the money by the price and drop the remainder.",
    )


def _rate(rng, a, b):
    unit, per = rng.choice([("hours", "an hour"), ("days", "a day"), ("weeks", "a week")])
    return (
        [
            f"start = rng.randint({rng.randint(5, 15)}, {rng.randint(20, 40)})",
            f"rate = rng.randint(2, {rng.randint(5, 9)})",
            f"{unit} = rng.randint(2, {rng.randint(4, 7)})",
            f'question = f"A store has {{start}} {a}s and gets {{rate}} more {per}. '
            f'How many {a}s after {{{unit}}} {unit}?"',
        ],
        f"start + rate * {unit}",
        "Each step adds the same amount: multiply it by the time and add the start.",
    )


def _drain(rng, a, b):
    return (
        [
            f"start = rng.randint({rng.randint(30, 50)}, {rng.randint(60, 99)})",
            f"loss = rng.randint(2, {rng.randint(5, 9)})",
            "hours = rng.randint(2, 5)",
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


def synthetic_design(rng: random.Random, skill: str, document: str = "") -> tuple[str, str]:
    """The code of one ``QuestionTask`` design for ``skill`` (a game skill) about ``document``, and
    its hint. Deterministic for a given ``rng`` state."""
    if skill not in FAMILIES:
        raise ValueError(f"no synthetic designs for skill {skill!r}; allowed: {sorted(FAMILIES)}")
    words = document_words(document) or list(FALLBACK_WORDS)
    pool = words if len(words) >= 2 else [*words, *FALLBACK_WORDS]
    a, b = rng.sample(pool, 2)
    family = rng.choice(FAMILIES[skill])
    lines, answer, hint = family(rng, a, b)
    name = _camel(a, b, family.__name__.strip("_")) + "Env"
    body = "\n".join("        " + line for line in lines)
    code = f"class {name}(QuestionTask):\n    def make(self, rng):\n{body}\n"
    code += f'        return question, {answer}\n\n    hint = "{hint}"\n'

    return code, hint
