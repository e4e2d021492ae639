"""A GEM game (PyPI ``gem-llm``) behind spade-rl's environment contract. Source text, never imported.

This file is data, like the reference environments: :func:`spade_rl.envs.external.gem_source` reads
it, appends one small ``*Env`` class naming the GEM id and its arguments, and the whole text runs in a
sandbox worker that preloaded ``gem`` (:mod:`spade_rl.envs.external.gem_preload`). The trusted process
never imports GEM.

What it maps (docs/interop.md says how the answers are taken, with the default model's figures):

- observation: GEM's instructions at ``reset`` (they name the action format, ``\\boxed{...}``), and after
  a step GEM's observation, each followed by its ``suffix`` (the board or "Enter your next guess."). The
  conversation keeps the history, so GEM's history-concatenating wrappers are not used.
- action: GEM reads its last ``\\boxed{...}`` with a strict pattern per game (``\\boxed{(\\d+)}`` for
  Guess The Number) and ends the game at the first action it cannot parse. An action with a
  ``\\boxed{x}`` is given to GEM as ``\\boxed{x}`` for its last one, ``x`` stripped of one pair of
  square brackets or quotes around it and its spaces collapsed (``\\boxed{ [7] }`` is ``\\boxed{7}``: the
  form spade-rl's system prompt and the games' forced ``\\boxed{`` opening ask for, whatever else the
  turn holds); an action without one is given as it is.
- reward: GEM's games pay dense rewards that add up to 1 over an episode exactly when the game is
  solved (1.0 on the winning move of Guess The Number and Tower of Hanoi; one share per black peg of
  Mastermind or per correct Sudoku cell) and -0.1 for an action it cannot parse. The episode is **won**
  when GEM ends it (terminated, not truncated) with a running sum of 1 (within 1e-6); the step that wins
  answers reward 1.0 and every other step 0.0, so spade-rl's return is 1 for a won game and 0 otherwise.
  GEM's own reward and running sum are in ``info`` (``gem_reward``, ``gem_return``).
- turns: GEM's own budget; ``max_turns`` (the run's ``rollout.max_turns``, passed by the validator and
  the pool) lowers it when smaller, so that the instructions state the budget the episode really has.
  GEM ending an episode at its budget is a truncation here.
- randomness: GEM draws from the global ``random`` and ``numpy.random`` (its ``reset(seed)`` seeds
  both). Each instance keeps its own copy of both states and swaps them in around every call, so that
  instances played interleaved in one worker give the transcripts they give alone.
- ``solution()``: a reference play computed from the game's state, for the games that have one here
  (``SOLVERS``); the others raise, and can be evaluated but not put in a training pool.
"""

import copy
import json
import random
import re
import sys

if "gem" not in sys.modules:  # importing it after the worker hardened itself fails (numpy under seccomp)
    raise RuntimeError(
        "GEM is not loaded in this sandbox worker: its workers must preload "
        "spade_rl.envs.external.gem_preload (sandbox.preload; a run with [pool] gem and the gem suite add it)"
    )

import gem
import numpy

_WIN_EPS = 1e-6
_OVER = "The episode is over."
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_WRAPPERS = ("[]", "''", '""', "``")


def boxed(action):
    """The action as GEM is given it (see the module docstring)."""
    text = action if isinstance(action, str) else ""
    boxes = _BOXED.findall(text)
    if not boxes:
        return text
    inner = boxes[-1].strip()
    if len(inner) >= 2 and inner[0] + inner[-1] in _WRAPPERS:
        inner = inner[1:-1]
    return "\\boxed{" + " ".join(inner.split()) + "}"


class _RngScope:
    """The global RNG states of one instance, swapped in for the duration of a call."""

    def __init__(self, seed):
        saved = random.getstate(), numpy.random.get_state()
        random.seed(seed)
        numpy.random.seed(seed)
        self.state = random.getstate(), numpy.random.get_state()
        random.setstate(saved[0])
        numpy.random.set_state(saved[1])

    def __enter__(self):
        self._outer = random.getstate(), numpy.random.get_state()
        random.setstate(self.state[0])
        numpy.random.set_state(self.state[1])
        return self

    def __exit__(self, *exc):
        self.state = random.getstate(), numpy.random.get_state()
        random.setstate(self._outer[0])
        numpy.random.set_state(self._outer[1])
        return False


def _solve_guess(game):
    return ["\\boxed{" + str(game.game_number) + "}"]


def _solve_mastermind(game):
    return ["\\boxed{" + " ".join(str(n) for n in game.game_code) + "}"]


def _solve_hanoi(game):
    moves = []

    def move(n, source, target, spare):
        if n:
            move(n - 1, source, spare, target)
            moves.append("\\boxed{" + source + " " + target + "}")
            move(n - 1, spare, target, source)

    move(game.num_disks, "A", "C", "B")
    return moves


def _solve_sudoku(game):
    return [
        "\\boxed{" + f"{r + 1} {c + 1} {game.full_grid[r][c]}" + "}"
        for r in range(game.scale)
        for c in range(game.scale)
        if game.board[r][c] == 0
    ]


SOLVERS = {
    "GuessTheNumberEnv": _solve_guess,
    "MastermindEnv": _solve_mastermind,
    "TowerofHanoiEnv": _solve_hanoi,
    "SudokuEnv": _solve_sudoku,
}


class _GemGame:
    """The adapter; the generated subclass sets ``GEM_ID`` and ``GEM_KWARGS``."""

    GEM_ID = ""
    GEM_KWARGS = "{}"  # JSON text of the constructor arguments given to gem.make

    def __init__(self, max_turns=None):
        kwargs = json.loads(self.GEM_KWARGS)
        self._scope = _RngScope(0)
        with self._scope:
            self._game = gem.make(self.GEM_ID, **kwargs)
        own = getattr(self._game, "max_turns", None)
        if isinstance(max_turns, int) and isinstance(own, int) and 0 < max_turns < own:
            self._game.max_turns = max_turns  # the budget the instructions state and the game keeps
        self._done = True
        self._sum = 0.0

    def reset(self, seed=None):
        seed = 0 if seed is None else seed % 2**32  # numpy takes seeds below 2**32
        self._scope = _RngScope(seed)
        with self._scope:
            obs, info = self._game.reset(seed=seed)
        self._done = False
        self._sum = 0.0
        return _with_suffix(_text(obs), info), {"gem_id": self.GEM_ID}

    def step(self, action):
        if self._done:
            return _OVER, 0.0, True, False, {"status": "over"}
        with self._scope:
            obs, reward, terminated, truncated, info = self._game.step(boxed(action))
        gem_reward = float(reward)
        self._sum += gem_reward
        details = {"gem_reward": gem_reward, "gem_return": self._sum}
        text = _text(obs)
        if terminated or truncated:
            self._done = True
            if terminated and not truncated and self._sum >= 1.0 - _WIN_EPS:
                return text, 1.0, True, False, {**details, "status": "won"}
            if truncated:
                return text, 0.0, False, True, {**details, "status": "out_of_turns"}
            return text, 0.0, True, False, {**details, "status": "lost"}
        return _with_suffix(text, info), 0.0, False, False, {**details, "status": "playing"}

    def solution(self):
        solver = SOLVERS.get(type(self._game).__name__)
        if solver is None:
            raise NotImplementedError(
                f"GEM game {self.GEM_ID} has no reference solution in spade-rl: it can be evaluated, "
                f"not validated for a training pool (games with one: {', '.join(sorted(SOLVERS))})"
            )
        with self._scope:
            return solver(copy.deepcopy(self._game))

    def close(self):
        pass


def _with_suffix(text, info):
    """GEM's observation and the suffix it gives in ``info`` (the board, or what to enter next)."""
    suffix = info.get("suffix") if isinstance(info, dict) else None
    return text + "\n" + suffix if isinstance(suffix, str) and suffix.strip() else text


def _text(value):
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else _OVER
