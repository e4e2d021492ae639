"""Opposites: choose, among a few words, the one that means the opposite of a given word.

A multi-turn game with a retry. ``reset`` draws a word and offers ``options`` words: its opposite and
words from other pairs, in a random order; the agent answers as ``\\boxed{word}``. A wrong answer is
told so and the agent tries again; the opposite wins (reward 1.0); after ``tries`` wrong answers the
episode ends (terminated, reward 0). A held-out family: never trained on, never shown to the designer.
"""

import random
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")

PAIRS = (
    ("hot", "cold"),
    ("big", "small"),
    ("fast", "slow"),
    ("up", "down"),
    ("happy", "sad"),
    ("light", "dark"),
    ("open", "closed"),
    ("full", "empty"),
    ("early", "late"),
    ("hard", "soft"),
    ("wet", "dry"),
    ("young", "old"),
    ("tall", "short"),
    ("rich", "poor"),
    ("loud", "quiet"),
    ("strong", "weak"),
    ("clean", "dirty"),
    ("thick", "thin"),
    ("heavy", "light"),
    ("win", "lose"),
    ("push", "pull"),
    ("first", "last"),
    ("inside", "outside"),
    ("above", "below"),
    ("buy", "sell"),
    ("day", "night"),
    ("left", "right"),
    ("true", "false"),
    ("begin", "end"),
    ("near", "far"),
    ("cheap", "expensive"),
    ("sweet", "sour"),
    ("awake", "asleep"),
    ("friend", "enemy"),
    ("give", "take"),
    ("laugh", "cry"),
    ("arrive", "leave"),
    ("remember", "forget"),
    ("wide", "narrow"),
    ("easy", "difficult"),
)


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


class OppositeEnv:
    def __init__(self, max_turns: int = 8, options: int = 4, tries: int = 2):
        if not isinstance(options, int) or not 2 <= options <= 8:
            raise ValueError(f"options must be an integer from 2 to 8, got {options!r}")
        if not isinstance(tries, int) or not 1 <= tries <= min(max_turns, options - 1):
            raise ValueError(
                f"tries must be an integer from 1 to min(max_turns, options - 1) "
                f"({min(max_turns, options - 1)}), got {tries!r}"
            )
        self.max_turns, self.options, self.tries = max_turns, options, tries
        self._word, self._answer, self._choices, self._wrong = "", "", [], 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        index = rng.randrange(len(PAIRS))
        pair = PAIRS[index]
        self._word, self._answer = pair if rng.random() < 0.5 else pair[::-1]
        # Distractors: words of other pairs that are neither word of this pair ("light" is in two).
        others = sorted({w for i, p in enumerate(PAIRS) if i != index for w in p} - set(pair))
        self._choices = [*rng.sample(others, self.options - 1), self._answer]
        rng.shuffle(self._choices)
        self._wrong = 0
        self._done = False
        observation = (
            f"Which of the choices means the opposite of '{self._word}'? Write that word inside "
            f"\\boxed{{}}; you have {self.tries} tries.\nChoices: {self._list()}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        answer = self._parse(action)
        if answer == self._answer:
            self._done = True
            observation = f"Correct! '{self._answer}' is the opposite of '{self._word}'."
            return observation, 1.0, True, False, self._info("won")
        self._wrong += 1
        if answer in self._choices:
            verdict = f"No, '{answer}' is not the opposite of '{self._word}'."
        else:
            verdict = "I could not read one of the choices inside \\boxed{}."
        if self._wrong >= self.tries:
            self._done = True
            observation = f"{verdict} No tries left; the opposite of '{self._word}' is '{self._answer}'."
            return observation, 0.0, True, False, self._info("lost")
        observation = f"{verdict} Tries left: {self.tries - self._wrong}.\nChoices: {self._list()}"
        return observation, 0.0, False, False, self._info("wrong")

    def solution(self) -> str:
        return f"\\boxed{{{self._answer}}}"

    def close(self) -> None:
        pass

    def _list(self):
        return ", ".join(self._choices)

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        return None if content is None else content.lower().strip(" .'\"")

    def _info(self, status):
        return {"tries_used": self._wrong, "tries": self.tries, "status": status}
