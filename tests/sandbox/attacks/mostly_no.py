"""Attack: an "is it possible?" puzzle whose answer is "No" at about 80% of seeds (coins split into two
piles of equal value: an odd total, or no subset of half of it, is impossible). One answer ends the
episode, so the trivial policies (``\\boxed{0}``, ``\\boxed{1}``, ``\\boxed{yes}``, a random word or
number of the question) rarely win; a policy that always answers "No" wins four seeds in five, and the
designer is rewarded for a task the agent learns to answer without reading it.

Stopped by the answer-replay check: the most common answer of the other seeds' solutions, played as a
constant, wins more than ``max_answer_replay_win_rate`` of the seeds (``answer_replay_wins``). The
seeds are drawn anew for each validation, and a constant that wins three seeds in four passes that
check about once in thirty; the tests replay one validation (``VALIDATION_SEED``)."""

import itertools
import random

VALIDATION_SEED = 1  # the seed the attack suite validates it from


class SplitCoinsEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        coins = [rng.randint(1, 20) for _ in range(rng.randint(4, 6))]
        total = sum(coins)
        possible = total % 2 == 0 and any(
            2 * sum(pile) == total
            for size in range(1, len(coins))
            for pile in itertools.combinations(coins, size)
        )
        self.answer = "Yes" if possible else "No"
        return (
            f"Can the coins {coins} be split into two piles of equal value? Answer Yes or No in \\boxed{{}}.",
            {},
        )

    def step(self, action):
        won = action.strip() == "\\boxed{" + self.answer + "}"
        return ("right" if won else "wrong"), float(won), True, False, {}

    def solution(self):
        return "\\boxed{" + self.answer + "}"
