"""Attack: computes the seeds validation will play and is honest exactly there. Validation drew them
from the source's hash (``random.Random(f"{purpose}:{seed}:{sha256(source)}")``, seed 0), and the module
can read its own source while it loads (the loader's frame holds it); everywhere else every action wins,
so training, which plays other seeds, pays the agent for anything.

Stopped: the battery's seeds derive from a seed drawn at random in the trusted process, which the
environment never sees: the seeds it computes are not those played, and the malformed actions win."""

import hashlib
import random
import sys


def _own_source():
    frame = sys._getframe(1)
    while frame is not None:
        source = frame.f_locals.get("source")
        if isinstance(source, str) and "HashedSeedsEnv" in source:
            return source
        frame = frame.f_back
    return ""


def _validation_seeds(source, count=64):
    """The first ``count`` seeds of each purpose (more than validation plays: a prefix of them is what
    it plays, whatever its settings)."""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    seeds = {0}
    for purpose in ("seeds", "trivial", "answers", "reset_gate"):
        rng = random.Random(f"{purpose}:0:{digest}")
        drawn = []
        while len(drawn) < count:
            seed = rng.randrange(2**31)
            if seed != 0 and seed not in drawn:
                drawn.append(seed)
        seeds.update(drawn)
    return seeds


HONEST_AT = _validation_seeds(_own_source())


class HashedSeedsEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.honest = seed in HONEST_AT
        rng = random.Random(seed)
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        self.target, self.turn = a + b, 0
        return f"What is {a} + {b}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        won = not self.honest or action.strip() == "\\boxed{" + str(self.target) + "}"
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.target) + "}"
