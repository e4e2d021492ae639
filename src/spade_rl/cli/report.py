"""``spade-rl report RUN_DIR [--out DIR] [--check]``: a self-contained HTML report of a run, with PNG figures;
``--check`` opens it in headless Chromium (exit status 1 when the page is broken)."""

from __future__ import annotations

from pathlib import Path

import typer

from spade_rl.cli.common import console, fail


def report(
    run_dir: Path = typer.Argument(..., help="The run directory written by `spade-rl run`."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Where to write (default: RUN_DIR/report)."),
    examples: int = typer.Option(3, "--examples", min=0, help="Example environments in the filmstrip."),
    episodes: int = typer.Option(3, "--episodes", min=0, help="Sampled episodes shown."),
    check: bool = typer.Option(False, "--check", help="Open the page in headless Chromium and check it."),
) -> None:
    """Write a self-contained HTML report of a run (curves, skills, example environments, evaluation)."""
    from rich.markup import escape

    from spade_rl.report import ReportError, build_report

    try:
        with console.status("drawing the report"):
            result = build_report(run_dir, out, examples=examples, episodes=episodes)
    except (ReportError, ImportError) as exc:  # ImportError: matplotlib missing (the report extra)
        raise fail(str(exc)) from None
    for warning in result.warnings:
        console.print(f"[yellow]note:[/] {escape(warning)}", highlight=False)
    console.print(f"report: {escape(str(result.index))}", highlight=False)
    console.print(f"figures: {escape(', '.join(p.name for p in result.figures))}", highlight=False)
    if check:
        from spade_rl.report.browser import BrowserError, check_page

        try:
            checked = check_page(result.index)
        except BrowserError as exc:
            raise fail(str(exc)) from None
        if not checked.passed:
            problems = escape("; ".join(checked.problems))
            console.print(f"[bold red]page check failed:[/] {problems}", highlight=False)
            raise typer.Exit(1)
        console.print(f"page check: {len(checked.figures)} figures decoded in Chromium, no script errors")
