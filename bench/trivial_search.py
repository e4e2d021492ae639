"""Benchmark of the trivial-policy search's cost per design (issue 39): milliseconds of validation per
valid design with the search at its defaults, against baselines measured in the same run.

    python bench/trivial_search.py [--synthetic 12] [--repeat 3] [--json]

Validates the designs of ``bench/validation.py`` (every reference environment, the valid design fixtures,
``--synthetic`` designs of the warm-up's generator) in one default ``Sandbox``, three ways, interleaved
design by design so that the machine's load falls on all three alike:

- ``none``: ``trivial_seeds=0``, no trivial-policy stage at all (nor the answer replay);
- ``fixed``: the fixed trivial policies and the answer replay, played as training plays, without the
  answer-space constants and the shaped guesses (``answer_space_constants=0``, ``shaped_guesses=0``);
- ``unconfirmed``: the defaults but for the confirmation (``trivial_confirm_seeds=0``: a trivial policy
  over the cap at the 16 trivial seeds refuses at once, as before the confirmation);
- ``gates_off``: the defaults with the gates issue 56 turned on set off again (the common-answer and copy
  caps, undetermined answers, the cap on a trivial policy's mean return): what the switchable gates cost.
  (Its other changes, the trivial policies played in words, every stacked instance probed and the virtual
  clock, have no switch: compare runs of this script at two commits for them.)
- ``full``: the default ``ValidationSettings``.

Prints, per group and overall, the median milliseconds per design of each, the added milliseconds of
``full`` over each baseline, and the ratios ``full / fixed``, ``full / none`` and ``full / unconfirmed``;
and how many designs each way refused (the designs are valid: a refusal is a false one). Figures depend
on the machine and its load: read the ratios, and compare runs made back to back.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

from spade_rl.design.validate import ValidationSettings, validate_source
from spade_rl.sandbox import Sandbox, SandboxConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validation import designs  # the designs of bench/validation.py

WAYS = {
    "none": ValidationSettings(trivial_seeds=0),
    "fixed": ValidationSettings(answer_space_constants=0, shaped_guesses=0),
    "unconfirmed": ValidationSettings(trivial_confirm_seeds=0),
    "gates_off": ValidationSettings(
        max_common_answer_win_rate=None,
        max_copy_win_rate=None,
        refuse_undetermined_answers=False,
        max_trivial_mean_return=None,
    ),
    "full": ValidationSettings(),
}


def summary(ms: dict[str, list[float]]) -> dict[str, float]:
    median = {way: statistics.median(values) for way, values in ms.items()}
    return {
        **{f"{way}_ms": round(value, 1) for way, value in median.items()},
        "added_ms_over_fixed": round(median["full"] - median["fixed"], 1),
        "added_ms_over_none": round(median["full"] - median["none"], 1),
        "full_over_unconfirmed": round(median["full"] / median["unconfirmed"], 2),
        "full_over_fixed": round(median["full"] / median["fixed"], 2),
        "full_over_none": round(median["full"] / median["none"], 2),
        "full_over_gates_off": round(median["full"] / median["gates_off"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--synthetic", type=int, default=12, help="synthetic designs to validate")
    parser.add_argument("--repeat", type=int, default=3, help="validations of each design, each way")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    out: dict[str, dict] = {}
    every: dict[str, list[float]] = {way: [] for way in WAYS}
    refused: dict[str, list[str]] = {way: [] for way in WAYS}
    with Sandbox(SandboxConfig()) as sandbox:
        for group, items in designs(args.synthetic).items():
            ms: dict[str, list[float]] = {way: [] for way in WAYS}
            for name, source in items:
                for _ in range(args.repeat):
                    for way, settings in WAYS.items():
                        report = validate_source(sandbox, source, dataclasses.replace(settings))
                        ms[way].append(report.seconds * 1000)
                        if not report.valid:
                            refused[way].append(f"{group}/{name}: {report.reason} (seed {report.seed})")
            for way in WAYS:
                every[way] += ms[way]
            out[group] = {"designs": len(items), **summary(ms)}
    out["all"] = {"designs": sum(o["designs"] for o in out.values()), **summary(every)}
    if args.json:
        print(json.dumps({"per_group": out, "refused": refused}, indent=2))
        return
    header = (
        "group", "designs", "none", "fixed", "unconfirm", "gates_off", "full", "+ms/fixed", "full/fixed",
        "full/none", "full/unconf", "full/g_off",
    )  # fmt: skip
    print(f"{header[0]:<10} {header[1]:>7}" + "".join(f" {h:>10}" for h in header[2:]))
    for group, row in out.items():
        keys = (
            "none_ms", "fixed_ms", "unconfirmed_ms", "gates_off_ms", "full_ms", "added_ms_over_fixed",
            "full_over_fixed", "full_over_none", "full_over_unconfirmed", "full_over_gates_off",
        )  # fmt: skip
        print(f"{group:<10} {row['designs']:>7}" + "".join(f" {row[k]:>10}" for k in keys))
    for way, names in refused.items():
        print(f"refused ({way}): {len(names)}" + "".join(f"\n  {n}" for n in names))


if __name__ == "__main__":
    main()
