"""Tally: count how often one word appears in a list, with feedback on a wrong count.

A multi-turn game with feedback. ``reset`` draws a list of ``length`` words from ``kinds`` animal
names and asks how many times one of them appears (at least twice), answered as ``\\boxed{3}``. A wrong
count is told whether it is too high or too low and the agent tries again; the right count wins
(reward 1.0); after ``tries`` wrong answers the episode ends (terminated, reward 0). A held-out family:
never trained on, never shown to the designer.
"""

import random
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
INTEGER = re.compile(r"[+-]?\d{1,9}")
MAX_COUNT = 5  # the largest count asked for
NAMES = ("cat", "dog", "fox", "owl", "bee", "cow", "pig", "hen", "ant", "elk", "yak", "bat", "eel", "ram")


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


class TallyEnv:
    def __init__(self, max_turns: int = 8, length: int = 6, kinds: int = 3, tries: int = 2):
        if not isinstance(length, int) or not 3 <= length <= 30:
            raise ValueError(f"length must be an integer from 3 to 30, got {length!r}")
        if not isinstance(kinds, int) or not 2 <= kinds <= min(length - 1, len(NAMES)):
            raise ValueError(
                f"kinds must be an integer from 2 to min(length - 1, {len(NAMES)}), got {kinds!r}"
            )
        if not isinstance(tries, int) or not 1 <= tries <= max_turns:
            raise ValueError(f"tries must be an integer from 1 to max_turns ({max_turns}), got {tries!r}")
        self.max_turns, self.length, self.kinds, self.tries = max_turns, length, kinds, tries
        self._items, self._target, self._count, self._wrong = [], "", 0, 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        names = rng.sample(NAMES, self.kinds)
        self._target = names[0]
        # At least twice (one is the answer a lazy policy gives), and every other kind at least once.
        self._count = rng.randint(2, min(MAX_COUNT, self.length - self.kinds + 1))
        rest = names[1:] + [rng.choice(names[1:]) for _ in range(self.length - self._count - self.kinds + 1)]
        self._items = [self._target] * self._count + rest
        rng.shuffle(self._items)
        self._wrong = 0
        self._done = False
        observation = (
            f"How many times does the word '{self._target}' appear in the list below? Write the count, a "
            f"number from 1 to {self.length}, inside \\boxed{{}}. After a wrong count I say whether it is "
            f"too high or too low; you have {self.tries} tries.\nList: {' '.join(self._items)}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        guess = self._parse(action)
        if guess == self._count:
            self._done = True
            return f"Correct! '{self._target}' appears {guess} times.", 1.0, True, False, self._info("won")
        self._wrong += 1
        if guess is None:
            verdict = "I could not read a count: write one whole number inside \\boxed{}."
        elif guess > self._count:
            verdict = f"{guess} is too high."
        else:
            verdict = f"{guess} is too low."
        if self._wrong >= self.tries:
            self._done = True
            observation = f"{verdict} No tries left; '{self._target}' appears {self._count} times."
            return observation, 0.0, True, False, self._info("lost")
        observation = f"{verdict} Tries left: {self.tries - self._wrong}.\nList: {' '.join(self._items)}"
        return observation, 0.0, False, False, self._info("wrong")

    def solution(self) -> str:
        return f"\\boxed{{{self._items.count(self._target)}}}"

    def close(self) -> None:
        pass

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        if content is None or not INTEGER.fullmatch(content):
            return None
        return int(content)

    def _info(self, status):
        return {"tries_used": self._wrong, "tries": self.tries, "status": status}
