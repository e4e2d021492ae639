"""The ``spade-rl`` command line (``python -m spade_rl`` is the same): one module per command.

    spade-rl doctor [--json]                      which isolation layers this machine has; a live self-check
    spade-rl design --out RUN_DIR [--n N] ...     design environments, validate and archive them
    spade-rl play ENV [--human] [--hint] ...      watch a model (or yourself) play an environment
    spade-rl run [--config FILE] [OVERRIDES...]   self-play training
    spade-rl config [--config FILE] [OVERRIDES...] [--explain]   the resolved configuration (JSON)
    spade-rl report RUN_DIR [--check]             a self-contained HTML report of a run, with PNG figures
    spade-rl eval [--model M] [--suite S ...]     held-out evaluation (JSON result); --compare A.json B.json
    spade-rl experiment FILE.toml [--check]       arms (baselines, ablations) compared on held-out suites
    spade-rl envs list|show|export|import|validate    reference and archived environments, validation

Each command parses its options, builds the library's config and objects, calls the library and
prints; what the commands share (the console, the error exit, archives) is in ``cli.common``.
"""

from __future__ import annotations

import logging

import typer

# The modules, not their functions: `spade_rl.cli.run` stays the module (to read, or to monkeypatch in).
from spade_rl.cli import config, design, doctor, envs, eval, experiment, play, report, run
from spade_rl.cli.common import console

__all__ = ["app", "console", "main"]

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="SPADE: self-play in executable environments."
)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


# The order of `spade-rl --help`.
app.command()(doctor.doctor)
app.command()(design.design)
app.command()(play.play)
app.command()(run.run)
app.command()(config.config)
app.command()(report.report)
app.command("eval")(eval.eval_)
app.command()(experiment.experiment)
app.add_typer(envs.envs_app, name="envs")
