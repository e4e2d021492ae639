"""Next term: continue a number sequence that grows (or shrinks) by the same step, with a few tries.

A multi-turn game with feedback. ``reset`` draws an arithmetic sequence (a start, a step from ``min_step``
to ``max_step`` that adds, or with ``falling`` also subtracts, ``terms`` numbers shown) and asks for the
number that comes next,
answered as ``\\boxed{31}``. A wrong answer is told whether it is too high or too low, and the agent
tries again; the right number wins (reward 1.0); after ``tries`` wrong answers the episode ends
(terminated, reward 0). A held-out family: never trained on, never shown to the designer.
"""

import math
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
INTEGER = re.compile(r"[+-]?\d{1,9}")
STARTS = 2000  # starting points of a rising sequence (a falling one starts as far above its lowest)
GOLDEN = 0.6180339887  # seeds in a row land far apart among the instances, not next to each other


def _multiplier(count):
    """The first number from ``GOLDEN * count`` on that shares no factor with ``count``."""
    candidate = max(1, int(GOLDEN * count))
    while math.gcd(candidate, count) != 1:
        candidate += 1
    return candidate


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


class SequenceEnv:
    def __init__(
        self,
        max_turns: int = 8,
        tries: int = 6,
        terms: int = 4,
        min_step: int = 1,
        max_step: int = 3,
        falling: bool = False,
    ):
        if not isinstance(tries, int) or not 1 <= tries <= max_turns:
            raise ValueError(f"tries must be an integer from 1 to max_turns ({max_turns}), got {tries!r}")
        if not isinstance(terms, int) or not 3 <= terms <= 8:
            raise ValueError(f"terms must be an integer from 3 to 8, got {terms!r}")
        if (
            not isinstance(min_step, int)
            or not isinstance(max_step, int)
            or not 1 <= min_step <= max_step <= 50
        ):
            raise ValueError(f"need integers 1 <= min_step <= max_step <= 50, got {min_step!r}, {max_step!r}")
        if not isinstance(falling, bool):
            raise ValueError(f"falling must be true or false, got {falling!r}")
        self.max_turns, self.tries, self.terms = max_turns, tries, terms
        self.min_step, self.max_step = min_step, max_step
        self.falling = falling
        self._shown, self._answer, self._wrong = [], 0, 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        # The instance is the seed's place in a fixed permutation of all of them (multiplying by a number
        # prime to their count, near its golden section so that neighbouring seeds are far apart): any
        # ``instances()`` seeds in a row are distinct instances.
        count = self.instances()
        index = (0 if seed is None else seed) * _multiplier(count) % count
        index, rising = divmod(index, 2) if self.falling else (index, 1)
        index, step = divmod(index, self.max_step - self.min_step + 1)
        step = (step + self.min_step) * (1 if rising else -1)
        # A falling sequence starts high enough that every number, the answer too, stays positive.
        low = 1 if step > 0 else 1 - step * self.terms
        start = low + index
        self._shown = [start + step * i for i in range(self.terms)]
        self._answer = start + step * self.terms
        self._wrong = 0
        self._done = False
        observation = (
            "Each number of this sequence changes by the same amount. Write the number that comes next "
            "inside \\boxed{}. After a wrong answer I say whether it is too high or too low; you have "
            f"{self.tries} tries.\nSequence: {self._numbers()},"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        guess = self._parse(action)
        if guess == self._answer:
            self._done = True
            return f"Correct! {guess} comes next.", 1.0, True, False, self._info("won")
        self._wrong += 1
        if guess is None:
            verdict = "I could not read a number: write one whole number inside \\boxed{}."
        elif guess > self._answer:
            verdict = f"{guess} is too high."
        else:
            verdict = f"{guess} is too low."
        if self._wrong >= self.tries:
            self._done = True
            return (
                f"{verdict} No tries left; the next number was {self._answer}.",
                0.0,
                True,
                False,
                (self._info("lost")),
            )
        left = self.tries - self._wrong
        observation = f"{verdict} Tries left: {left}.\nSequence: {self._numbers()},"
        return observation, 0.0, False, False, self._info("wrong")

    def solution(self) -> list[str]:
        """The next number, computed from the step between the numbers shown."""
        return [f"\\boxed{{{self._shown[-1] + (self._shown[1] - self._shown[0])}}}"]

    def instances(self) -> int:
        """How many distinct instances there are: a start, a step and (``falling``) its sign."""
        return STARTS * (self.max_step - self.min_step + 1) * (2 if self.falling else 1)

    def close(self) -> None:
        pass

    def _numbers(self):
        return ", ".join(str(n) for n in self._shown)

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        if content is None or not INTEGER.fullmatch(content):
            return None
        return int(content)

    def _info(self, status):
        return {"tries_used": self._wrong, "tries": self.tries, "status": status}
