# --- spade-rl kit "question": the boilerplate of a one-question environment (standard library only) ---
# A design subclasses QuestionTask and writes make(rng) -> (question, answer); the kit draws the
# instance from the seed, states the answer format, judges the last \boxed{...} of an action, counts
# turns, and plays its own solution (the answer, boxed). With attempts > 1 a wrong answer is followed by
# another try ("Wrong answer. Try again"; with feedback "direction", a wrong number is also called too
# high or too low when the answer is a number) until the answer is right or no attempt is left.
import random
import re

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def _normalise(text):
    text = " ".join(str(text).split()).strip().rstrip(".").lower()
    return text.replace("$", "").replace(",", "") if re.fullmatch(r"[$\d.,+-]+", text) else text


def _same(given, expected):
    a, b = _normalise(given), _normalise(expected)
    if a == b:
        return True
    if re.fullmatch(r"[+-]?\d{1,30}", a) and re.fullmatch(r"[+-]?\d{1,30}", b):
        return int(a) == int(b)  # whole numbers exactly ("07" is 7)
    try:
        x, y = float(a), float(b)
    except (ValueError, OverflowError):
        return False
    return abs(x - y) <= 1e-9 * max(1.0, abs(y))  # 10.0 is 10; 0.1 + 0.2 is 0.3


def _number(text):
    text = _normalise(text)
    if not re.fullmatch(r"[+-]?(\d{1,30}(\.\d{0,30})?|\.\d{1,30})", text):
        return None
    return float(text)


class QuestionTask:
    hint = ""

    def __init__(self, max_turns: int = 1, attempts: int = 1, feedback: str = "wrong"):
        if type(attempts) is not int or attempts < 1:
            raise ValueError(f"attempts must be a whole number >= 1, got {attempts!r}")
        if feedback not in ("wrong", "direction"):
            raise ValueError(f"feedback must be 'wrong' or 'direction', got {feedback!r}")
        self.max_turns = max_turns
        self.attempts = attempts
        self.feedback = feedback
        self._turn = 0
        self._tries = 0
        self._done = True

    def make(self, rng):
        raise NotImplementedError("a subclass writes make(rng) -> (question, answer)")

    def reset(self, seed=None):
        rng = random.Random(0 if seed is None else seed)
        question, answer = self.make(rng)
        self._question, self._answer = str(question).strip(), " ".join(str(answer).split())
        if not self._question or not self._answer or "{" in self._answer or "}" in self._answer:
            raise ValueError("make() must return a question and an answer without braces")
        self._turn, self._tries, self._done = 0, 0, False
        told = self._question + "\n\nAnswer with only the answer inside \\boxed{}."
        if self.attempts > 1:
            told += (
                f"\nYou have {min(self.attempts, self.max_turns)} attempts: a wrong answer is followed by "
            )
            told += "another try" + (
                " (a wrong number is called too high or too low)." if self._directed() else "."
            )
        return told, self._info("start")

    def step(self, action):
        if self._done:
            return "The episode is over.", 0.0, True, False, self._info("over")
        self._turn += 1
        found = _BOXED.findall(action if isinstance(action, str) else "")
        if found and self.attempts > 1:
            return self._attempt(found[-1])
        if found:
            self._done = True
            if _same(found[-1], self._answer):
                return "Correct.", 1.0, True, False, self._info("correct")
            return "Wrong answer.", 0.0, True, False, self._info("wrong")
        if self._turn >= self.max_turns:
            self._done = True
            return "No answer in \\boxed{}. No turns left.", 0.0, False, True, self._info("no_answer")
        return "No answer in \\boxed{}. Answer inside \\boxed{}.", 0.0, False, False, self._info("no_answer")

    def _attempt(self, given):
        self._tries += 1
        if _same(given, self._answer):
            self._done = True
            return "Correct.", 1.0, True, False, self._info("correct")
        said, number = "Wrong answer.", _number(given) if self._directed() else None
        if number is not None and number != _number(self._answer):
            said = "Wrong answer: too high." if number > _number(self._answer) else "Wrong answer: too low."
        if self._tries >= self.attempts:
            self._done = True
            return said + " No attempts left.", 0.0, True, False, self._info("wrong")
        if self._turn >= self.max_turns:
            self._done = True
            return said + " Out of turns.", 0.0, False, True, self._info("wrong")
        left = min(self.attempts - self._tries, self.max_turns - self._turn)
        return said + f" Try again ({left} attempts left).", 0.0, False, False, self._info("wrong")

    def _directed(self):
        return self.feedback == "direction" and _number(self._answer) is not None

    def solution(self):
        return ["\\boxed{" + self._answer + "}"]

    def _info(self, status):
        if self.attempts > 1:
            return {"turn": self._turn, "status": status, "attempts_left": self.attempts - self._tries}
        return {"turn": self._turn, "status": status}


# --- the design ---
