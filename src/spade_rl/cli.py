"""The ``spade-rl`` command line.

spade-rl doctor [--json]                 which isolation layers this machine has; a live self-check
spade-rl envs list                       the reference environments
spade-rl envs show NAME                  print a reference environment's source
spade-rl envs validate FILE|NAME... [--json]   run the validation battery in the sandbox
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from spade_rl.envs import reference
from spade_rl.sandbox import SandboxConfig, SandboxPool, SandboxUnavailable

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="SPADE: self-play in executable environments."
)
envs_app = typer.Typer(no_args_is_help=True, help="Reference environments and validation.")
app.add_typer(envs_app, name="envs")
console = Console()


def _fail(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {message}")
    return typer.Exit(2)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@app.command()
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    skip_check: bool = typer.Option(False, "--no-check", help="Only list the layers; run no probe."),
) -> None:
    """Show which sandbox layers are available and active, then run hostile probes through the sandbox."""
    from spade_rl.sandbox.doctor import layer_table, self_check

    config = SandboxConfig()
    rows, error = layer_table(config)
    probes = []
    if not error and not skip_check:
        try:
            probes = self_check(config)
        except SandboxUnavailable as exc:
            error = str(exc)
    healthy = not error and all(p.stopped for p in probes)
    if as_json:
        print(
            json.dumps(
                {
                    "python": sys.version.split()[0],
                    "layers": [r.__dict__ for r in rows],
                    "probes": [p.__dict__ for p in probes],
                    "error": error,
                    "healthy": healthy,
                },
                indent=2,
            )
        )
    else:
        table = Table(title="sandbox layers")
        for column in ("layer", "mode", "available", "active", "detail"):
            table.add_column(column)
        for r in rows:
            table.add_row(r.layer, r.mode, _yes(r.available), _yes(r.active), r.detail)
        console.print(table)
        if probes:
            checks = Table(title="self-check: hostile environments")
            for column in ("attack", "stopped", "what happened"):
                checks.add_column(column)
            for p in probes:
                checks.add_row(p.name, _yes(p.stopped), p.detail)
            console.print(checks)
        if error:
            console.print(f"[bold red]sandbox unavailable:[/] {error}")
        else:
            console.print(
                "[bold green]sandbox healthy[/]" if healthy else "[bold red]an attack was not stopped[/]"
            )
    if not healthy:
        raise typer.Exit(1)


def _yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"


@envs_app.command("list")
def envs_list() -> None:
    """List the reference environments shipped with spade-rl."""
    table = Table(title="reference environments")
    for column in ("name", "setting", "description"):
        table.add_column(column)
    for name in reference.NAMES:
        table.add_row(name, reference.SETTINGS[name], reference.DESCRIPTIONS[name])
    console.print(table)


@envs_app.command("show")
def envs_show(name: str) -> None:
    """Print the source of a reference environment."""
    try:
        print(reference.source(name))
    except (KeyError, ValueError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from None


def _read_env(spec: str) -> str:
    path = Path(spec)
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"cannot read {spec}: {exc}") from None
    if spec in reference.NAMES:
        return reference.source(spec)
    raise _fail(f"{spec} is neither a file nor a reference environment ({', '.join(reference.NAMES)})")


@envs_app.command("validate")
def envs_validate(
    files: list[str] = typer.Argument(..., help="Environment files, or reference environment names."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of reports."),
) -> None:
    """Validate environments in the sandbox; exit status 1 when any is not valid."""
    from spade_rl.design.validate import validate_source

    sources = [(spec, _read_env(spec)) for spec in files]
    try:
        with SandboxPool(SandboxConfig()) as pool:
            reports = [(spec, validate_source(pool, source)) for spec, source in sources]
    except SandboxUnavailable as exc:
        raise _fail(str(exc)) from None
    if as_json:
        print(json.dumps([{"path": spec, **report.to_json()} for spec, report in reports], indent=2))
    else:
        table = Table(title="validation")
        for column in ("path", "valid", "reason", "seconds", "message"):
            table.add_column(column, overflow="fold")
        for spec, report in reports:
            table.add_row(
                spec, _yes(report.valid), report.reason, f"{report.seconds:.3f}", report.message[:200]
            )
        console.print(table)
    if not all(report.valid for _, report in reports):
        raise typer.Exit(1)
