"""Which number is larger: a few rounds of comparing two numbers, scored by the share answered right.

A multi-turn game with partial credit. ``reset`` draws ``rounds`` pairs of distinct numbers from
``low`` to ``high`` (by default 4 pairs of two-digit numbers). Each turn shows one pair and the agent
answers with the larger number as ``\\boxed{57}``; the environment says whether it was right and shows
the next pair. After the last pair the episode ends (terminated) with the share of pairs answered right
as its reward: 1.0, a win, only when every pair was right. An answer that is neither number of the pair
counts as wrong. A held-out environment: never in the training pool by default, for evaluating transfer
(``reference.HELD_OUT``).
"""

import random
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
INTEGER = re.compile(r"[+-]?\d{1,12}")

FORMAT_HELP = "Write the larger number inside \\boxed{}, for example \\boxed{50}."


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


class CompareEnv:
    def __init__(self, max_turns: int = 8, rounds: int = 4, low: int = 10, high: int = 99):
        if not isinstance(rounds, int) or not 1 <= rounds <= max_turns:
            raise ValueError(f"rounds must be an integer from 1 to max_turns ({max_turns}), got {rounds!r}")
        if not (isinstance(low, int) and isinstance(high, int) and low < high):
            raise ValueError(f"need integers low < high, got {low!r}, {high!r}")
        self.max_turns, self.rounds, self.low, self.high = max_turns, rounds, low, high
        self._turn, self._right, self._pairs = 0, 0, []
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        self._pairs = [tuple(rng.sample(range(self.low, self.high + 1), 2)) for _ in range(self.rounds)]
        self._turn = 0
        self._right = 0
        self._done = False
        observation = (
            f"We will compare {self.rounds} pairs of numbers. For each pair, tell me which number is "
            f"larger.\n{FORMAT_HELP}\n{self._question()}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        a, b = self._pairs[self._turn]
        self._turn += 1
        answer = self._parse(action)
        if answer == max(a, b):
            self._right += 1
            verdict = f"Right: {max(a, b)} is larger."
        elif answer is None:
            verdict = f"I could not read a number: {FORMAT_HELP} This time {max(a, b)} is larger."
        else:
            verdict = f"Wrong: {max(a, b)} is larger."
        if self._turn >= self.rounds:
            self._done = True
            score = self._right / self.rounds
            observation = f"{verdict} You got {self._right} of {self.rounds} right."
            status = "won" if self._right == self.rounds else "done"
            return observation, score, True, False, self._info(status)
        return f"{verdict} {self._question()}", 0.0, False, False, self._info("played")

    def solution(self) -> list[str]:
        """The larger number of every pair, from the current one on."""
        return [f"\\boxed{{{max(a, b)}}}" for a, b in self._pairs[self._turn :]]

    def close(self) -> None:
        pass

    def _question(self):
        a, b = self._pairs[self._turn]
        return f"Pair {self._turn + 1} of {self.rounds}: which is larger, {a} or {b}?"

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        if content is None or not INTEGER.fullmatch(content):
            return None
        return int(content)

    def _info(self, status):
        return {"turn": self._turn, "max_turns": self.max_turns, "status": status, "right": self._right}
