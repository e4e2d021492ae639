"""Result files of an evaluation, and the comparison of two of them.

    result = EvalResult(model="smollm2-135m", backend="transformers", seed=0, limit=20, ...)
    result.write("before.json"); again = EvalResult.read("before.json")
    for row in compare(EvalResult.read("before.json"), EvalResult.read("after.json")):
        row.suite, row.category, row.acc_a, row.acc_b, row.diff, row.p_value, row.test, row.significant

A result file is JSON: the model, backend, spade-rl version, creation time, seed, limit, sampling
settings, the host, and every suite's :class:`~spade_rl.evaluate.base.SuiteResult` with its items. A
sampled evaluation adds ``samples`` (n, greedy, and the settings of the samples) and, per item, the
(correct, score) of each sample; files without them (written before, or with one sample) read as before.

``compare`` gives one row per suite and one per category of a suite (``detail["category"]`` of its
items). Items that are errors (their checker or environment failed: ``ItemResult.error``) are left out
and counted in the row's ``left_out``. When both sides hold exactly the same item ids, the difference is
tested on the pairs scored on both sides with McNemar's exact test (two-sided binomial test on the
discordant pairs: items right in one run and wrong in the other), and both accuracies are over those
pairs; otherwise each side's scored items are tested with the unpaired two-proportion z-test (pooled
variance). A row whose
p-value is below ``alpha`` (0.05) exceeds the noise. Results that are not comparable (different suite
versions, seeds, limits or suite options, or different sampling) are flagged with the reason and
not tested; an option that a result written before the option existed lacks counts as the suite's
default. Where both sides were sampled, a row also carries each side's pass@k (at the k both have);
pass@k differences are shown, not tested, and only when the samples' settings agree.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spade_rl.evaluate.base import ItemResult, SuiteResult, recorded_defaults, wilson_interval
from spade_rl.evaluate.sampled import pass_at_k_of

FORMAT = "spade-rl-eval/1"
ALPHA = 0.05


class ResultFileError(ValueError):
    """A result file that cannot be read: missing, not JSON, or not an evaluation result."""


@dataclass
class EvalResult:
    model: str  # name or path of the model
    backend: str  # transformers, openai, vllm, fake
    seed: int
    limit: int | None
    sampling: dict  # the SamplingSettings of the evaluation, as a dict
    suites: dict[str, SuiteResult] = field(default_factory=dict)
    spade_rl_version: str = ""
    created: str = ""  # ISO 8601 time, UTC
    host: dict = field(default_factory=dict)  # python, platform, cpus, torch, device
    seconds: float = 0.0
    samples: dict | None = None  # sampled evaluation: {"n", "greedy", and the samples' SamplingSettings}

    def to_dict(self) -> dict:
        data = {
            "format": FORMAT,
            "model": self.model,
            "backend": self.backend,
            "spade_rl_version": self.spade_rl_version,
            "created": self.created,
            "seed": self.seed,
            "limit": self.limit,
            "sampling": self.sampling,
            "host": self.host,
            "seconds": self.seconds,
            "suites": {name: suite.to_dict() for name, suite in self.suites.items()},
        }
        if self.samples is not None:
            data["samples"] = self.samples
        return data

    @classmethod
    def from_dict(cls, data: Any) -> EvalResult:
        """Raises ``ValueError`` saying what is wrong with ``data``."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}; this version reads {FORMAT!r}")
        for key, kinds in (
            ("model", str),
            ("backend", str),
            ("seed", int),
            ("sampling", dict),
            ("suites", dict),
            ("host", dict),
        ):
            if not isinstance(data.get(key), kinds) or isinstance(data.get(key), bool):
                raise ValueError(f"field {key!r} is missing or not a {kinds.__name__}")
        limit = data.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ValueError(f"field 'limit' must be an integer or null, got {limit!r}")
        suites = {}
        for name, suite in data["suites"].items():
            result = SuiteResult.from_dict(suite)
            if result.suite != name:
                raise ValueError(f"suite {name!r} holds the result of {result.suite!r}")
            suites[name] = result
        seconds = data.get("seconds", 0.0)
        samples = data.get("samples")  # absent in files of unsampled evaluations
        if samples is not None and not (
            isinstance(samples, dict)
            and isinstance(samples.get("n"), int)
            and not isinstance(samples.get("n"), bool)
            and samples["n"] >= 1
        ):
            raise ValueError(
                f"field 'samples' must be null or an object with an integer n >= 1, got {samples!r}"
            )
        return cls(
            model=data["model"],
            backend=data["backend"],
            seed=data["seed"],
            limit=limit,
            sampling=data["sampling"],
            suites=suites,
            spade_rl_version=str(data.get("spade_rl_version", "")),
            created=str(data.get("created", "")),
            host=data["host"],
            seconds=float(seconds) if isinstance(seconds, int | float) else 0.0,
            samples=samples,
        )

    def write(self, path: str | os.PathLike) -> None:
        """Write as JSON (the folder is created); NaN and infinities are refused, as JSON has none."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=1, ensure_ascii=False, allow_nan=False)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def read(cls, path: str | os.PathLike) -> EvalResult:
        """Raises ``ResultFileError`` naming the file and what is wrong with it."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ResultFileError(f"no such result file: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ResultFileError(f"cannot read {path}: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ResultFileError(f"{path} is not JSON: {exc}") from None
        try:
            return cls.from_dict(data)
        except ValueError as exc:
            raise ResultFileError(f"{path} is not a spade-rl evaluation result: {exc}") from None


@dataclass(frozen=True)
class CompareRow:
    suite: str
    category: str | None  # None: the whole suite
    n_a: int
    acc_a: float | None  # None: the suite is absent from A
    ci_a: tuple[float, float] | None
    n_b: int
    acc_b: float | None
    ci_b: tuple[float, float] | None
    diff: float | None  # acc_b - acc_a
    p_value: float | None  # None: not tested (not comparable, or a side is missing or empty)
    test: str  # "mcnemar_exact", "two_proportion_z", or "" when not tested
    significant: bool  # p_value < ALPHA
    comparable: bool
    note: str = ""  # why a row is not comparable or not tested; how many pairs a paired test used
    left_out: int = 0  # items not compared because they are errors (on either side, when paired)
    pass_a: dict[int, float] | None = None  # pass@k of A's items (sampled evaluations), None: not sampled
    pass_b: dict[int, float] | None = None
    pass_note: str = ""  # why the pass@k of the two sides are not comparable ("" when they are)


def compare(a: EvalResult, b: EvalResult, alpha: float = ALPHA) -> list[CompareRow]:
    """Rows for every suite of either result (A's order, then B's), each followed by its categories."""
    rows: list[CompareRow] = []
    sample_problem = _sample_difference(a, b)
    common_problems = _run_differences(a, b)
    for name in list(a.suites) + [s for s in b.suites if s not in a.suites]:
        sa, sb = a.suites.get(name), b.suites.get(name)
        if sa is None or sb is None:
            present = sa if sa is not None else sb
            row = _one_sided(name, None, present.items, a_side=sa is not None)  # type: ignore[union-attr]
            rows.append(_with_pass(row, sa.items if sa else [], sb.items if sb else [], sample_problem))
            continue
        problems = common_problems + _suite_differences(sa, sb)
        row = _row(name, None, sa.items, sb.items, problems, alpha)
        rows.append(_with_pass(row, sa.items, sb.items, sample_problem))
        for category in _categories(sa.items, sb.items):
            ia = [i for i in sa.items if i.detail.get("category") == category]
            ib = [i for i in sb.items if i.detail.get("category") == category]
            if not ia or not ib:
                row = _one_sided(name, category, ia or ib, a_side=bool(ia))
            else:
                row = _row(name, category, ia, ib, problems, alpha)
            rows.append(_with_pass(row, ia, ib, sample_problem))
    return rows


def _sample_difference(a: EvalResult, b: EvalResult) -> str:
    """Why the pass@k of A and B are not comparable: the samples' settings differ (their number may differ:
    the estimator is unbiased for any n >= k)."""
    if a.samples is None or b.samples is None:
        return ""
    ignore = ("n", "greedy", "seed")
    keys = sorted(
        k for k in set(a.samples) | set(b.samples) if k not in ignore and a.samples.get(k) != b.samples.get(k)
    )
    return f"samples' settings differ ({', '.join(keys)})" if keys else ""


def _with_pass(row: CompareRow, a: list[ItemResult], b: list[ItemResult], problem: str) -> CompareRow:
    pass_a, pass_b = pass_at_k_of(a) or None, pass_at_k_of(b) or None
    if pass_a is None and pass_b is None:
        return row
    return replace(row, pass_a=pass_a, pass_b=pass_b, pass_note=problem)


def _run_differences(a: EvalResult, b: EvalResult) -> list[str]:
    problems = []
    if a.seed != b.seed:
        problems.append(f"seeds differ ({a.seed} vs {b.seed})")
    if a.limit != b.limit:
        problems.append(f"limits differ ({a.limit} vs {b.limit})")
    if a.sampling != b.sampling:
        keys = sorted(k for k in set(a.sampling) | set(b.sampling) if a.sampling.get(k) != b.sampling.get(k))
        problems.append(f"sampling differs ({', '.join(keys)})")
    return problems


def _suite_differences(sa: SuiteResult, sb: SuiteResult) -> list[str]:
    problems = []
    if sa.version != sb.version:
        problems.append(f"versions differ ({sa.version} vs {sb.version})")
    if sa.config != sb.config:
        # An option one record lacks was added after it was written: it played at the suite's default
        # then, so a record holding the default for it is the same evaluation
        defaults = recorded_defaults(sa.suite)
        missing = object()

        def same(key: str) -> bool:
            a, b = sa.config.get(key, missing), sb.config.get(key, missing)
            if a is missing or b is missing:
                present = b if a is missing else a
                return key in defaults and present == defaults[key]
            return a == b

        keys = sorted(k for k in set(sa.config) | set(sb.config) if not same(k))
        if keys:
            problems.append(f"suite options differ ({', '.join(keys)})")
    return problems


def _categories(a: list[ItemResult], b: list[ItemResult]) -> list[str]:
    seen: dict[str, None] = {}
    for item in a + b:
        category = item.detail.get("category")
        if isinstance(category, str):
            seen.setdefault(category, None)
    return list(seen)


def _one_sided(suite: str, category: str | None, items: list[ItemResult], a_side: bool) -> CompareRow:
    scored = [i for i in items if not i.error]
    n, correct, errors = len(scored), sum(i.correct for i in scored), len(items) - len(scored)
    acc, ci = (correct / n if n else 0.0), wilson_interval(correct, n)
    note = f"only in {'A' if a_side else 'B'}" + _left_out_text(errors)
    if a_side:
        return CompareRow(
            suite, category, n, acc, ci, 0, None, None, None, None, "", False, False, note, errors
        )
    return CompareRow(suite, category, 0, None, None, n, acc, ci, None, None, "", False, False, note, errors)


def _left_out_text(errors: int) -> str:
    return f"; {errors} left out for errors" if errors else ""


def _scored_pairs(
    a: list[ItemResult], b: list[ItemResult]
) -> tuple[list[ItemResult], list[ItemResult], bool, int, str]:
    """(A's items, B's items, paired, items left out for errors, a note saying so): when both sides hold
    the same ids once each, the items scored on both sides in A's order, matched (an item that is an
    error on either side leaves its pair out); otherwise each side's scored items."""
    ids_a, ids_b = [i.id for i in a], [i.id for i in b]
    if len(set(ids_a)) == len(a) and len(set(ids_b)) == len(b) and set(ids_a) == set(ids_b):
        by_id_b = {i.id: i for i in b}
        kept = [(i, by_id_b[i.id]) for i in a if not i.error and not by_id_b[i.id].error]
        errors_a, errors_b = sum(1 for i in a if i.error), sum(1 for i in b if i.error)
        left = len(a) - len(kept)
        note = f"; {left} left out for errors ({errors_a} in A, {errors_b} in B)" if left else ""
        return [x for x, _ in kept], [y for _, y in kept], True, left, note
    scored_a, scored_b = [i for i in a if not i.error], [i for i in b if not i.error]
    errors_a, errors_b = len(a) - len(scored_a), len(b) - len(scored_b)
    note = f"; errors left out: {errors_a} in A, {errors_b} in B" if errors_a or errors_b else ""
    return scored_a, scored_b, False, errors_a + errors_b, note


def _row(
    suite: str,
    category: str | None,
    a: list[ItemResult],
    b: list[ItemResult],
    problems: list[str],
    alpha: float,
) -> CompareRow:
    a, b, paired, left_out, left_note = _scored_pairs(a, b)
    ca, cb = sum(i.correct for i in a), sum(i.correct for i in b)
    na, nb = len(a), len(b)
    acc_a, acc_b = (ca / na if na else 0.0), (cb / nb if nb else 0.0)
    base = dict(
        suite=suite,
        category=category,
        n_a=na,
        acc_a=acc_a,
        ci_a=wilson_interval(ca, na),
        n_b=nb,
        acc_b=acc_b,
        ci_b=wilson_interval(cb, nb),
        diff=acc_b - acc_a,
        left_out=left_out,
    )
    if problems:
        return CompareRow(
            **base,
            p_value=None,
            test="",
            significant=False,
            comparable=False,
            note="not comparable: " + "; ".join(problems) + left_note,
        )
    if na == 0 or nb == 0:
        note = ("no items scored on both sides" if paired else "no scored items") + left_note
        return CompareRow(**base, p_value=None, test="", significant=False, comparable=True, note=note)
    if paired:
        only_a = sum(1 for x, y in zip(a, b, strict=True) if x.correct and not y.correct)
        only_b = sum(1 for x, y in zip(a, b, strict=True) if not x.correct and y.correct)
        p = mcnemar_exact(only_a, only_b)
        note = f"paired on {na} items: {only_a} right only in A, {only_b} right only in B{left_note}"
        return CompareRow(
            **base, p_value=p, test="mcnemar_exact", significant=p < alpha, comparable=True, note=note
        )
    p = two_proportion_z(ca, na, cb, nb)
    return CompareRow(
        **base,
        p_value=p,
        test="two_proportion_z",
        significant=p < alpha,
        comparable=True,
        note="unpaired: the item ids differ" + left_note,
    )


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts: with m = only_a + only_b and
    k = min(only_a, only_b), p = min(1, 2 * P[Binomial(m, 1/2) <= k]); 1.0 when m == 0."""
    m = only_a + only_b
    if m == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(m, i) for i in range(k + 1)) / 2**m
    return min(1.0, 2 * tail)


def two_proportion_z(correct_a: int, n_a: int, correct_b: int, n_b: int) -> float:
    """Two-sided p-value of the pooled two-proportion z-test: p = (ca + cb) / (na + nb),
    z = (pb - pa) / sqrt(p (1 - p) (1/na + 1/nb)), p-value = erfc(|z| / sqrt 2); 1.0 when the pooled
    proportion is 0 or 1 (both sides all wrong or all right)."""
    pooled = (correct_a + correct_b) / (n_a + n_b)
    variance = pooled * (1 - pooled) * (1 / n_a + 1 / n_b)
    if variance <= 0:
        return 1.0
    z = (correct_b / n_b - correct_a / n_a) / math.sqrt(variance)
    return math.erfc(abs(z) / math.sqrt(2))
