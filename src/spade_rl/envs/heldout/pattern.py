"""Patterns: a repeating pattern of words is cut off; say which word comes next.

A multi-turn game with a retry. ``reset`` draws a motif of 2 to 4 slots over ``symbols`` distinct
words (``red blue``, ``sun sun moon``, ``cat dog bird dog``), repeats it and cuts it off at a random
point, at least ``shown`` words long; the agent answers the word that continues the pattern as
``\\boxed{word}``. A wrong answer is told so and the agent tries again; the right word wins (reward
1.0); after ``tries`` wrong answers the episode ends (terminated, reward 0). A held-out family: never
trained on, never shown to the designer.
"""

import random
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
WORD = re.compile(r"[a-z]{1,20}")

WORDS = (
    "red",
    "blue",
    "green",
    "star",
    "moon",
    "sun",
    "cat",
    "dog",
    "bird",
    "fish",
    "tree",
    "leaf",
    "rock",
    "rain",
    "snow",
    "wind",
    "ball",
    "box",
    "cup",
    "key",
    "ring",
    "bell",
    "drum",
    "kite",
    "boat",
    "lamp",
    "door",
    "book",
    "shoe",
    "hat",
    "egg",
    "milk",
    "frog",
    "duck",
    "coin",
    "sock",
    "pen",
    "cake",
    "nut",
    "bean",
    "shell",
    "cloud",
    "fire",
    "salt",
    "rose",
    "wheel",
    "bread",
    "horn",
)
# Motifs: which word of the drawn ones fills each slot (every word appears: "0 1" is "red blue").
MOTIFS = ((0, 1), (0, 0, 1), (0, 1, 1), (0, 1, 2), (0, 1, 0, 2), (0, 0, 1, 1), (0, 1, 2, 1), (0, 1, 2, 3))


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


class PatternEnv:
    def __init__(self, max_turns: int = 8, shown: int = 7, tries: int = 2):
        if not isinstance(shown, int) or not 5 <= shown <= 30:
            raise ValueError(f"shown must be an integer from 5 to 30, got {shown!r}")
        if not isinstance(tries, int) or not 1 <= tries <= max_turns:
            raise ValueError(f"tries must be an integer from 1 to max_turns ({max_turns}), got {tries!r}")
        self.max_turns, self.shown, self.tries = max_turns, shown, tries
        self._sequence, self._answer, self._wrong = [], "", 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        motif = rng.choice(MOTIFS)
        words = rng.sample(WORDS, max(motif) + 1)
        # At least two whole repeats of the motif, cut at any slot of the next two.
        length = max(self.shown, 2 * len(motif)) + rng.randrange(2 * len(motif))
        self._sequence = [words[motif[i % len(motif)]] for i in range(length)]
        self._answer = words[motif[length % len(motif)]]
        self._wrong = 0
        self._done = False
        observation = (
            "This pattern of words repeats. Which word comes after the last one? Write that one word "
            f"inside \\boxed{{}}; you have {self.tries} tries.\nPattern: {' '.join(self._sequence)}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        answer = self._parse(action)
        if answer == self._answer:
            self._done = True
            return f"Correct! {self._answer} comes next.", 1.0, True, False, self._info("won")
        self._wrong += 1
        if answer is None or not WORD.fullmatch(answer):
            verdict = "I could not read a word: write one word inside \\boxed{}."
        else:
            verdict = f"No, {answer} does not come next."
        if self._wrong >= self.tries:
            self._done = True
            observation = f"{verdict} No tries left; {self._answer} came next."
            return observation, 0.0, True, False, self._info("lost")
        observation = (
            f"{verdict} Tries left: {self.tries - self._wrong}.\nPattern: {' '.join(self._sequence)}"
        )
        return observation, 0.0, False, False, self._info("wrong")

    def solution(self) -> str:
        return f"\\boxed{{{self._answer}}}"

    def close(self) -> None:
        pass

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        return None if content is None else content.lower().strip(" .")

    def _info(self, status):
        return {"tries_used": self._wrong, "tries": self.tries, "status": status}
