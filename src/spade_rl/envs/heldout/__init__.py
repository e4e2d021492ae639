"""The held-out game families: the primary yardstick of whether training transfers (issue 40, item 1).

Each ``<name>.py`` next to this file is one self-contained environment (standard library only) that
follows the contract in :mod:`spade_rl.envs.contract`, shipped as source text like the reference
environments. Unlike those, these are never trained on and never shown to the designer: no training
pool, warm-up, memory or corpus reads this package. They are played only by name, by the envs
evaluation suite (``spade-rl eval --suite envs --option envs.envs=sequence,oddword``) and by
``spade-rl envs validate src/spade_rl/envs/heldout/<name>.py``.

Every family draws its instance from the seed among many (thousands or more), so the evaluation's
seeds do not replay one instance; its constructor's defaults are the sizes the experiments evaluate
(``experiments/cpu-curriculum.toml``), chosen so that the base model wins some and not most: the
default model (SmolLM2-135M-Instruct) wins sequence 22.9%, tally 14.6%, opposite 16.7% and pattern
29.2% of 48 episodes (``experiments/results/heldout-base-rates``). It wins oddword 4.2% at its smallest
sensible size (three words), below the 10% a primary score needs at this scale, so the CPU experiment
leaves it out; it is kept for larger models.

    >>> from spade_rl.envs import heldout
    >>> heldout.NAMES
    ('sequence', 'oddword', 'tally', 'opposite', 'pattern')
    >>> "class TallyEnv" in heldout.source("tally")
    True
"""

import pathlib
from importlib import resources

NAMES: tuple[str, ...] = ("sequence", "oddword", "tally", "opposite", "pattern")

SETTINGS: dict[str, str] = dict.fromkeys(NAMES, "games")

DESCRIPTIONS: dict[str, str] = {
    "sequence": "Give the next number of a sequence with a constant step; too high/low feedback, 6 tries.",
    "oddword": "Name the word of three that is not in the others' group (animals, fruits, ...); 2 tries.",
    "tally": "Count how often one animal name appears in a list of six; too high/low feedback, 2 tries.",
    "opposite": "Choose the opposite of a word among four choices; 2 tries.",
    "pattern": "Say which word continues a repeating pattern of words; 2 tries.",
}

# A strategy that helps, never an instance's answer (as the reference environments' hints).
HINTS: dict[str, str] = {
    "sequence": (
        "Subtract two neighbouring numbers to find the step, then add the step to the last number; after "
        "'too high' or 'too low', check the subtraction again."
    ),
    "oddword": ("Name the group that most of the words share, then answer the one word that is not in it."),
    "tally": "Go through the list word by word and count only exact matches of the word asked for.",
    "opposite": "Answer the choice whose meaning is reversed, not one that is merely related.",
    "pattern": (
        "Find the shortest block of words that repeats, see where the list stops inside that block, and "
        "answer the block's next word."
    ),
}


class UnknownHeldOutName(KeyError):
    """A held-out family name that does not exist; the message lists the allowed names."""

    def __str__(self) -> str:
        return str(self.args[0])


def _check(name: str) -> None:
    if name not in NAMES:
        raise UnknownHeldOutName(f"unknown held-out game family {name!r}; allowed names: {', '.join(NAMES)}")


def path(name: str) -> pathlib.Path:
    """The file of the held-out family ``name``."""
    _check(name)
    return pathlib.Path(str(resources.files(__package__).joinpath(f"{name}.py")))


def source(name: str) -> str:
    """The source text of the held-out family ``name``."""
    _check(name)
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")
