"""In-loop evaluation results of a run, read defensively for the report.

    records = read_evals(run_dir / "eval", metrics_by_iteration, warnings)
    for record in records:
        print(record.iteration, {s.suite: s.accuracy for s in record.suites.values()})

The loop stores each evaluation as ``RUN_DIR/eval/iter-NNNN.json`` (an evaluation result file:
``{"model": ..., "suites": {name: {"suite", "version", "items": [{"correct": bool, ...}], "metrics",
...}}}``, possibly with ``accuracy``, ``n``, ``correct`` and ``ci`` per suite) and also puts
``eval/<suite>/accuracy`` into that iteration's metrics line. This module reads both without importing
the evaluation package: whatever a file holds, a suite's accuracy is taken as written or computed
from its items (full credit only), and its 95% interval is Wilson's when the file gives none. A file
that cannot be read becomes a warning, never an error.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE_NAME = re.compile(r"^iter-(\d+)\.json$")
METRIC_KEY = re.compile(r"^eval/(.+)/(accuracy|n|ci_low|ci_high)$")


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of ``correct / n``: ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _number(value: object) -> float | None:
    if type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    return None


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


@dataclass
class SuiteScore:
    suite: str
    accuracy: float | None
    ci: tuple[float, float] | None
    n: int | None
    version: str = ""
    extras: dict[str, float] = field(default_factory=dict)  # the suite's other numeric metrics


@dataclass
class EvalRecord:
    """The evaluation after one iteration; ``source`` says where it was read from."""

    iteration: int
    source: str
    model: str = ""
    suites: dict[str, SuiteScore] = field(default_factory=dict)


def read_evals(eval_dir: Path, metrics: dict[int, dict[str, Any]], warnings: list[str]) -> list[EvalRecord]:
    """Every evaluation of the run, oldest first: result files, then metrics keys for what they lack."""
    records: dict[int, EvalRecord] = {}
    if eval_dir.is_dir():
        for path in sorted(eval_dir.iterdir()):
            match = FILE_NAME.match(path.name)
            if match is None or not path.is_file():
                continue
            record = _read_file(path, int(match.group(1)), warnings)
            if record is not None:
                records[record.iteration] = record
    for iteration, line in sorted(metrics.items()):
        found: dict[str, dict[str, float]] = {}
        for key, value in line.items():
            match = METRIC_KEY.match(key)
            if match and _number(value) is not None:
                found.setdefault(match.group(1), {})[match.group(2)] = _number(value)  # type: ignore[assignment]
        if not found:
            continue
        record = records.setdefault(iteration, EvalRecord(iteration, "metrics.jsonl"))
        for suite, values in found.items():
            if suite in record.suites or "accuracy" not in values:
                continue
            n = values.get("n")
            low, high = values.get("ci_low"), values.get("ci_high")
            record.suites[suite] = SuiteScore(
                suite,
                values["accuracy"],
                (low, high) if low is not None and high is not None else None,
                int(n) if n is not None and n >= 0 and n == int(n) else None,
            )
    return [records[i] for i in sorted(records)]


def _read_file(path: Path, iteration: int, warnings: list[str]) -> EvalRecord | None:
    where = f"eval/{path.name}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        warnings.append(f"{where} cannot be read ({exc}); skipped")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{where} does not hold a JSON object; skipped")
        return None
    suites = data.get("suites")
    if isinstance(suites, dict):
        entries = [(str(name), value) for name, value in suites.items()]
    elif isinstance(suites, list):
        entries = [
            (str(v.get("suite") or f"suite {i + 1}") if isinstance(v, dict) else f"suite {i + 1}", v)
            for i, v in enumerate(suites)
        ]
    else:
        warnings.append(f"{where} has no 'suites' (an object of suite results); skipped")
        return None
    model = data.get("model")
    if isinstance(model, dict):
        model = model.get("name") or model.get("model") or json.dumps(model, sort_keys=True)
    record = EvalRecord(iteration, where, model=str(model) if model else "")
    for name, value in entries:
        score = _suite_score(name, value)
        if score is None:
            warnings.append(f"{where}: suite {name!r} has no items, accuracy or counts; skipped")
        else:
            record.suites[name] = score
    return record


def _suite_score(name: str, value: object) -> SuiteScore | None:
    if not isinstance(value, dict):
        return None
    items = value.get("items") if isinstance(value.get("items"), list) else None
    extras = value.get("metrics") if isinstance(value.get("metrics"), dict) else {}
    n = _count(value.get("n"))
    if n is None and items is not None:
        n = len(items)
    if n == 0:
        return None  # an empty suite has no accuracy (the loop's files say 0.0)
    correct = _count(value.get("correct"))
    if correct is None and items is not None:
        correct = sum(isinstance(item, dict) and item.get("correct") is True for item in items)
    accuracy = _number(value.get("accuracy"))
    if accuracy is None:
        accuracy = _number(extras.get("accuracy"))
    if accuracy is None and correct is not None and n:
        accuracy = correct / n
    if accuracy is None:
        return None
    ci = value.get("ci")
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(_number(c) is not None for c in ci):
        interval: tuple[float, float] | None = (float(ci[0]), float(ci[1]))
    elif correct is not None and n:
        interval = wilson_interval(correct, n)
    else:
        interval = None
    numeric = {str(k): float(v) for k, v in extras.items() if _number(v) is not None and k != "accuracy"}
    return SuiteScore(name, accuracy, interval, n, str(value.get("version") or ""), numeric)
