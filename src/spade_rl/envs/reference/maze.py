"""Maze walk: lead the agent from S to G through a small maze drawn as text.

A multi-turn spatial game. The maze (5x5 to 7x7 characters, walls ``#``) is carved by a seeded
randomised depth-first search, so it is connected and has exactly one path between any two open
squares; the goal sits on the open square farthest from the start. Each turn the agent writes one or
more moves in one box, ``\\boxed{up}`` or ``\\boxed{up, up, left}``; moves run in order and stop at the
first wall bumped (the agent stays where it was). Reaching G wins (reward 1.0). ``min_cells`` and
``max_cells`` bound the maze's rows and columns of cells (``MazeEnv(min_cells=1, max_cells=2)``: mazes
of 3x5 to 5x5 characters).
"""

import random
import re
from collections import deque

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")

FORMAT_HELP = (
    "Write your moves inside \\boxed{}, using the words up, down, left and right separated by commas, "
    "for example \\boxed{down} or \\boxed{down, down, right}."
)


def last_boxed(text):
    """The stripped content of the last \\boxed{...} in ``text``, or None when there is none."""
    matches = BOXED.findall(text)
    return matches[-1].strip() if matches else None


def carve_maze(rng, cell_rows, cell_cols):
    """A perfect maze as a list of lists of '#' and '.', of size (2*cell_rows+1) x (2*cell_cols+1).

    Cells sit at odd coordinates; the walls between them are knocked down by an iterative DFS.
    """
    grid = [["#"] * (2 * cell_cols + 1) for _ in range(2 * cell_rows + 1)]
    grid[1][1] = "."
    stack = [(1, 1)]
    while stack:
        row, col = stack[-1]
        unvisited = [
            (row + 2 * dr, col + 2 * dc)
            for dr, dc in MOVES.values()
            if 0 < row + 2 * dr < len(grid)
            and 0 < col + 2 * dc < len(grid[0])
            and grid[row + 2 * dr][col + 2 * dc] == "#"
        ]
        if not unvisited:
            stack.pop()
            continue
        next_row, next_col = rng.choice(unvisited)
        grid[(row + next_row) // 2][(col + next_col) // 2] = "."  # the wall between the two cells
        grid[next_row][next_col] = "."
        stack.append((next_row, next_col))
    return grid


def shortest_paths(grid, start):
    """Breadth-first search from ``start``: a dict square -> list of move names that reaches it."""
    paths = {start: []}
    queue = deque([start])
    while queue:
        row, col = queue.popleft()
        for name, (dr, dc) in MOVES.items():
            square = (row + dr, col + dc)
            if grid[square[0]][square[1]] != "#" and square not in paths:
                paths[square] = [*paths[(row, col)], name]
                queue.append(square)
    return paths


class MazeEnv:
    def __init__(self, max_turns: int = 30, min_cells: int = 2, max_cells: int = 3):
        if not (
            isinstance(min_cells, int) and isinstance(max_cells, int) and 1 <= min_cells <= max_cells <= 8
        ):
            raise ValueError(f"need 1 <= min_cells <= max_cells <= 8, got {min_cells!r} and {max_cells!r}")
        self.max_turns = max_turns
        self.cells = (min_cells, max_cells)
        self._turn = 0
        self._position = None
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        self._grid = carve_maze(rng, rng.randint(*self.cells), rng.randint(*self.cells))
        if len(self._grid) == len(self._grid[0]) == 3:  # a single cell: no goal to reach
            self._grid = carve_maze(rng, 1, 2)
        self._start = self._position = (1, 1)
        paths = shortest_paths(self._grid, self._start)
        # The farthest open square is the goal (the first one in row-major order on a tie).
        self._goal = max(sorted(paths), key=lambda square: len(paths[square]))
        self._turn = 0
        self._done = False
        observation = (
            "Find your way through the maze from the start S to the goal G.\n"
            "Legend: # wall, . open floor, A you, S start, G goal. Row 1 is the top row.\n"
            f"{FORMAT_HELP}\nMoves run in order and stop at the first wall you bump into.\n"
            f"You have {self.max_turns} turns.\n\n{self._render()}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The game is over. Call reset() to play again.", 0.0, True, False, self._info("over")
        self._turn += 1

        moves = self._parse(action)
        if moves is None:
            observation, status = f"I could not read your moves. {FORMAT_HELP}", "invalid"
        else:
            observation, status = self._walk(moves)
            if status == "won":
                self._done = True
                return observation, 1.0, True, False, self._info(status)

        if self._turn >= self.max_turns:
            self._done = True
            return observation + "\nYou are out of turns.", 0.0, False, True, self._info(status)
        observation += f"\nTurns left: {self.max_turns - self._turn}.\n\n{self._render()}"
        return observation, 0.0, False, False, self._info(status)

    def solution(self) -> list[str]:
        """The shortest path found by breadth-first search, one move per turn."""
        return [f"\\boxed{{{move}}}" for move in shortest_paths(self._grid, self._start)[self._goal]]

    def close(self) -> None:
        pass

    def _walk(self, moves):
        done = []
        for move in moves:
            dr, dc = MOVES[move]
            row, col = self._position[0] + dr, self._position[1] + dc
            if self._grid[row][col] == "#":
                where = f"row {self._position[0] + 1}, column {self._position[1] + 1}"
                return f"{self._moved(done)}Moving {move} bumps into a wall: you stay at {where}.", "bump"
            self._position = (row, col)
            done.append(move)
            if self._position == self._goal:
                return f"{self._moved(done)}You reached the goal G. You win!", "won"
        return self._moved(done), "moved"

    @staticmethod
    def _moved(done):
        return f"You moved {', '.join(done)}. " if done else ""

    @staticmethod
    def _parse(action):
        content = last_boxed(action if isinstance(action, str) else "")
        if not content:
            return None
        words = [word for word in re.split(r"[\s,;]+", content.lower()) if word]
        return words if words and all(word in MOVES for word in words) else None

    def _render(self):
        lines = []
        for row, cells in enumerate(self._grid):
            line = []
            for col, cell in enumerate(cells):
                square = (row, col)
                if square == self._position:
                    cell = "A"
                elif square == self._goal:
                    cell = "G"
                elif square == self._start:
                    cell = "S"
                line.append(cell)
            lines.append("".join(line))
        return "\n".join(lines)

    def _info(self, status):
        # Row and column counted from 1, as in the observations.
        position = [self._position[0] + 1, self._position[1] + 1] if self._position else None
        return {"turn": self._turn, "max_turns": self.max_turns, "position": position, "status": status}
