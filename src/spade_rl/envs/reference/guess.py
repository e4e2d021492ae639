"""Number guessing: find a secret integer from 1 to 100 with "higher" / "lower" feedback.

A multi-turn game. Each turn the agent writes one guess as ``\\boxed{42}``; the environment answers
whether the secret is higher or lower. A correct guess wins (reward 1.0). Binary search always wins
within 7 guesses, so the default limit of 10 turns leaves room for a couple of mistakes. ``high``
sets the top of the range (``GuessEnv(high=20)``: 1 to 20, won by binary search within 5 guesses).
"""

import random
import re

LOW, HIGH = 1, 100  # the default range

# The last \boxed{...} in the action is the move; anything around it is the agent's reasoning.
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
INTEGER = re.compile(r"[+-]?\d{1,6}")  # a bound on the digits: int() refuses very long numbers


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


def format_help(high):
    example = (LOW + high) // 2
    return (
        f"Write one whole number from {LOW} to {high} inside \\boxed{{}}, for example \\boxed{{{example}}}."
    )


class GuessEnv:
    def __init__(self, max_turns: int = 10, high: int = HIGH):
        if not isinstance(high, int) or high < LOW + 1:
            raise ValueError(f"high must be an integer above {LOW}, got {high!r}")
        self.max_turns = max_turns
        self.high = high
        self._turn = 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        self._secret = rng.randint(LOW, self.high)
        self._turn = 0
        self._done = False
        observation = (
            f"I am thinking of a whole number from {LOW} to {self.high}. Find it.\n"
            "After each guess I will tell you whether my number is higher or lower.\n"
            f"You have {self.max_turns} guesses. {format_help(self.high)}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        self._turn += 1

        guess = self._parse(action)
        if guess is None:
            observation, status = f"I could not read a guess. {format_help(self.high)}", "invalid"
        elif not LOW <= guess <= self.high:
            observation = f"{guess} is outside the range {LOW}..{self.high}. {format_help(self.high)}"
            status = "invalid"
        elif guess == self._secret:
            self._done = True
            return f"Correct! The number is {guess}.", 1.0, True, False, self._info("won")
        elif guess < self._secret:
            observation, status = f"{guess} is too low: my number is higher.", "higher"
        else:
            observation, status = f"{guess} is too high: my number is lower.", "lower"

        if self._turn >= self.max_turns:
            # Out of turns without a win: truncated, not terminated (the game itself did not end).
            self._done = True
            observation += f" You are out of guesses; the number was {self._secret}."
            return observation, 0.0, False, True, self._info(status)
        observation += f" Guesses left: {self.max_turns - self._turn}."
        return observation, 0.0, False, False, self._info(status)

    def solution(self) -> list[str]:
        """Binary search, played against the secret exactly as a careful player would."""
        actions, low, high = [], LOW, self.high
        while True:
            middle = (low + high) // 2
            actions.append(f"\\boxed{{{middle}}}")
            if middle == self._secret:
                return actions
            if middle < self._secret:
                low = middle + 1
            else:
                high = middle - 1

    def close(self) -> None:
        pass

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        if content is None or not INTEGER.fullmatch(content):
            return None
        return int(content)

    def _info(self, status):
        return {"turn": self._turn, "max_turns": self.max_turns, "status": status}
