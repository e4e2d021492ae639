"""Design kits: the boilerplate of an environment, so that a design writes only what is its own.

A kit is a standard-library module shipped as source text beside this file (like the reference
environments, it is data: sent to the sandbox, never imported here). A design in a kit's form is a
subclass of the kit's base class; :func:`compose` puts the kit's source in front of it, so the
archive holds, and the sandbox runs, one self-contained module with exactly one ``*Env`` class (the
design's; the kit's base class does not end in ``Env``). :func:`design_part` takes the design back
out of a composed source (what the designer is shown as an example and what it wrote).

- ``question``: ``QuestionTask``, a one-question environment. The design writes
  ``make(self, rng) -> (question, answer)`` (``rng`` is the seeded ``random.Random``) and a class
  attribute ``hint``; the kit draws the instance from the seed, states the answer format, judges the
  last ``\\boxed{...}`` of an action (numbers compared as numbers, text ignoring case and spaces),
  counts turns (a turn with no answer is wasted; ``max_turns`` of them end the episode as truncated)
  and plays its own solution (the answer, boxed).

    >>> from spade_rl.envs import kits
    >>> source = kits.compose("question", kits.EXAMPLES["math"])
    >>> kits.design_part(source) == kits.EXAMPLES["math"].strip()
    True
"""

import functools
from importlib import resources

NAMES: tuple[str, ...] = ("question",)
BASE_CLASSES: dict[str, str] = {"question": "QuestionTask"}
DESIGN_MARKER = "# --- the design ---"  # the kit's last line: what follows is the design

# One short, correct design per game skill: the example a designer prompt shows when the archive has
# no design in this form yet.
EXAMPLES: dict[str, str] = {
    "math": """\
class ShelfBooksEnv(QuestionTask):
    def make(self, rng):
        shelves = rng.randint(2, 6)
        books = rng.randint(3, 9)
        question = f"A library has {shelves} shelves with {books} books on each. How many books are there?"
        return question, shelves * books

    hint = "Multiply the number of shelves by the number of books on each shelf."
""",
    "logic": """\
class TallestFriendEnv(QuestionTask):
    def make(self, rng):
        a, b, c = rng.sample(["Ana", "Ben", "Chen", "Dara", "Eli"], 3)
        question = f"{a} is taller than {b}. {b} is taller than {c}. Who is the tallest?"
        return question, a

    hint = "Follow the chain of comparisons to the person that nobody is taller than."
""",
    "pattern": """\
class NextNumberEnv(QuestionTask):
    def make(self, rng):
        start = rng.randint(1, 9)
        step = rng.randint(2, 5)
        a, b, c = start, start + step, start + 2 * step
        question = f"What number comes next: {a}, {b}, {c}, ...?"
        return question, start + 3 * step

    hint = "Find the difference between neighbouring numbers and add it once more."
""",
    "spatial": """\
class RobotWalkEnv(QuestionTask):
    def make(self, rng):
        east = rng.randint(12, 40)
        west = rng.randint(2, east - 3)
        question = f"A robot walks {east} steps east, then {west} steps west. How far east is it now?"
        return question, east - west

    hint = "Steps west cancel steps east: subtract them."
""",
    "optimisation": """\
class CheapestFruitEnv(QuestionTask):
    def make(self, rng):
        apple, pear, plum = rng.sample(range(2, 10), 3)
        question = f"An apple costs {apple} dollars, a pear {pear}, a plum {plum}. Which fruit is cheapest?"
        prices = {"apple": apple, "pear": pear, "plum": plum}
        return question, min(prices, key=prices.get)

    hint = "Compare the three prices and name the fruit with the smallest one."
""",
    "causal": """\
class TankLevelEnv(QuestionTask):
    def make(self, rng):
        start = rng.randint(10, 20)
        inflow = rng.randint(3, 6)
        hours = rng.randint(2, 4)
        question = f"A tank of {start} litres gains {inflow} litres an hour. Litres after {hours} hours?"
        return question, start + inflow * hours

    hint = "Each hour adds the same amount: multiply it by the hours and add the start."
""",
}


class UnknownKit(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@functools.cache
def source(name: str) -> str:
    """The source text of kit ``name`` (read once)."""
    if name not in NAMES:
        raise UnknownKit(f"unknown design kit {name!r}; allowed: {', '.join(NAMES)}")
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")


def compose(name: str, design: str) -> str:
    """One self-contained module: kit ``name``, then the design's code."""
    return source(name).rstrip() + "\n" + design.strip() + "\n"


def design_part(composed: str) -> str | None:
    """The design's code in a source that :func:`compose` made, or ``None`` for any other source."""
    for name in NAMES:
        kit = source(name).rstrip()
        if composed.startswith(kit + "\n"):
            return composed[len(kit) + 1 :].strip()
    return None
