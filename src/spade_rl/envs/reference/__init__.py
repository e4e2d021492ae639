"""The hand-written reference environments, shipped as source text.

Each ``<name>.py`` next to this file is one self-contained environment (standard library only) that
follows the contract in :mod:`spade_rl.envs.contract`. They are data, not part of the package's code:
they are sent as source text to the sandbox, and shown to the designer as examples of good
environments. This module therefore never imports them; read them with :func:`source`.

    >>> from spade_rl.envs import reference
    >>> reference.NAMES[0], reference.SETTINGS["tools"]
    ('guess', 'tool_use')
    >>> "class GuessEnv" in reference.source("guess")
    True
"""

import pathlib
from importlib import resources

# Stable order: the games first (easiest first), then tool use.
NAMES: tuple[str, ...] = ("guess", "arithmetic", "maze", "codebreaker", "lights", "schedule", "tools")

# Held-out games: played by name (``spade-rl eval --suite envs --option envs.envs=nim``, ``spade-rl play
# nim``), but in no default: not in the training pool (``pool.reference`` defaults to NAMES), not shown
# to the designer as examples, not in the envs suite's default selection. They exist to measure
# transfer to games the model never trained on (experiments/cpu-learning.toml).
HELD_OUT: tuple[str, ...] = ("nim", "compare")

ALL: tuple[str, ...] = NAMES + HELD_OUT

SETTINGS: dict[str, str] = {
    "guess": "games",
    "arithmetic": "games",
    "maze": "games",
    "codebreaker": "games",
    "lights": "games",
    "schedule": "games",
    "tools": "tool_use",
    "nim": "games",
    "compare": "games",
}

DESCRIPTIONS: dict[str, str] = {
    "guess": "Find a secret number from 1 to 100 with higher/lower feedback (multi-turn).",
    "arithmetic": "Answer one shop-story arithmetic word problem with a whole number (single step).",
    "maze": "Walk from S to G through a small text maze with up/down/left/right moves (spatial).",
    "codebreaker": "Mastermind: deduce a 4-digit code over 1-6 from exact/misplaced counts (logic).",
    "lights": "Lights Out on a 4x4 board: press cells to switch every light off (logic puzzle).",
    "schedule": "Split jobs between two printers to minimise the makespan, 3 attempts (optimisation).",
    "tools": "Answer a store question by calling inventory tools given as JSON schemas (tool use).",
    "nim": "Take 1-3 stones from a pile of 5-9 against a random opponent; the last stone wins (held out).",
    "compare": "Say which of two numbers is larger, 4 rounds, scored by the share right (held out).",
}


# The privileged hint of each reference environment (SPADE's designer writes one for every design): a
# strategy that helps, never the answer of an instance. The loop plays with and without it.
HINTS: dict[str, str] = {
    "guess": (
        "Use binary search: guess the middle of the numbers still possible, and after each answer keep "
        "only the half it points to."
    ),
    "arithmetic": (
        "Find the numbers the story combines and the operation each step needs, compute step by step, "
        "and box only the final whole number."
    ),
    "maze": (
        "Trace the open squares from S to G on the drawing first, then send those moves in order; a move "
        "into # leaves you where you are."
    ),
    "codebreaker": (
        "Guess only codes that agree with every answer so far; a code of one repeated digit tells you how "
        "often that digit appears."
    ),
    "lights": (
        "Pressing a cell twice undoes it, so press each cell at most once; clear the board row by row, "
        "pressing below every light that is still on."
    ),
    "schedule": (
        "Add up all durations: the best makespan is at least half the total, so balance the two printers "
        "as evenly as possible, placing the longest jobs first."
    ),
    "tools": (
        "List the products first, then look up each product the question needs, and compute the answer "
        "from the tool results only."
    ),
    "nim": (
        "Leave the opponent a multiple of 4 stones: take the remainder of the pile divided by 4 whenever "
        "it is not zero."
    ),
    "compare": (
        "Compare the tens digits first and, only when they are equal, the ones digits; box the larger "
        "number exactly as it is written."
    ),
}


class UnknownReferenceName(KeyError):
    """A reference environment name that does not exist; the message lists the allowed names."""

    def __str__(self) -> str:
        # KeyError's own __str__ shows the repr of its argument, quotes and all.
        return str(self.args[0])


def _check(name: str) -> None:
    if name not in ALL:
        raise UnknownReferenceName(
            f"unknown reference environment {name!r}; allowed names: {', '.join(NAMES)} "
            f"(held out for evaluation: {', '.join(HELD_OUT)})"
        )


def path(name: str) -> pathlib.Path:
    """The file of the reference environment ``name`` (the package is installed as plain files)."""
    _check(name)
    return pathlib.Path(str(resources.files(__package__).joinpath(f"{name}.py")))


def source(name: str) -> str:
    """The source text of the reference environment ``name``."""
    _check(name)
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")
