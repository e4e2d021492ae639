"""Benchmark of the validation battery: seconds per design, and per check, on valid designs.

    python bench/validation.py [--synthetic 12] [--repeat 1] [--json]

Validates, with the default ``ValidationSettings`` in one default ``Sandbox`` (as ``spade-rl envs
validate`` and the design phase do): every reference environment, the valid design fixtures of
``tests/design/designs/``, and ``--synthetic`` designs of the warm-up's generator
(``spade_rl.designer.synthetic``, every game skill in turn, composed with the question kit as
the design phase composes them). Valid designs run every check, so they
are what the battery costs at most; an invalid one stops at its first failed check. Prints, per
group, the median and largest seconds per design, and the median seconds of each check (the
report's ``timings``). Figures depend on the machine and its load: compare runs made back to back.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from spade_rl.design.validate import ValidationSettings, validate_source
from spade_rl.designer.synthetic import FAMILIES, synthetic_design
from spade_rl.envs import kits, reference
from spade_rl.sandbox import Sandbox, SandboxConfig

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "design" / "designs"


def designs(synthetic: int) -> dict[str, list[tuple[str, str]]]:
    """(name, source) of each group of designs."""
    rng = random.Random(0)
    skills = sorted(FAMILIES)
    return {
        "reference": [(name, reference.source(name)) for name in reference.ALL],
        "fixtures": [(p.stem, p.read_text()) for p in sorted(FIXTURES.glob("valid_*.py"))],
        "synthetic": [
            (
                f"synthetic-{i}-{skills[i % len(skills)]}",
                kits.compose("question", synthetic_design(rng, skills[i % len(skills)])[0]),
            )
            for i in range(synthetic)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--synthetic", type=int, default=12, help="synthetic designs to validate")
    parser.add_argument("--repeat", type=int, default=1, help="validations of each design")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    settings = ValidationSettings()
    out: dict[str, dict] = {}
    with Sandbox(SandboxConfig()) as sandbox:
        for group, items in designs(args.synthetic).items():
            seconds: list[float] = []
            checks: dict[str, list[float]] = {}
            verdicts: dict[str, str] = {}
            for name, source in items:
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    report = validate_source(sandbox, source, settings)
                    seconds.append(time.perf_counter() - started)
                    verdicts[name] = report.reason
                    for check, spent in report.timings.items():
                        checks.setdefault(check, []).append(spent)
            out[group] = {
                "designs": len(items),
                "valid": sum(reason == "ok" for reason in verdicts.values()),
                "median_s": statistics.median(seconds) if seconds else None,
                "max_s": max(seconds) if seconds else None,
                "checks_median_s": {c: statistics.median(v) for c, v in checks.items()},
                "refused": {n: r for n, r in verdicts.items() if r != "ok"},
            }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for group, row in out.items():
        print(
            f"{group}: {row['valid']}/{row['designs']} valid, median {row['median_s']:.3f} s per design, "
            f"max {row['max_s']:.3f} s"
        )
        for check, spent in row["checks_median_s"].items():
            print(f"    {check:18s} {spent * 1000:8.1f} ms")
        for name, reason in row["refused"].items():
            print(f"    refused: {name} ({reason})")


if __name__ == "__main__":
    main()
