"""A single-player TextArena game (PyPI ``textarena``) behind spade-rl's environment contract. Source
text, never imported.

This file is data, like the reference environments: :func:`spade_rl.envs.external.textarena_source`
reads it, appends one small ``*Env`` class naming the TextArena id and its arguments, and the whole text
runs in a sandbox worker that preloaded ``textarena`` (:mod:`spade_rl.envs.external.textarena_preload`).
The trusted process never imports TextArena.

Only single-player games: TextArena's two-player games need an opponent, and the one TextArena ships
is a language model behind a web API (its agents), which the sandbox cannot reach. What it maps:

- observation: the messages TextArena addresses to the player since its last action (the game's
  prompt at ``reset``, which states the action format; then the descriptions of the move, the board,
  warnings about invalid moves), joined by blank lines; the player's own action, which TextArena echoes
  back, is left out (the conversation already holds it). At the end, TextArena's reason for ending.
  The prompt at ``reset`` ends with one line saying how to answer in spade-rl's form, with the game's
  own example: "Give your move inside \\boxed{}: for example \\boxed{A C}, which the game reads as
  [A C]." (spade-rl's system prompt and the games' forced ``\\boxed{`` opening ask for ``\\boxed{}``,
  and a small model copies a concrete example where it cannot follow two formats at once).
- action: TextArena reads moves in square brackets (``[5]``, ``[A C]``, ``[up]``). An action with a
  ``\\boxed{x}`` is given as ``[x]`` for its last one (as it is when ``x`` is itself bracketed,
  ``\\boxed{[x]}``), whatever else the text holds; one without is given as it is when it holds a
  bracketed move, else as ``[text]``: TextArena's own ActionFormattingWrapper brackets bare actions the
  same way.
- reward: TextArena scores a single-player game at its end: 1 for a win, a share of completion for a
  loss at the turn limit, -1 (or the share) after a second invalid move in a row. The episode is **won**
  when the game ends with TextArena's reward 1; that step answers 1.0 and every other step 0.0, so
  spade-rl's return is 1 for a won game and 0 otherwise. TextArena's reward is in ``info``
  (``textarena_reward``) and its reason in the final observation.
- turns: TextArena's own budget (its games end themselves at their turn limit).
- randomness: TextArena seeds the global ``random`` in ``reset``; each instance keeps its own copy of
  the state and swaps it in around every call, so that interleaved instances in one worker give the
  transcripts they give alone.
- ``solution()``: a reference play computed from the game's state for the games in ``SOLVERS``; the
  others raise, and can be evaluated but not put in a training pool.
"""

import collections
import copy
import json
import random
import re
import sys

if "textarena" not in sys.modules:  # a hardened worker may not import what it did not preload
    raise RuntimeError(
        "TextArena is not loaded in this sandbox worker: its workers must preload "
        "spade_rl.envs.external.textarena_preload (sandbox.preload; a run with [pool] textarena and the "
        "textarena suite add it)"
    )

import textarena

_OVER = "The episode is over."
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_MOVE = re.compile(r"\[([^\[\]]*)\]")  # a move as TextArena reads it: text in square brackets


class _RngScope:
    """The global RNG state of one instance, swapped in for the duration of a call."""

    def __init__(self, seed):
        saved = random.getstate()
        random.seed(seed)
        self.state = random.getstate()
        random.setstate(saved)

    def __enter__(self):
        self._outer = random.getstate()
        random.setstate(self.state)
        return self

    def __exit__(self, *exc):
        self.state = random.getstate()
        random.setstate(self._outer)
        return False


def bracketed(action):
    """The action as TextArena reads it (see the module docstring)."""
    text = action if isinstance(action, str) else ""
    boxes = _BOXED.findall(text)
    if boxes:
        inner = boxes[-1].strip()
        return inner if _MOVE.fullmatch(inner) else "[" + inner + "]"
    if _MOVE.search(text):
        return text
    return "[" + text.strip() + "]"


def answer_line(prompt):
    """The line that says how to answer in spade-rl's form, with the game's own example: the first
    bracketed move after "example" or "e.g." in ``prompt``, else its first bracketed move."""
    moves = [m for m in _MOVE.finditer(prompt) if m.group(1).strip() and "," not in m.group(1)]
    if not moves:
        return "Give your move inside \\boxed{}; the game reads it in square brackets."
    cue = re.search(r"example|e\.g\.", prompt, re.IGNORECASE)
    after = [m for m in moves if cue and m.start() > cue.start()]
    inner = (after or moves)[0].group(1).strip()
    example = "\\boxed{" + inner + "}"
    return f"Give your move inside \\boxed{{}}: for example {example}, which the game reads as [{inner}]."


def _solve_guess(game):
    return ["[" + str(game.state.game_state["game_number"]) + "]"]


def _solve_mastermind(game):
    return ["[" + " ".join(str(n) for n in game.state.game_state["secret_code"]) + "]"]


def _solve_hanoi(game):
    moves = []

    def move(n, source, target, spare):
        if n:
            move(n - 1, source, spare, target)
            moves.append("[" + source + " " + target + "]")
            move(n - 1, spare, target, source)

    move(game.num_disks, "A", "C", "B")
    return moves


def _solve_frozen_lake(game):
    state = game.state.game_state
    grid, start, goal = state["grid"], tuple(state["player_pos"]), tuple(state["goal_pos"])
    steps = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
    came = {start: None}
    queue = collections.deque([start])
    while queue:
        here = queue.popleft()
        if here == goal:
            break
        for name, (dr, dc) in steps.items():
            there = (here[0] + dr, here[1] + dc)
            inside = 0 <= there[0] < len(grid) and 0 <= there[1] < len(grid[0])
            if inside and there not in came and grid[there[0]][there[1]] != "H":
                came[there] = (here, name)
                queue.append(there)
    if goal not in came:
        raise ValueError("this FrozenLake board has no path to the goal")
    path, here = [], goal
    while came[here] is not None:
        here, name = came[here]
        path.append("[" + name + "]")
    return path[::-1]


SOLVERS = {
    "GuessTheNumberEnv": _solve_guess,
    "MastermindEnv": _solve_mastermind,
    "TowerOfHanoiEnv": _solve_hanoi,
    "FrozenLakeEnv": _solve_frozen_lake,
}


class _TextArenaGame:
    """The adapter; the generated subclass sets ``TEXTARENA_ID`` and ``TEXTARENA_KWARGS``."""

    TEXTARENA_ID = ""
    TEXTARENA_KWARGS = "{}"  # JSON text of constructor arguments on top of the registered ones

    def __init__(self):
        spec = textarena.envs.registration.ENV_REGISTRY[self.TEXTARENA_ID]
        module_name, class_name = spec.entry_point.split(":")
        module = __import__(module_name, fromlist=[class_name])
        kwargs = {**spec.kwargs, **json.loads(self.TEXTARENA_KWARGS)}
        self._scope = _RngScope(0)
        with self._scope:
            self._game = getattr(module, class_name)(**kwargs)  # unwrapped: the raw game
        self._done = True

    def reset(self, seed=None):
        seed = 0 if seed is None else seed % 2**32
        self._scope = _RngScope(seed)
        with self._scope:
            self._game.reset(num_players=1, seed=seed)
            text = self._messages() or "Your move."
        self._done = False
        return text + "\n\n" + answer_line(text), {"textarena_id": self.TEXTARENA_ID}

    def step(self, action):
        if self._done:
            return _OVER, 0.0, True, False, {"status": "over"}
        with self._scope:
            done, _ = self._game.step(bracketed(action))
            text = self._messages()
            if not done:
                return text or "Your move.", 0.0, False, False, {"status": "playing"}
            rewards, game_info = self._game.close()
        self._done = True
        reward = float((rewards or {}).get(0, 0.0))
        reason = str(((game_info or {}).get(0) or {}).get("reason") or "")
        text = "\n\n".join(part for part in (text, reason) if part) or _OVER
        details = {"textarena_reward": reward}
        if reward >= 1.0:
            return text, 1.0, True, False, {**details, "status": "won"}
        return text, 0.0, True, False, {**details, "status": "lost"}

    def solution(self):
        solver = SOLVERS.get(type(self._game).__name__)
        if solver is None:
            raise NotImplementedError(
                f"TextArena game {self.TEXTARENA_ID} has no reference solution in spade-rl: it can be "
                f"evaluated, not validated for a training pool (games with one: {', '.join(sorted(SOLVERS))})"
            )
        with self._scope:
            return solver(copy.deepcopy(self._game))

    def close(self):
        pass

    def _messages(self):
        _, messages = self._game.get_observation()
        parts = []
        for message in messages or []:
            _sender, content, kind = message
            if kind == textarena.ObservationType.PLAYER_ACTION:
                continue  # the player's own action, echoed back
            parts.append(str(content).strip())
        return "\n\n".join(part for part in parts if part)
