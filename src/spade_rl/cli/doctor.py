"""``spade-rl doctor [--json] [--no-check]``: which sandbox layers this machine has, and a live self-check
(hostile environments run through the sandbox). Exit status 1 when the sandbox is not healthy."""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from spade_rl.cli.common import console, yes
from spade_rl.sandbox import SandboxConfig, SandboxUnavailable


def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    skip_check: bool = typer.Option(False, "--no-check", help="Only list the layers; run no probe."),
) -> None:
    """Show which sandbox layers are available and active, then run hostile probes through the sandbox."""
    from spade_rl.sandbox.doctor import interpreter_view, layer_table, sandbox_user_access, self_check

    config = SandboxConfig()
    rows, error = layer_table(config)
    view = interpreter_view(config) if not error else {}
    # Folders the workers' uid cannot enter matter only where no view of the interpreter was made.
    access = [] if view.get("active") else sandbox_user_access(config)
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
                    "sandbox_user_cannot_read": access,
                    "interpreter_view": view,
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
            table.add_row(r.layer, r.mode, yes(r.available), yes(r.active), r.detail)
        console.print(table)
        if probes:
            checks = Table(title="self-check: hostile environments")
            for column in ("attack", "stopped", "what happened"):
                checks.add_column(column)
            for p in probes:
                checks.add_row(p.name, yes(p.stopped), p.detail)
            console.print(checks)
        if view.get("active"):
            console.print(f"interpreter view: {view.get('detail', '')}")
        for why in access:
            console.print(
                f"[yellow]workers drop to uid {config.unprivileged_uid}, which cannot read this Python's "
                f"modules:[/] {why}. Environments can import only what the workers preload."
            )
        if access and view.get("detail"):
            console.print(f"no interpreter view: {view['detail']}")
        if error:
            console.print(f"[bold red]sandbox unavailable:[/] {error}")
        else:
            console.print(
                "[bold green]sandbox healthy[/]" if healthy else "[bold red]an attack was not stopped[/]"
            )
    if not healthy:
        raise typer.Exit(1)
