"""What the commands of ``spade-rl`` share: the terminal, the error exit, archives and environment files.

The CLI owns the terminal: every command prints through ``console`` (one object, so that a test can
widen it once for all commands) and refuses bad input with ``raise fail(message)`` (exit status 2, a
plain message on stderr, no traceback).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console


def _console() -> Console:
    """Rich's own width on a terminal; 160 columns when the output goes to a file or a pipe (rich would
    wrap tables at 80 columns there, one cell over several lines), unless COLUMNS says otherwise."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=160)


console = _console()

ARCHIVE_OPTION = typer.Option(None, "--archive", "-a", help="A run directory or archive.sqlite file.")


def fail(message: str) -> typer.Exit:
    """The exit of a command refusing its input: ``raise fail("what was wrong and what is allowed")``."""
    typer.echo(f"error: {message}", err=True)  # plain: no wrapping, so messages can be read and grepped
    return typer.Exit(2)


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM ends the command as Ctrl-C does: ``SystemExit(143)`` raised in the main
    thread, so that every ``with`` block closes (a sandbox kills and reaps its workers, an archive
    commits or rolls back) before the process ends. Python's default for SIGTERM ends the process at
    once; its workers then die by their parent-death signal, unreaped. A second SIGTERM during that
    cleanup is ignored (SIGKILL still ends it). Main thread only, as every signal handler.

    Python ignores an exception raised while it runs a finalizer (a ``__del__``, a weakref or garbage
    collector callback): a SIGTERM whose handler ran there would be lost and the command would end as if
    never signalled. The handler records the signal, so the block's end raises ``SystemExit(143)`` then."""
    signalled = False

    def terminate(signum: int, frame: object) -> None:
        nonlocal signalled
        signalled = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if not signalled:  # once signalled, SIGTERM stays ignored while the process ends
            signal.signal(signal.SIGTERM, previous)
    if signalled:  # the body ended without the handler's exit: it was raised where Python ignores it
        raise SystemExit(128 + signal.SIGTERM)


def yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"


def archive_path(run_dir: Path) -> Path:
    path = run_dir / "archive.sqlite" if run_dir.is_dir() else run_dir
    if not path.exists():
        raise fail(f"no archive at {path}: give a run directory (holding archive.sqlite) or an archive file")
    return path


def open_archive(run_dir: Path, readonly: bool = True):
    """The archive of a run directory (or an archive file), read-only unless asked; a clean error if
    there is none or it cannot be opened."""
    from spade_rl.archive import Archive, ArchiveError

    try:
        return Archive(archive_path(run_dir), readonly=readonly)
    except ArchiveError as exc:
        raise fail(str(exc)) from None


def read_env(spec: str) -> str:
    """The source of an environment file, or of a named environment (a reference or a held-out family)."""
    from spade_rl.envs.sources import NAMED, named_list, reference_entry

    path = Path(spec)
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read {spec}: {exc}") from None
    if spec in NAMED:
        return reference_entry(spec).source
    raise fail(f"{spec} is neither a file nor a named environment ({named_list()})")
