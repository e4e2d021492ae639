"""``spade-rl run [--config FILE.toml] [OVERRIDES...] [--out RUN_DIR | --resume RUN_DIR]``: self-play
training, one line per iteration."""

from __future__ import annotations

from pathlib import Path

import typer

from spade_rl.cli.common import console, fail
from spade_rl.sandbox import SandboxUnavailable


def run(
    config: Path | None = typer.Option(None, "--config", "-c", help="A TOML file (see configs/)."),
    overrides: list[str] = typer.Argument(
        None, help="Overrides such as loop.iterations=5 or policy.model='path'."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="The run directory (default: runs/<time>)."),
    resume: Path | None = typer.Option(None, "--resume", help="Continue the run in this directory."),
) -> None:
    """Self-play training: design, validate, play, reward and update, iteration after iteration."""
    import time as _time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from spade_rl.corpus import CorpusError
    from spade_rl.loop.config import ConfigError
    from spade_rl.loop.run import open_run
    from spade_rl.policy import PolicyError

    if resume is not None and out is not None and resume != out:
        raise fail("give either --resume RUN_DIR or --out RUN_DIR, not both")
    run_dir = resume or out or Path("runs") / _time.strftime("%Y%m%d-%H%M%S")
    from spade_rl.loop.distributed import is_follower, run_follower_from_cli

    if is_follower():  # a non-main process of `accelerate launch`: it only trains its share
        try:
            run_follower_from_cli(config, list(overrides or []), run_dir, resume is not None)
        except (ConfigError, PolicyError) as exc:
            raise fail(str(exc)) from None
        return
    try:
        with console.status("starting: model, sandbox, archive"):
            selfplay = open_run(config, list(overrides or []), run_dir, resume is not None)
    except (ConfigError, CorpusError, PolicyError) as exc:
        raise fail(str(exc)) from None
    except SandboxUnavailable as exc:
        raise fail(str(exc)) from None
    total = selfplay.config.loop.iterations
    console.print(f"run directory: {run_dir}  (iterations {selfplay.next_iteration}..{total})")
    with (
        selfplay,
        Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console) as bar,
    ):
        task = bar.add_task("self-play", total=total, completed=selfplay.next_iteration - 1)
        for metrics in selfplay.iterations():
            bar.console.print(_iteration_line(metrics))
            bar.advance(task)
    console.print(f"done: {run_dir / 'metrics.jsonl'}")


def _iteration_line(m: dict) -> str:
    def fmt(key: str, spec: str = ".2f") -> str:
        value = m.get(key)
        return "-" if value is None else format(value, spec)

    # the gaming gauge (designer/gauge.py): won designs a gate refuses on revalidation, of those won
    won = m.get("designer/won_designs")
    gamed = f"  gamed {m.get('designer/gaming_refused', 0):.0f}/{won:.0f}" if won is not None else ""

    return (
        f"iter {m['iteration']:>3}  valid {fmt('designer/valid_rate')}  win {fmt('agent/win_rate')}"
        f"  win+hint {fmt('agent/win_rate_hint')}  regret {fmt('regret/mean')}"
        f"  frontier {fmt('frontier/fraction')}{gamed}"
        f"  loss {fmt('train/loss', '.4g')}  {fmt('time/iteration_s', '.0f')} s"
    )
