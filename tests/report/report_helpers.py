"""Helpers of the report tests: model-written text that tries to run a script, hand-written run
directories (:class:`HandRun`), and typical metrics lines. The fixtures are in conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

import fixture_envs
from spade_rl.archive import Archive, PlayStats

XSS = "<script>document.documentElement.setAttribute('data-pwned', 'yes')</script>"
IMG_XSS = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned', 'img')\">"

# The shared parity game (tests/fixture_envs.py) with model-written markup in its docstring and observation.
PARITY = fixture_envs.PARITY.replace("is even.", f"is even. {XSS}", 1).replace(
    '"Say something of the right length."', repr(f"Say something of the right length. {XSS} {IMG_XSS}")
)
assert f"is even. {XSS}" in PARITY and "right length. <script>" in PARITY, "fixture_envs.PARITY changed"
HANGS = PARITY.replace("self.turn += 1", "while True:\n            pass").replace("ParityEnv", "HangEnv")
SYNTAX = "class BrokenEnv:\n    def reset(self, seed=None)\n        return 'x', {}\n"


def designer_output(source: str) -> str:
    return f"```python\n{source}```\n<hint>Count the characters. {XSS}</hint>"


def stats(win: float, win_hint: float, turns: float = 2.0, k: int = 4) -> PlayStats:
    return PlayStats(k, k, win, win_hint, max(0.0, win_hint - win), turns, win, win_hint)


def env_source(name: str, lines: int = 3) -> str:
    body = "".join(f"        x{i} = {i}\n" for i in range(lines))
    return f"class {name}Env:\n    def reset(self, seed=None):\n{body}        return 'hi', {{}}\n"


class HandRun:
    """A run directory written by hand, piece by piece."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True)
        self.archive_path = path / "archive.sqlite"

    def config(self, iterations: int = 3, **archive) -> HandRun:
        config = {"loop": {"iterations": iterations, "seed": 0}, "policy": {"model": None}}
        config["design"] = {"setting": "games"}
        config["archive"] = {"frontier_low": 0.15, "frontier_high": 0.85, **archive}
        (self.path / "config.json").write_text(json.dumps(config, indent=2))
        return self

    def design(self, source: str, iteration: int, *, reason: str = "ok", skill: str = "logic", **kw) -> int:
        with Archive(self.archive_path) as archive:
            return archive.add(
                source,
                valid=reason == "ok",
                reason=reason,
                skill=skill,
                setting="games",
                iteration=iteration,
                **kw,
            ).env_id

    def reference(self, source: str) -> int:
        return self.design(source, 0, origin="reference", skill="guess")

    def play(self, env_id: int, iteration: int, played: PlayStats) -> None:
        with Archive(self.archive_path) as archive:
            archive.record_stats(env_id, iteration, played)

    def metrics(self, *lines: dict, raw_tail: str = "") -> HandRun:
        text = "".join(json.dumps(line) + "\n" for line in lines) + raw_tail
        with open(self.path / "metrics.jsonl", "a", encoding="utf-8") as out:
            out.write(text)
        return self

    def transcript(self, iteration: int, env_id: int, content: str, *, hint: bool = False, ret: float = 0.0):
        line = {
            "iteration": iteration,
            "env_id": env_id,
            "hint": hint,
            "return": ret,
            "stop_reason": "truncated",
            "error": "",
            "messages": [
                {"role": "system", "content": "Play."},
                {"role": "user", "content": "Observation."},
                {"role": "assistant", "content": content},
            ],
        }
        with open(self.path / "transcripts.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def eval_file(self, iteration: int, data: object) -> Path:
        folder = self.path / "eval"
        folder.mkdir(exist_ok=True)
        path = folder / f"iter-{iteration:04d}.json"
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path


def metrics_line(i: int, **values) -> dict:
    """A metrics line with the loop's keys (values as given; the rest typical)."""
    line = {
        "iteration": i,
        "designer/proposed": 2,
        "designer/valid_rate": 0.5,
        "designer/reasons": {"ok": 1, "timeout": 1},
        "agent/envs": 2,
        "agent/win_rate": 0.25,
        "agent/win_rate_hint": 0.5,
        "agent/mean_turns": 2.0,
        "regret/mean": 0.25,
        "frontier/fraction": 0.5,
        "designer/reward_mean": 0.1,
        "train/loss": 0.01 * i,
        "time/iteration_s": 10.0 + i,
    }
    line.update(values)
    return line
