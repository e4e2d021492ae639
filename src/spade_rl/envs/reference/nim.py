"""Nim with one pile: take 1, 2 or 3 stones a turn; whoever takes the last stone wins.

A multi-turn game against a fixed opponent. ``reset`` lays out a pile of 6 to 11 stones (never a
multiple of 4, so the first player can always force a win) and the agent moves first. Each turn the
agent writes how many stones it takes as ``\\boxed{2}``; the opponent then answers: it leaves a
multiple of 4 whenever it can (it wins from there), and takes 1 to 3 stones at random otherwise
(seeded by the episode's seed). So only play that leaves a multiple of 4 every time wins for sure;
taking one stone every turn wins about 2% of the episodes, random moves about 9%.
Taking the last stone wins (reward 1.0); when the opponent takes
it the game is lost (reward 0.0, terminated). An unreadable or illegal move is a wasted turn: the pile
stays as it is and the opponent does not move. A held-out environment: never in the training pool by
default, for evaluating transfer (``reference.HELD_OUT``).
"""

import random
import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
INTEGER = re.compile(r"[+-]?\d{1,6}")
MAX_TAKE = 3


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


def format_help(pile):
    most = min(MAX_TAKE, pile)
    return f"Write how many stones you take, 1 to {most}, inside \\boxed{{}}, for example \\boxed{{1}}."


class NimEnv:
    def __init__(self, max_turns: int = 8, min_pile: int = 6, max_pile: int = 11):
        if not (isinstance(min_pile, int) and isinstance(max_pile, int) and 2 <= min_pile <= max_pile):
            raise ValueError(f"need integers 2 <= min_pile <= max_pile, got {min_pile!r}, {max_pile!r}")
        if all(n % (MAX_TAKE + 1) == 0 for n in range(min_pile, max_pile + 1)):
            raise ValueError("the pile range holds only multiples of 4: the first player could not win")
        self.max_turns = max_turns
        self.min_pile, self.max_pile = min_pile, max_pile
        self._turn, self._pile = 0, 0
        self._opponent = random.Random(0)
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        sizes = [n for n in range(self.min_pile, self.max_pile + 1) if n % (MAX_TAKE + 1)]
        self._pile = rng.choice(sizes)
        self._opponent = random.Random(rng.randrange(2**31))
        self._turn = 0
        self._done = False
        observation = (
            f"There is a pile of {self._pile} stones. We take turns; you go first.\n"
            f"On each turn a player takes 1, 2 or 3 stones. Whoever takes the last stone wins.\n"
            f"You have {self.max_turns} turns. {format_help(self._pile)}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        self._turn += 1
        take = self._parse(action)
        if take is None or not 1 <= take <= min(MAX_TAKE, self._pile):
            observation = f"That is not a legal move. {self._pile} stones are left. {format_help(self._pile)}"
            status = "invalid"
        else:
            self._pile -= take
            if self._pile == 0:
                self._done = True
                return f"You took {take} and the last stone. You win!", 1.0, True, False, self._info("won")
            reply = self._reply(self._opponent, self._pile)
            self._pile -= reply
            if self._pile == 0:
                self._done = True
                observation = f"You took {take}. I took {reply}, the last stone. I win."
                return observation, 0.0, True, False, self._info("lost")
            observation = f"You took {take}. I took {reply}. {self._pile} stones are left."
            status = "played"
        if self._turn >= self.max_turns:
            self._done = True
            observation += " You are out of turns."
            return observation, 0.0, False, True, self._info(status)
        observation += f" Turns left: {self.max_turns - self._turn}."
        return observation, 0.0, False, False, self._info(status)

    def solution(self) -> list[str]:
        """Leave a multiple of 4 after every move, played against this episode's opponent."""
        pile, opponent = self._pile, random.Random()
        opponent.setstate(self._opponent.getstate())
        actions = []
        while pile > 0:  # nothing left to play once the game is over
            take = pile % (MAX_TAKE + 1) or 1
            actions.append(f"\\boxed{{{take}}}")
            pile -= take
            if pile == 0:
                return actions
            pile -= self._reply(opponent, pile)
            if pile == 0:  # only when the opponent was handed a pile it could empty: not from a winning start
                return actions
        return actions

    @staticmethod
    def _reply(rng, pile):
        """The opponent's move: leave a multiple of 4 when it can, else 1 to 3 stones at random."""
        return pile % (MAX_TAKE + 1) or rng.randint(1, min(MAX_TAKE, pile))

    def close(self) -> None:
        pass

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        if content is None or not INTEGER.fullmatch(content):
            return None
        return int(content)

    def _info(self, status):
        return {"turn": self._turn, "max_turns": self.max_turns, "status": status, "pile": self._pile}
