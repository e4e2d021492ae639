"""Codebreaker: a Mastermind-style logic puzzle.

A multi-turn deduction game. The secret is 4 digits, each from 1 to 6 (digits may repeat). Each
turn the agent guesses a code as ``\\boxed{1122}``; the environment answers how many digits are
right and in the right place ("exact") and how many more are right but in the wrong place
("misplaced"). Guessing the secret wins (reward 1.0). The "first code consistent with all feedback
so far" strategy wins within 9 guesses for every one of the 1296 secrets, so 10 turns is enough.
``length`` and ``symbols`` size the code (``CodebreakerEnv(length=2, symbols=4)``: 16 secrets of 2
digits from 1 to 4, won by that strategy within 4 guesses).
"""

import itertools
import random
import re

LENGTH = 4  # the default code: 4 digits from 1 to 6
SYMBOLS = 6

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def format_help(length, digits):
    example = "".join(digits[min(i // 2, len(digits) - 1)] for i in range(length))
    return (
        f"Write a code of {length} digits, each from {digits[0]} to {digits[-1]}, inside \\boxed{{}}, "
        f"for example \\boxed{{{example}}}."
    )


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


def score(secret, guess):
    """(exact, misplaced) for ``guess`` against ``secret``, both strings of digits.

    exact counts positions where the digits agree; misplaced counts the remaining digit matches: the
    total of the common digits (with multiplicity) minus the exact ones.
    """
    exact = sum(s == g for s, g in zip(secret, guess, strict=True))
    common = sum(min(secret.count(digit), guess.count(digit)) for digit in set(secret))
    return exact, common - exact


class CodebreakerEnv:
    def __init__(self, max_turns: int = 10, length: int = LENGTH, symbols: int = SYMBOLS):
        if not isinstance(length, int) or not 1 <= length <= 6:
            raise ValueError(f"length must be an integer from 1 to 6, got {length!r}")
        if not isinstance(symbols, int) or not 2 <= symbols <= 9:
            raise ValueError(f"symbols must be an integer from 2 to 9, got {symbols!r}")
        self.max_turns = max_turns
        self.length = length
        self.digits = "123456789"[:symbols]
        self._help = format_help(length, self.digits)
        self._turn = 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        self._secret = "".join(rng.choice(self.digits) for _ in range(self.length))
        self._turn = 0
        self._done = False
        observation = (
            f"Break my secret code: {self.length} digits, each from {self.digits[0]} to {self.digits[-1]}; "
            "digits may repeat.\nAfter each guess I tell you two numbers: exact = digits that are right "
            "and in the right place; misplaced = other digits that appear in the code but in a different "
            f"place.\n{self._help} You have {self.max_turns} guesses."
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        self._turn += 1

        guess = self._parse(action)
        if guess is None:
            observation, status, feedback = f"I could not read a code. {self._help}", "invalid", None
        else:
            exact, misplaced = score(self._secret, guess)
            if exact == self.length:
                self._done = True
                return f"{guess}: exact {exact}. You broke the code!", 1.0, True, False, self._info("won")
            observation = f"{guess}: exact {exact}, misplaced {misplaced}."
            status, feedback = "scored", [exact, misplaced]

        if self._turn >= self.max_turns:
            self._done = True
            observation += f" You are out of guesses; the code was {self._secret}."
            return observation, 0.0, False, True, self._info(status, feedback)
        observation += f" Guesses left: {self.max_turns - self._turn}."
        return observation, 0.0, False, False, self._info(status, feedback)

    def solution(self) -> list[str]:
        """Always guess the first code (in sorted order) that agrees with all the feedback so far.

        A code that disagrees with some feedback never agrees again, so one pass over the sorted
        codes is enough: each guess is the next code after the previous guess that is consistent.
        """
        history, actions = [], []
        for digits in itertools.product(self.digits, repeat=self.length):  # in sorted order
            code = "".join(digits)
            if all(score(code, guess) == feedback for guess, feedback in history):
                actions.append(f"\\boxed{{{code}}}")
                if code == self._secret:
                    return actions
                history.append((code, score(self._secret, code)))
        raise RuntimeError("unreachable: the secret is consistent with every feedback")

    def close(self) -> None:
        pass

    def _parse(self, action):
        content = last_boxed(action if isinstance(action, str) else "")
        if content is None:
            return None
        code = re.sub(r"[\s,]+", "", content)  # tolerate "1 1 2 2" and "1,1,2,2"
        if len(code) != self.length or any(digit not in self.digits for digit in code):
            return None
        return code

    def _info(self, status, feedback=None):
        return {"turn": self._turn, "max_turns": self.max_turns, "status": status, "feedback": feedback}
