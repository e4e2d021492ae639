"""``spade-rl envs ...``: the named environments (references, held-out families), an archive's
environments, and validation.

spade-rl envs list [--archive RUN_DIR] [--valid-only] [--json]
spade-rl envs show NAME|ID [--archive RUN_DIR]
spade-rl envs export FILE.jsonl --archive RUN_DIR [--valid-only]
spade-rl envs export OUT_DIR --archive RUN_DIR --format verifiers [--name spade-games]   (a verifiers taskset)
spade-rl envs import FILE.jsonl --archive RUN_DIR [--skip-bad-lines]
spade-rl envs validate FILE|NAME... [--hint TEXT] [--max-turns N] [--json]   (exit 1 if any is invalid)
spade-rl envs serve [FILE|NAME...] [--archive RUN_DIR | --jsonl FILE] [--ids 3,7] [--port 8000]   (OpenEnv)
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from spade_rl.cli.common import (
    ARCHIVE_OPTION,
    console,
    exit_on_sigterm,
    fail,
    open_archive,
    read_env,
    yes,
)
from spade_rl.design.validate import ValidationSettings
from spade_rl.envs import heldout, reference
from spade_rl.envs.sources import UnknownEnvironment, reference_entry
from spade_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable

envs_app = typer.Typer(no_args_is_help=True, help="Reference environments and validation.")


@envs_app.command("list")
def envs_list(
    archive: Path | None = ARCHIVE_OPTION,
    valid_only: bool = typer.Option(False, "--valid-only", help="Only valid environments."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the named environments (the references and the held-out families), or an archive's."""
    if archive is None:
        from spade_rl.envs.sources import NAMED, role

        settings = {**reference.SETTINGS, **heldout.SETTINGS}
        descriptions = {**reference.DESCRIPTIONS, **heldout.DESCRIPTIONS}
        rows = [
            {"name": n, "role": role(n), "setting": settings[n], "description": descriptions[n]}
            for n in NAMED
        ]
        title = "named environments (role: pool = trained on and shown to the designer by default)"
    else:
        with open_archive(archive) as store:
            latest = store.latest_stats()
            rows = []
            for env_id in store.ids(valid=True if valid_only else None):
                record = store.get(env_id)
                stats = latest.get(env_id)
                rows.append(
                    {
                        "id": env_id,
                        "valid": record.valid,
                        "reason": record.reason,
                        "skill": record.skill,
                        "setting": record.setting,
                        "iteration": record.iteration,
                        "origin": record.origin,
                        "class": record.class_name,
                        "win_nohint": round(stats.stats.win_rate_nohint, 3) if stats else None,
                        "win_hint": round(stats.stats.win_rate_hint, 3) if stats else None,
                        "regret": round(stats.stats.regret, 3) if stats else None,
                    }
                )
        title = f"environments in {archive}"
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=title)
    for column in rows[0] if rows else ("name",):
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(table)


@envs_app.command("show")
def envs_show(name: str, archive: Path | None = ARCHIVE_OPTION) -> None:
    """Print a named environment's source (a reference or a held-out family), or an archived environment
    (source, hint, statistics)."""
    if archive is None:
        try:
            print(reference_entry(name).source)
        except UnknownEnvironment as exc:
            raise fail(str(exc)) from None
        return
    if not name.isdigit():
        raise fail(f"with --archive, give an environment id (a number), got {name!r}")
    with open_archive(archive) as store:
        try:
            record = store.get(int(name))
        except (KeyError, ValueError) as exc:
            raise fail(f"no environment {name} in {archive}: {exc}") from None
        history = store.stats_history(record.env_id)
    print(
        f"# environment {record.env_id}: {record.class_name or '?'} "
        f"({'valid' if record.valid else 'invalid'}:"
        f" {record.reason}) skill={record.skill} setting={record.setting} iteration={record.iteration}"
        f" origin={record.origin} parents={list(record.parents)} document={record.document_id}"
    )
    if record.message:
        print(f"# {record.message}")
    print(f"# hint: {record.hint or '(none)'}")
    for row in history:
        st = row.stats
        print(
            f"# iteration {row.iteration}: win {st.win_rate_nohint:.2f} without hint, {st.win_rate_hint:.2f} "
            f"with; regret {st.regret:.2f}; {st.episodes_nohint}+{st.episodes_hint} episodes"
        )
    print(record.source)


EXPORT_FORMATS = ("jsonl", "verifiers")


@envs_app.command("export")
def envs_export(
    out: Path = typer.Argument(
        ..., help="The JSONL file to write; with --format verifiers, a new folder for the package."
    ),
    archive: Path = typer.Option(..., "--archive", "-a", help="A run directory or archive.sqlite file."),
    valid_only: bool = typer.Option(
        False, "--valid-only", help="Only valid environments (always so with --format verifiers)."
    ),
    format_: str = typer.Option(
        "jsonl",
        "--format",
        help="jsonl: one environment per line (envs import reads it); verifiers: an installable verifiers "
        "taskset package whose tasks play the valid environments in spade-rl's sandbox (hints optional).",
    ),
    name: str = typer.Option(
        "spade-games", "--name", help="With --format verifiers: the package's name, and its verifiers id."
    ),
) -> None:
    """Export an archive's environments (with metadata and statistics) as JSONL, one per line, or as a
    verifiers taskset package (--format verifiers)."""
    if format_ not in EXPORT_FORMATS:
        raise fail(f"--format {format_!r} is unknown; allowed: {list(EXPORT_FORMATS)}")
    if format_ == "jsonl" and name != "spade-games":
        raise fail("--name names a verifiers package: give it with --format verifiers only")
    if format_ == "verifiers":
        from spade_rl.interop.verifiers.package import write_package

        with open_archive(archive) as store:
            try:
                count = write_package(out, store.export_jsonl, name)
            except ValueError as exc:
                raise fail(str(exc)) from None
        console.print(
            f"wrote the verifiers taskset {name} ({count} valid environments) to {out}; install it with "
            f"pip install -e {out} (beside spade-rl[verifiers]) and run it with vf-eval {name} ..."
        )
        return
    with open_archive(archive) as store:
        count = store.export_jsonl(out, valid_only=valid_only)
    console.print(f"wrote {count} environments to {out}")


@envs_app.command("import")
def envs_import(
    file: Path = typer.Argument(..., help="A JSONL file written by `envs export`."),
    archive: Path = typer.Option(..., "--archive", "-a", help="A run directory or archive.sqlite file."),
    skip_bad_lines: bool = typer.Option(
        False, "--skip-bad-lines", help="Skip malformed lines, reporting each."
    ),
) -> None:
    """Import environments from JSONL into an archive (created if missing); duplicates are recognised."""
    from spade_rl.archive import Archive, ArchiveError

    if not file.is_file():
        raise fail(f"no such file: {file}")
    path = archive / "archive.sqlite" if archive.is_dir() or not archive.suffix else archive
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with Archive(path) as store:
            result = store.import_jsonl(file, on_error="skip" if skip_bad_lines else "raise")
    except ArchiveError as exc:
        raise fail(str(exc)) from None
    console.print(
        f"imported {result.added} new environments, {result.duplicates} duplicates, "
        f"{len(result.skipped)} lines skipped into {path}"
    )


@envs_app.command("validate")
def envs_validate(
    files: list[str] = typer.Argument(..., help="Environment files, or names (spade-rl envs list)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of reports."),
    hint: str | None = typer.Option(
        None,
        "--hint",
        help="The design's hint: checked as the loop checks a designer's hint (its length, and that it "
        "names no answer of any seed played), for every file.",
    ),
    max_turns: int = typer.Option(
        ValidationSettings().max_turns,
        "--max-turns",
        min=1,
        help="The turn limit validation uses (the loop uses rollout.max_turns).",
    ),
    seed: int | None = typer.Option(
        None,
        "--seed",
        min=0,
        max=2**31 - 1,
        help="The first seed validation plays, the root of the others: a report's seed replays its "
        "validation (default: drawn at random for each file, as the loop draws it).",
    ),
) -> None:
    """Validate environments in the sandbox; exit status 1 when any is not valid."""
    from spade_rl.design.parse import check_hint
    from spade_rl.design.validate import ValidationReport, validate_source

    sources = [(spec, read_env(spec)) for spec in files]
    settings = ValidationSettings(max_turns=max_turns, seed=seed)
    rules = check_hint(hint) if hint is not None else None
    if rules is not None and rules.reason != "ok":  # refused as the design phase refuses it
        reports = [(spec, ValidationReport(False, rules.reason, rules.message)) for spec, _ in sources]
    else:
        hint_text = rules.hint if rules is not None else ""
        try:
            with exit_on_sigterm(), Sandbox(SandboxConfig()) as sandbox:
                reports = [
                    (spec, validate_source(sandbox, source, settings, hint=hint_text))
                    for spec, source in sources
                ]
        except SandboxUnavailable as exc:
            raise fail(str(exc)) from None
    if as_json:
        print(json.dumps([{"path": spec, **report.to_json()} for spec, report in reports], indent=2))
    else:
        table = Table(title="validation")
        for column in ("path", "valid", "reason", "seed", "seconds", "message"):
            table.add_column(column, overflow="fold")
        for spec, report in reports:
            table.add_row(
                spec,
                yes(report.valid),
                report.reason,
                str(report.seed),
                f"{report.seconds:.3f}",
                report.message[:200],
            )
        console.print(table)
    if not all(report.valid for _, report in reports):
        raise typer.Exit(1)


@envs_app.command("serve")
def envs_serve(
    envs: list[str] = typer.Argument(
        None, help="Reference names or environment files (default: all references)."
    ),
    archive: Path | None = ARCHIVE_OPTION,
    jsonl: Path | None = typer.Option(None, "--jsonl", help="A JSONL pool written by `envs export`."),
    ids: str = typer.Option("", "--ids", help="Only these ids of the archive or pool, e.g. 3,7."),
    host: str = typer.Option("127.0.0.1", "--host", help="The address to listen on."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="The port to listen on."),
    max_sessions: int = typer.Option(8, "--max-sessions", min=1, max=1024, help="Sessions at once."),
    idle_timeout: float = typer.Option(300.0, "--idle-timeout", min=0.01, help="Close idle sessions (s)."),
    call_timeout: float = typer.Option(5.0, "--call-timeout", min=0.01, help="Deadline of one call (s)."),
) -> None:
    """Serve environments over HTTP and WebSocket in the OpenEnv convention, played in the sandbox."""
    try:
        from spade_rl.interop.openenv_server import ServeConfig, serve
    except ImportError as exc:
        raise fail(f"serving needs the openenv extra: pip install 'spade-rl[openenv]' ({exc})") from None
    from spade_rl.envs.sources import UnknownEnvironment, served_entries

    try:
        entries = served_entries(
            envs or [], str(archive) if archive else None, str(jsonl) if jsonl else None, ids
        )
        config = ServeConfig(host, port, max_sessions, idle_timeout, call_timeout)
    except (UnknownEnvironment, ValueError) as exc:
        raise fail(str(exc)) from None
    for entry in entries:
        console.print(f"{entry.name}: http://{host}:{port}/envs/{entry.name} ({entry.origin})")
    try:
        closed = serve(entries, config)
    except SandboxUnavailable as exc:
        raise fail(str(exc)) from None
    console.print(f"stopped: {closed} session{'' if closed == 1 else 's'} served, every one closed")
