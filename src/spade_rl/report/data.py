"""Reading a run directory into plain data for the report, tolerating killed and partial runs.

    data = load_run(Path("runs/demo"))
    for row in data.rows:
        print(row.iteration, row.valid_rate, row.win_rate)

Sources, in order of trust:

- ``archive.sqlite`` (read-only): every designer proposal with its verdict and reason, every
  environment's source, hint and skill, and the play statistics per environment and iteration. The
  per-iteration curves are computed from it with the loop's own formulas (mean over the environments
  played in an iteration; the frontier is the archive's ``frontier_low``..``frontier_high``), so a run
  killed before writing its metrics line still shows what it did.
- ``metrics.jsonl``: one line per finished iteration; adds what only the loop knows (loss, designer
  reward, seconds, in-loop evaluation). A line that is not JSON (a run killed mid-write) is skipped
  with a warning; an iteration without a line is marked ``complete=False``.
- ``transcripts.jsonl``, ``config.json`` and ``eval/iter-NNNN.json`` (see :mod:`.evals`).

Everything read here is shown as text by the page; nothing from the run directory is executed.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spade_rl.archive import Archive, ArchiveError, EnvRecord, IterationStats
from spade_rl.loop.stages import upgrade_metrics
from spade_rl.report.evals import EvalRecord, read_evals
from spade_rl.stats import iteration_means

RUN_FILES = ("config.json", "archive.sqlite", "metrics.jsonl")
DEFAULT_BAND = (0.15, 0.85)


class ReportError(ValueError):
    """The run directory cannot be reported on: the message says what was expected."""


def number(value: object) -> float | None:
    """A finite int or float as float; anything else (None, bool, text, NaN) as None."""
    if type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    return None


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class EnvView:
    """One environment of the archive with its play history and size."""

    record: EnvRecord
    history: list[IterationStats]

    @property
    def lines(self) -> int:
        return len(self.record.source.splitlines())

    @property
    def chars(self) -> int:
        return len(self.record.source)

    @property
    def latest(self) -> IterationStats | None:
        return self.history[-1] if self.history else None


@dataclass
class IterationRow:
    """What happened in one iteration. ``None`` means not measured (no design, no play, no line)."""

    iteration: int
    proposed: int = 0  # designer proposals (duplicates included), from the archive
    valid: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # verdict code -> proposals ("ok" = valid)
    envs_played: int = 0
    win_rate: float | None = None  # mean no-hint win rate over the environments played
    win_rate_hint: float | None = None
    regret: float | None = None
    frontier_fraction: float | None = None  # share of played environments on the frontier
    mean_turns: float | None = None
    new_envs: int = 0  # distinct environments first proposed in this iteration
    source_lines: float | None = None  # mean over those environments
    source_chars: float | None = None
    valid_source_lines: float | None = None  # mean over the valid ones among them
    valid_source_chars: float | None = None
    metrics: dict[str, Any] | None = None  # the metrics.jsonl line; None: the iteration has none

    @property
    def valid_rate(self) -> float | None:
        return self.valid / self.proposed if self.proposed else None

    @property
    def complete(self) -> bool:
        return self.metrics is not None

    def metric(self, key: str) -> float | None:
        return number(self.metrics.get(key)) if self.metrics else None


@dataclass
class RunData:
    run_dir: Path
    config: dict[str, Any] | None
    rows: list[IterationRow]
    envs: list[EnvView]  # designer-written environments, by id
    references: list[EnvView]  # the reference environments that seed the pool
    transcripts: list[dict[str, Any]]
    evals: list[EvalRecord]
    frontier: tuple[float, float]
    has_archive: bool
    has_metrics: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def planned_iterations(self) -> int | None:
        loop = (self.config or {}).get("loop")
        value = loop.get("iterations") if isinstance(loop, dict) else None
        return value if type(value) is int else None

    @property
    def completed_iterations(self) -> int:
        return sum(row.complete for row in self.rows)


def load_run(run_dir: Path) -> RunData:
    """Read everything the report shows; :class:`ReportError` when ``run_dir`` is not a run directory."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise ReportError(f"no run directory at {run_dir}: give the folder `spade-rl run` wrote")
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is a file; give the run directory that holds {', '.join(RUN_FILES)}")
    if not any((run_dir / name).exists() for name in ("archive.sqlite", "metrics.jsonl")):
        raise ReportError(
            f"{run_dir} is not a run directory: it has neither archive.sqlite nor metrics.jsonl "
            f"(a run directory from `spade-rl run` holds {', '.join(RUN_FILES)})"
        )
    warnings: list[str] = []
    config = _read_config(run_dir / "config.json", warnings)
    frontier = _frontier(config)
    metrics = _read_metrics(run_dir / "metrics.jsonl", warnings)
    envs, references, proposals = [], [], {}
    has_archive = (run_dir / "archive.sqlite").exists()
    if has_archive:
        envs, references, proposals = _read_archive(run_dir / "archive.sqlite")
    else:
        warnings.append("no archive.sqlite: curves come from metrics.jsonl only; no example environments")
    rows = _iteration_rows(envs + references, proposals, metrics, frontier, from_archive=has_archive)
    if not metrics and rows:
        warnings.append(
            "no metrics.jsonl line: the run recorded no finished iteration (killed or still running)"
        )
    missing = [row.iteration for row in rows if not row.complete]
    if metrics and missing:
        warnings.append(
            f"iteration(s) {', '.join(map(str, missing))} have archive records but no metrics line "
            "(the run was killed or is still running); they are marked as interrupted"
        )
    return RunData(
        run_dir=run_dir,
        config=config,
        rows=rows,
        envs=envs,
        references=references,
        transcripts=_read_transcripts(run_dir / "transcripts.jsonl", warnings),
        evals=read_evals(run_dir / "eval", metrics, warnings),
        frontier=frontier,
        has_archive=has_archive,
        has_metrics=bool(metrics),
        warnings=warnings,
    )


def _read_config(path: Path, warnings: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        warnings.append("no config.json in the run directory")
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        warnings.append(f"config.json cannot be read ({exc}); the report uses default settings")
        return None
    if not isinstance(config, dict):
        warnings.append("config.json does not hold a JSON object; ignored")
        return None
    return config


def _frontier(config: dict[str, Any] | None) -> tuple[float, float]:
    archive = (config or {}).get("archive")
    if isinstance(archive, dict):
        # band_low / band_high: the names of earlier releases
        low = number(archive.get("frontier_low", archive.get("band_low")))
        high = number(archive.get("frontier_high", archive.get("band_high")))
        if low is not None and high is not None and 0.0 <= low < high <= 1.0:
            return low, high
    return DEFAULT_BAND


def _read_jsonl(path: Path, what: str, warnings: list[str]) -> list[tuple[int, dict]]:
    """(line number, object) of every line that is a JSON object; the others become warnings."""
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        warnings.append(f"{what} cannot be read: {exc}")
        return []
    out, bad = [], []
    for number_, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            bad.append(number_)
            continue
        if isinstance(item, dict):
            out.append((number_, item))
        else:
            bad.append(number_)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" ..." if len(bad) > 10 else "")
        warnings.append(
            f"{what}: line(s) {shown} are not complete JSON objects (a run killed while writing?); skipped"
        )
    return out


def _read_metrics(path: Path, warnings: list[str]) -> dict[int, dict[str, Any]]:
    metrics: dict[int, dict[str, Any]] = {}
    for line, item in _read_jsonl(path, "metrics.jsonl", warnings):
        iteration = item.get("iteration")
        if type(iteration) is not int or iteration < 1:
            warnings.append(f"metrics.jsonl line {line} has no iteration number (>= 1); skipped")
            continue
        if iteration in metrics:
            warnings.append(f"metrics.jsonl holds iteration {iteration} twice; the later line is shown")
        metrics[iteration] = upgrade_metrics(item)
    return metrics


def _read_transcripts(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    out = []
    for _, item in _read_jsonl(path, "transcripts.jsonl", warnings):
        messages = item.get("messages")
        if type(item.get("iteration")) is int and isinstance(messages, list):
            item["messages"] = [m for m in messages if isinstance(m, dict)]
            out.append(item)
    return out


def _read_archive(path: Path) -> tuple[list[EnvView], list[EnvView], dict[int, dict[str, int]]]:
    """Designer environments, reference environments, and designer proposals per iteration by verdict."""
    try:
        with Archive(path, readonly=True) as archive:
            envs, references = [], []
            for env_id in archive.ids():
                record = archive.get(env_id)
                history = archive.stats_history(env_id) if record.valid else []
                (references if record.origin == "reference" else envs).append(EnvView(record, history))
            proposals: dict[int, dict[str, int]] = {}
            for row in archive.reason_counts("iteration", origin="designer"):
                by_reason = proposals.setdefault(int(row.group), {})
                by_reason[row.reason] = by_reason.get(row.reason, 0) + row.count
    except (ArchiveError, sqlite3.Error, OSError) as exc:
        raise ReportError(f"cannot read the archive {path}: {exc}") from None
    return envs, references, proposals


def _iteration_rows(
    envs: list[EnvView],
    proposals: dict[int, dict[str, int]],
    metrics: dict[int, dict[str, Any]],
    frontier: tuple[float, float],
    *,
    from_archive: bool,
) -> list[IterationRow]:
    plays: dict[int, list[IterationStats]] = {}
    for env in envs:
        for row in env.history:
            plays.setdefault(row.iteration, []).append(row)
    designed: dict[int, list[EnvView]] = {}
    for env in envs:
        if env.record.origin == "designer":
            designed.setdefault(env.record.iteration, []).append(env)
    iterations = sorted(i for i in {*proposals, *plays, *designed, *metrics} if i >= 1)
    rows = []
    for i in iterations:
        row = IterationRow(i, metrics=metrics.get(i))
        reasons = proposals.get(i, {})
        row.reasons = dict(sorted(reasons.items(), key=lambda kv: (kv[0] != "ok", -kv[1], kv[0])))
        row.proposed, row.valid = sum(reasons.values()), reasons.get("ok", 0)
        _fill_play(row, [p.stats for p in plays.get(i, [])], frontier)
        _fill_size(row, designed.get(i, []))
        if row.metrics is not None and not from_archive:
            _fill_from_metrics(row, row.metrics)  # no archive: the loop's own numbers
        rows.append(row)
    return rows


def _fill_play(row: IterationRow, stats: list, frontier: tuple[float, float]) -> None:
    """The loop's own numbers (``spade_rl.stats.iteration_means``) over the environments of the iteration."""
    if not stats:
        return
    means = iteration_means(stats, frontier)
    row.envs_played = means.envs
    row.win_rate, row.win_rate_hint = means.win_rate, means.win_rate_hint
    row.regret, row.mean_turns = means.regret, means.mean_turns
    row.frontier_fraction = means.frontier_fraction


def _fill_size(row: IterationRow, designed: list[EnvView]) -> None:
    row.new_envs = len(designed)
    valid = [e for e in designed if e.record.valid]
    row.source_lines = mean([e.lines for e in designed])
    row.source_chars = mean([e.chars for e in designed])
    row.valid_source_lines = mean([e.lines for e in valid])
    row.valid_source_chars = mean([e.chars for e in valid])


def _fill_from_metrics(row: IterationRow, m: dict[str, Any]) -> None:
    proposed = m.get("designer/proposed")
    reasons = m.get("designer/reasons")
    if type(proposed) is int and isinstance(reasons, dict):
        row.reasons = {str(k): v for k, v in reasons.items() if type(v) is int and v >= 0}
        row.proposed, row.valid = proposed, row.reasons.get("ok", 0)
    envs = m.get("agent/envs")
    row.envs_played = envs if type(envs) is int else 0
    row.win_rate = number(m.get("agent/win_rate"))
    row.win_rate_hint = number(m.get("agent/win_rate_hint"))
    row.regret = number(m.get("regret/mean"))
    row.frontier_fraction = number(m.get("frontier/fraction"))
    row.mean_turns = number(m.get("agent/mean_turns"))
