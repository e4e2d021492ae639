"""Lights Out: switch every light off on a 4x4 board.

A multi-turn logic puzzle. Pressing a cell toggles it and its up/down/left/right neighbours. The
puzzle is made by pressing a few seeded random cells on a dark board, so it is always solvable:
pressing the same cells again (in any order) undoes it, and a cell pressed twice is a no-op. Each
turn the agent presses one cell, written as ``\\boxed{row,col}`` with rows and columns counted from
1, for example ``\\boxed{2,3}``. A dark board wins (reward 1.0).
"""

import random
import re

SIZE = 4

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")

FORMAT_HELP = (
    f"Press one cell by writing its row and column (each from 1 to {SIZE}) inside \\boxed{{}}, "
    "for example \\boxed{2,3} for row 2, column 3."
)


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


def press(board, row, col):
    """Toggle cell (row, col), counted from 0, and its orthogonal neighbours, in place."""
    for dr, dc in ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)):
        r, c = row + dr, col + dc
        if 0 <= r < SIZE and 0 <= c < SIZE:
            board[r][c] = not board[r][c]


def make_puzzle(rng):
    """(board, cells): a lit board and the sorted cells whose presses switch it off.

    Random presses may repeat; a cell pressed an even number of times cancels out. Fewer than two
    cells left is too easy a puzzle, and presses can even leave the board dark (4x4 boards have
    such "quiet" press patterns); in either case, draw again.
    """
    while True:
        odd = set()
        for _ in range(rng.randint(3, 6)):
            odd ^= {(rng.randrange(SIZE), rng.randrange(SIZE))}
        board = [[False] * SIZE for _ in range(SIZE)]
        for row, col in odd:
            press(board, row, col)
        if len(odd) >= 2 and any(any(line) for line in board):
            return board, sorted(odd)


class LightsEnv:
    def __init__(self, max_turns: int = 20):
        self.max_turns = max_turns
        self._turn = 0
        self._board = None
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        self._board, self._presses = make_puzzle(rng)
        self._turn = 0
        self._done = False
        observation = (
            f"Lights Out on a {SIZE}x{SIZE} board: O is a light that is on, . is off. Pressing a cell "
            "toggles it and its neighbours above, below, left and right. Switch every light off.\n"
            f"{FORMAT_HELP} One press per turn; you have {self.max_turns} turns.\n\n{self._render()}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        self._turn += 1

        cell = self._parse(action)
        if cell is None:
            observation, status = f"I could not read a cell. {FORMAT_HELP}", "invalid"
        else:
            press(self._board, cell[0] - 1, cell[1] - 1)
            if not any(any(line) for line in self._board):
                self._done = True
                observation = f"You pressed {cell[0]},{cell[1]}. All lights are off. You win!"
                return observation, 1.0, True, False, self._info("won")
            observation, status = f"You pressed {cell[0]},{cell[1]}.", "pressed"

        if self._turn >= self.max_turns:
            self._done = True
            return observation + " You are out of turns.", 0.0, False, True, self._info(status)
        observation += f" Turns left: {self.max_turns - self._turn}.\n\n{self._render()}"
        return observation, 0.0, False, False, self._info(status)

    def solution(self) -> list[str]:
        """Press each generating cell once, in row-major order (presses commute)."""
        return [f"\\boxed{{{row + 1},{col + 1}}}" for row, col in self._presses]

    def close(self) -> None:
        pass

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "") or ""
        # "2,3", "2 3" and "(2, 3)" all name row 2, column 3.
        numbers = content.strip("() ").replace(",", " ").split()
        if len(numbers) != 2 or not all(re.fullmatch(r"\d{1,2}", number) for number in numbers):
            return None
        row, col = int(numbers[0]), int(numbers[1])
        return (row, col) if 1 <= row <= SIZE and 1 <= col <= SIZE else None

    def _render(self):
        lines = ["   " + " ".join(str(col + 1) for col in range(SIZE))]
        for row, line in enumerate(self._board):
            lines.append(f"{row + 1:>2} " + " ".join("O" if lit else "." for lit in line))
        return "\n".join(lines)

    def _info(self, status):
        lit = sum(map(sum, self._board)) if self._board else None
        return {"turn": self._turn, "max_turns": self.max_turns, "lights_on": lit, "status": status}
