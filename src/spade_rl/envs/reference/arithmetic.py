"""Arithmetic word problems: one question, one answer.

A single-step reasoning environment. ``reset`` tells a short shop story built from the seed (one of
four story kinds: change from a purchase, selling full boxes, a percentage discount, stock over a
week); every answer is a whole number. The agent answers once as ``\\boxed{17}``; an exactly right
answer wins (reward 1.0), a wrong one ends the episode with reward 0.0. An action with no readable
number is a wasted turn; with the default limit of one turn it ends the episode as truncated.
``stories`` picks the story kinds (``ArithmeticEnv(stories=["more", "fewer"])``: the two one-step
kinds, a sum or a difference of two numbers below 10, which no default story is).
"""

import random
import re

PEOPLE = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farah", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena"]
ITEMS = ["notebook", "pen", "mug", "candle", "scarf", "poster", "basket", "lamp", "puzzle", "kite"]

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
# An answer may carry a dollar sign, thousands separators or the word "dollars": "$1,200 dollars".
NUMBER = re.compile(r"\$?\s*([+-]?\d{1,12}(?:\.\d{1,12})?)\s*(?:dollars?)?", re.IGNORECASE)

FORMAT_HELP = "Give your final answer as a whole number inside \\boxed{}, for example \\boxed{17}."


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


# Each story function takes the seeded generator and returns (question text, integer answer).


def change_story(rng):
    name = rng.choice(PEOPLE)
    item_a, item_b = rng.sample(ITEMS, 2)
    count_a, count_b = rng.randint(2, 6), rng.randint(2, 6)
    price_a, price_b = rng.randint(2, 9), rng.randint(2, 9)
    total = count_a * price_a + count_b * price_b
    note = next(n for n in (20, 50, 100, 200) if n > total)  # the smallest note that covers it (max 108)
    question = (
        f"{name} buys {count_a} {item_a}s at ${price_a} each and {count_b} {item_b}s at ${price_b} each, "
        f"and pays with a ${note} note. How many dollars of change does {name} get back?"
    )
    return question, note - total


def boxes_story(rng):
    per_box, full_boxes = rng.randint(4, 12), rng.randint(5, 20)
    loose = rng.randint(1, per_box - 1)  # leftovers that do not fill a box and are not sold
    price = rng.randint(3, 15)
    baked = per_box * full_boxes + loose
    question = (
        f"A bakery packs {per_box} cookies into each box. Today it baked {baked} cookies and sells only "
        f"full boxes, at ${price} per box. How many dollars does it earn if it sells every full box?"
    )
    return question, full_boxes * price


def discount_story(rng):
    name, item = rng.choice(PEOPLE), rng.choice(ITEMS)
    price = 20 * rng.randint(1, 6)  # a multiple of 20, so every discount below is a whole number
    percent = rng.choice([10, 20, 25, 30, 40, 50])
    count = rng.randint(2, 5)
    question = (
        f"A {item} normally costs ${price}. This week everything is {percent}% off, and {name} buys "
        f"{count} {item}s. How many dollars does {name} pay in total?"
    )
    return question, count * (price - price * percent // 100)


def stock_story(rng):
    item = rng.choice(ITEMS)
    start, sold_monday = rng.randint(30, 80), rng.randint(5, 25)
    boxes, per_box = rng.randint(2, 5), rng.randint(6, 12)
    sold_wednesday = rng.randint(5, start - sold_monday + boxes * per_box)
    question = (
        f"A shop starts the week with {start} {item}s. It sells {sold_monday} on Monday, receives "
        f"{boxes} boxes of {per_box} {item}s on Tuesday, and sells {sold_wednesday} on Wednesday. "
        f"How many {item}s does it have left?"
    )
    return question, start - sold_monday + boxes * per_box - sold_wednesday


def more_story(rng):
    name, item = rng.choice(PEOPLE), rng.choice(ITEMS)
    have, more = rng.randint(1, 9), rng.randint(1, 9)
    question = f"{name} has {have} {item}s and buys {more} more. How many {item}s does {name} have now?"
    return question, have + more


def fewer_story(rng):
    name, item = rng.choice(PEOPLE), rng.choice(ITEMS)
    have = rng.randint(2, 9)
    gone = rng.randint(1, have - 1)
    question = f"{name} has {have} {item}s and gives {gone} away. How many {item}s does {name} have left?"
    return question, have - gone


STORIES = [change_story, boxes_story, discount_story, stock_story]  # the default kinds
EASY_STORIES = [more_story, fewer_story]
KINDS = {story.__name__.removesuffix("_story"): story for story in STORIES + EASY_STORIES}


class ArithmeticEnv:
    def __init__(self, max_turns: int = 1, stories=None):
        kinds = [story.__name__.removesuffix("_story") for story in STORIES] if stories is None else stories
        if not isinstance(kinds, (list, tuple)) or not kinds or any(kind not in KINDS for kind in kinds):
            raise ValueError(f"stories must be a non-empty list of {sorted(KINDS)}, got {stories!r}")
        self.stories = [KINDS[kind] for kind in kinds]
        self.max_turns = max_turns
        self._turn = 0
        self._story = None
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        story = rng.choice(self.stories)
        self._question, self._answer = story(rng)
        self._story = story.__name__
        self._turn = 0
        self._done = False
        observation = f"Solve this problem.\n\n{self._question}\n\n{FORMAT_HELP}"
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The episode is over. Call reset() to start again.", 0.0, True, False, self._info("over")
        self._turn += 1

        answer = self._parse(action)
        if answer is not None:
            # One answer ends the episode, right or wrong.
            self._done = True
            if answer == self._answer:
                return f"Correct: the answer is {self._answer}.", 1.0, True, False, self._info("correct")
            return f"Wrong: {answer:g} is not the answer.", 0.0, True, False, self._info("wrong")

        observation = f"I could not read a number in your answer. {FORMAT_HELP}"
        if self._turn >= self.max_turns:
            self._done = True
            return observation + " No turns left.", 0.0, False, True, self._info("invalid")
        return observation, 0.0, False, False, self._info("invalid")

    def solution(self) -> list[str]:
        return [f"\\boxed{{{self._answer}}}"]

    def close(self) -> None:
        pass

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        if content is None:
            return None
        match = NUMBER.fullmatch(content.replace(",", "").strip())
        return float(match.group(1)) if match else None

    def _info(self, status):
        return {
            "turn": self._turn,
            "max_turns": self.max_turns,
            "story": self._story,
            "status": status,
        }
