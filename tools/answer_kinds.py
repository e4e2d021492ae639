"""What kind of answer the agent gives, per game, in evaluation files of the envs suite: the format guard
of issue 40 (item 5) read from held-out play, where training's `format/*` metrics cannot look.

    python tools/answer_kinds.py experiments/results/cpu-curriculum/start/*.json \
        experiments/results/cpu-curriculum/arms/*/seed-*/end-eval.json

For each file and game: the turns played, and the share of them whose answer (the content of the turn's
``\\boxed{...}``) is a number, one word, several words, empty, or missing (no closed box: malformed); the
share of episodes that gave one same answer on every turn of two or more; the win rate. A model that
learned a game's answer form (maze's moves, codebreaker's digits) and carries it to another game shows
here as a shift of that game's kinds between the start and the end (say, tally answered with words).

Reads the responses the envs suite records (``[turn N] <action>`` lines); runs nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

KINDS = ("number", "word", "words", "empty", "missing")
_TURN = re.compile(r"^\[turn \d+\] ?(.*)$")
_BOX = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")


def turn_actions(response: str) -> list[str]:
    """The actions of a recorded episode, one per ``[turn N]`` line (a line without the prefix continues
    the turn before it)."""
    actions: list[str] = []
    for line in response.splitlines():
        match = _TURN.match(line)
        if match:
            actions.append(match.group(1))
        elif actions:
            actions[-1] += "\n" + line
    return actions


def answer_kind(action: str) -> tuple[str, str | None]:
    """(kind, answer) of one turn's action: the last closed ``\\boxed{...}`` read as a number, one word,
    several words or empty; "missing" (and None) where no box is closed."""
    boxes = _BOX.findall(action)
    if not boxes:
        return "missing", None
    answer = boxes[-1].strip()
    if not answer:
        return "empty", answer
    if _NUMBER.fullmatch(answer):
        return "number", answer
    return ("word" if len(answer.split()) == 1 else "words"), answer


def summarise(items: list[dict]) -> dict[str, dict]:
    """Per game (the item's ``detail.env``, else its id's prefix): turns, the share of each kind, the share
    of episodes of two turns or more that repeated one answer throughout, and the win rate."""
    kinds: dict[str, Counter] = defaultdict(Counter)
    episodes: Counter = Counter()
    repeated: Counter = Counter()
    long_episodes: Counter = Counter()
    wins: Counter = Counter()
    for item in items:
        detail = item.get("detail") or {}
        game = detail.get("env") or str(item.get("id", "?")).split("/")[0]
        episodes[game] += 1
        wins[game] += bool(item.get("correct"))
        answers = []
        for action in turn_actions(item.get("response") or ""):
            kind, answer = answer_kind(action)
            kinds[game][kind] += 1
            answers.append(answer)
        if len(answers) >= 2:
            long_episodes[game] += 1
            repeated[game] += len(set(answers)) == 1 and answers[0] is not None
    out = {}
    for game in episodes:
        turns = sum(kinds[game].values())
        out[game] = {
            "episodes": episodes[game],
            "turns": turns,
            **{kind: (kinds[game][kind] / turns if turns else 0.0) for kind in KINDS},
            "repeats": repeated[game] / long_episodes[game] if long_episodes[game] else 0.0,
            "win_rate": wins[game] / episodes[game],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="evaluation files (spade-rl-eval/1 JSON)")
    parser.add_argument("--suite", default="envs", help="the suite whose items to read (default: envs)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    results = {}
    for path in args.files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            items = data["suites"][args.suite]["items"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            message = f"error: {path}: not an evaluation file with a {args.suite!r} suite ({exc})"
            print(message, file=sys.stderr)
            return 2
        results[str(path)] = summarise(items)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    header = f"{'game':<12} {'eps':>4} {'turns':>5} " + " ".join(f"{k:>7}" for k in KINDS)
    header += f" {'repeats':>7} {'win':>6}"
    for path, games in results.items():
        print(f"\n{path}\n{header}")
        for game, row in sorted(games.items()):
            cells = " ".join(f"{row[k]:>7.0%}" for k in KINDS)
            print(
                f"{game:<12} {row['episodes']:>4} {row['turns']:>5} {cells} {row['repeats']:>7.0%}"
                f" {row['win_rate']:>6.1%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
