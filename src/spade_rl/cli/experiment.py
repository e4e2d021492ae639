"""``spade-rl experiment FILE.toml [--out DIR] [--check | --compare]``: arms (baselines, ablations) run with
one budget and compared on held-out suites.

Running it again on the same folder resumes; seeds and arms may be added to the file between sittings
(the runs already there must not change), and ``--compare`` writes the comparison of whatever has
finished without running anything."""

from __future__ import annotations

from pathlib import Path

import typer

from spade_rl.cli.common import console, fail
from spade_rl.sandbox import SandboxUnavailable


def experiment(
    file: Path = typer.Argument(..., help="The experiment file (see experiments/)."),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="The experiment folder (default: runs/experiments/<name>); resumed if it exists.",
    ),
    check: bool = typer.Option(
        False, "--check", help="Check the file and every arm's configuration, run nothing."
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Run nothing: write the comparison and the figure of the runs that have finished in --out.",
    ),
) -> None:
    """Run several arms (configurations of the loop) with one budget and compare them on held-out suites."""
    from rich.markup import escape

    from spade_rl.corpus import CorpusError
    from spade_rl.experiment import ExperimentError, load_experiment
    from spade_rl.loop.config import ConfigError
    from spade_rl.policy import PolicyError

    try:
        spec = load_experiment(file)
    except (ExperimentError, ConfigError) as exc:
        raise fail(str(exc)) from None
    folder = out or Path("runs") / "experiments" / spec.name
    arms = ", ".join(arm.name for arm in spec.arms)
    console.print(
        f"experiment {escape(spec.name)}: arms {escape(arms)}; seeds {list(spec.seeds)}; "
        f"{spec.budget.describe()}; evaluation {', '.join(spec.evaluation.suites)} "
        f"(limit {spec.evaluation.limit}); baseline {escape(spec.baseline or 'none')}; "
        f"{escape(spec.placement.describe())}",
        highlight=False,
    )
    if check:
        console.print("every arm's configuration is valid; nothing run (--check)")
        for missing in spec.unavailable:  # the file is fine; this machine lacks a package
            console.print(
                f"[yellow]not checked:[/] {escape(missing)} (the experiment runs once it is installed)",
                highlight=False,
            )
        return
    from spade_rl.experiment import compare_finished, run_experiment

    def say(message: str) -> None:
        console.print(escape(message), highlight=False)

    try:
        if compare:
            outcome = compare_finished(spec, folder, progress=say)
        else:
            outcome = run_experiment(spec, folder, progress=say)
    except (ExperimentError, ConfigError, CorpusError, PolicyError, SandboxUnavailable) as exc:
        raise fail(str(exc)) from None
    console.print(
        outcome.comparison_md.read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True
    )
    for warning in outcome.warnings:
        console.print(f"[yellow]note:[/] {escape(warning)}", highlight=False)
    console.print(f"comparison: {outcome.comparison_json}, {outcome.comparison_md}", highlight=False)
    if outcome.figure is not None:
        console.print(f"figure: {outcome.figure}", highlight=False)
