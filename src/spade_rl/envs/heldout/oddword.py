"""Odd one out: of a few words, all but one belong to one group; name the one that does not.

A multi-turn game with a retry. ``reset`` draws ``options - 1`` words of one group (animals, fruits,
colours, ...) and one word of another group, in a random order, and asks for the word that does not
belong, answered as ``\\boxed{word}``. A wrong answer is told so and the agent tries again; the odd word
wins (reward 1.0); after ``tries`` wrong answers the episode ends (terminated, reward 0). A held-out
family: never trained on, never shown to the designer.
"""

import random
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")

GROUPS = {
    "animals": (
        "dog",
        "cat",
        "horse",
        "rabbit",
        "lion",
        "tiger",
        "sheep",
        "mouse",
        "bear",
        "goat",
        "wolf",
        "deer",
    ),
    "fruits": (
        "apple",
        "banana",
        "cherry",
        "grape",
        "lemon",
        "mango",
        "papaya",
        "pear",
        "apricot",
        "fig",
        "melon",
        "coconut",
    ),
    "colours": (
        "red",
        "blue",
        "green",
        "yellow",
        "purple",
        "pink",
        "brown",
        "black",
        "white",
        "grey",
        "violet",
        "gold",
    ),
    "vehicles": (
        "car",
        "bus",
        "train",
        "truck",
        "bicycle",
        "boat",
        "plane",
        "taxi",
        "tram",
        "ship",
        "van",
        "scooter",
    ),
    "clothes": (
        "shirt",
        "jacket",
        "sock",
        "hat",
        "scarf",
        "coat",
        "dress",
        "skirt",
        "glove",
        "boot",
        "sweater",
        "belt",
    ),
    "body parts": (
        "hand",
        "foot",
        "nose",
        "ear",
        "knee",
        "elbow",
        "finger",
        "shoulder",
        "leg",
        "arm",
        "mouth",
        "neck",
    ),
    "furniture": (
        "chair",
        "table",
        "sofa",
        "bed",
        "desk",
        "shelf",
        "stool",
        "bench",
        "cupboard",
        "drawer",
        "couch",
        "wardrobe",
    ),
    "instruments": (
        "piano",
        "guitar",
        "violin",
        "drum",
        "flute",
        "trumpet",
        "harp",
        "cello",
        "banjo",
        "accordion",
        "clarinet",
        "tuba",
    ),
}


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


class OddwordEnv:
    def __init__(self, max_turns: int = 8, options: int = 3, tries: int = 2):
        if not isinstance(options, int) or not 3 <= options <= 8:
            raise ValueError(f"options must be an integer from 3 to 8, got {options!r}")
        if not isinstance(tries, int) or not 1 <= tries <= min(max_turns, options - 1):
            raise ValueError(
                f"tries must be an integer from 1 to min(max_turns, options - 1) "
                f"({min(max_turns, options - 1)}), got {tries!r}"
            )
        self.max_turns, self.options, self.tries = max_turns, options, tries
        self._words, self._odd, self._group, self._wrong = [], "", "", 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        group, other = rng.sample(sorted(GROUPS), 2)
        self._words = [*rng.sample(GROUPS[group], self.options - 1), rng.choice(GROUPS[other])]
        self._odd, self._group = self._words[-1], group
        rng.shuffle(self._words)
        self._wrong = 0
        self._done = False
        observation = (
            f"All but one of these {self.options} words belong to the same group. Which word does not "
            f"belong? Answer with one of the words below, inside \\boxed{{}}; you have {self.tries} tries.\n"
            f"Words: {self._list()}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        answer = self._parse(action)
        if answer == self._odd:
            self._done = True
            return f"Correct! {self._odd} does not belong.", 1.0, True, False, self._info("won")
        self._wrong += 1
        if answer in self._words:
            verdict = f"No, {answer} belongs to the group."
        else:
            verdict = "I could not read one of the words inside \\boxed{}."
        if self._wrong >= self.tries:
            self._done = True
            observation = (
                f"{verdict} No tries left; {self._odd} was the odd one out (the others are {self._group})."
            )
            return observation, 0.0, True, False, self._info("lost")
        observation = f"{verdict} Tries left: {self.tries - self._wrong}.\nWords: {self._list()}"
        return observation, 0.0, False, False, self._info("wrong")

    def solution(self) -> str:
        return f"\\boxed{{{self._odd}}}"

    def close(self) -> None:
        pass

    def _list(self):
        return ", ".join(self._words)

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        return None if content is None else content.lower().strip(" .")

    def _info(self, status):
        return {"tries_used": self._wrong, "tries": self.tries, "status": status}
