"""The run directory of a self-play run: what is written where, and how a resumed run finds its place.

    rundir = RunDirectory.create(path, config)       # a new run (refused where a run already is)
    rundir = RunDirectory.open(path)                 # resume: the last checkpoint decides
    rundir.append_metrics(metrics)                   # one line per iteration, fsync'd
    rundir.checkpoint(i, learner.save)               # checkpoints/iter-NNNN/, whole or not at all
    done = rundir.restore(learner.load)              # after a crash: iteration done, later lines dropped

Files: ``config.json`` (the resolved configuration), ``warmup.json`` (the designer's warm-up, when there
is one), ``archive.sqlite`` (the archive: :mod:`spade_rl.archive`), ``metrics.jsonl`` (one line per
iteration), ``transcripts.jsonl`` (sampled episodes), ``eval/iter-NNNN.json`` (in-loop evaluations) and
``checkpoints/iter-NNNN/`` (``updater/``: model or adapter, optimiser, scheduler, RNG states; and
``state.json``: the iteration), and while a run designs and plays with ``train.offload_optimizer``,
``optimizer-state.bin`` (the optimiser's moments between two updates; removed at the next update and
when the run ends). The metrics line of an iteration is written before its checkpoint: on
resume, everything after the last checkpoint (metrics and transcript lines, evaluations, the archive's
records) is dropped and that iteration runs again.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spade_rl.loop.config import ConfigError, RunConfig, save_config

KEEP_CHECKPOINTS = 2


class RunDirectory:
    """The files of one run in ``path`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, path: Path, config: RunConfig) -> RunDirectory:
        """A new run in ``path`` (made if missing): refused where a run already is."""
        rundir = cls(path)
        rundir.path.mkdir(parents=True, exist_ok=True)
        if rundir.metrics_path.exists() or rundir.checkpoints.exists():
            raise ConfigError(
                f"{rundir.path} already holds a run; continue it with --resume, or pick a new folder"
            )
        save_config(config, rundir.path / "config.json")
        return rundir

    @classmethod
    def open(cls, path: Path) -> RunDirectory:
        """The directory of a run to resume."""
        rundir = cls(path)
        rundir.path.mkdir(parents=True, exist_ok=True)
        return rundir

    # --- where things are ----------------------------------------------------------------------------
    @property
    def archive_path(self) -> Path:
        return self.path / "archive.sqlite"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def transcripts_path(self) -> Path:
        return self.path / "transcripts.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def parked_optimizer_path(self) -> Path:
        """Where the optimiser's state waits between updates (train.offload_optimizer)."""
        return self.path / "optimizer-state.bin"

    def eval_path(self, iteration: int) -> Path:
        return self.path / "eval" / f"iter-{iteration:04d}.json"

    def checkpoint_path(self, iteration: int) -> Path:
        return self.checkpoints / f"iter-{iteration:04d}"

    # --- writing -------------------------------------------------------------------------------------
    def write_warmup(self, summary: dict) -> None:
        (self.path / "warmup.json").write_text(json.dumps(summary, indent=2) + "\n")

    def append_metrics(self, metrics: dict) -> None:
        """One iteration's metrics line (non-finite numbers as null), on disk before this returns."""
        with open(self.metrics_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(_finite(metrics)) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def append_transcripts(
        self, iteration: int, episodes: Sequence[Any], count: int, rng: random.Random
    ) -> None:
        """``count`` episodes drawn with ``rng`` from those played in ``iteration`` (their ``spec.tag`` is
        ``(env_id, use_hint)``)."""
        picked = rng.sample(list(episodes), min(count, len(episodes)))
        with open(self.transcripts_path, "a", encoding="utf-8") as out:
            for e in picked:
                line = {
                    "iteration": iteration,
                    "env_id": e.spec.tag[0],
                    "hint": e.spec.use_hint,
                    "return": e.return_,
                    "stop_reason": e.stop_reason,
                    "error": e.error,
                    "messages": e.messages,
                }
                out.write(json.dumps(line) + "\n")

    def checkpoint(self, iteration: int, save_learner: Callable[[Path], Any]) -> None:
        """``checkpoints/iter-NNNN``, written into a temporary folder and renamed (whole or not at all);
        the last ``KEEP_CHECKPOINTS`` are kept."""
        final = self.checkpoint_path(iteration)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_learner(tmp / "updater")
        (tmp / "state.json").write_text(json.dumps({"iteration": iteration, "time": time.time()}))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in self._checkpoints()[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)

    def has_checkpoint(self, iteration: int) -> bool:
        return self.checkpoint_path(iteration).exists()

    # --- resuming ------------------------------------------------------------------------------------
    def restore(self, load_learner: Callable[[Path], Any]) -> int:
        """The last iteration of the latest checkpoint (0: none), its learner state loaded with
        ``load_learner``; metrics and transcript lines and evaluations of later iterations are removed
        (the archive's own records are the caller's: ``Archive.discard_after``)."""
        done = 0
        checkpoints = self._checkpoints()
        if checkpoints:
            latest = checkpoints[-1]
            done = json.loads((latest / "state.json").read_text())["iteration"]
            load_learner(latest / "updater")
        for path in (self.metrics_path, self.transcripts_path):
            if path.exists():
                lines = [line for line in path.read_text().splitlines() if line.strip()]
                path.write_text(
                    "".join(line + "\n" for line in lines if json.loads(line)["iteration"] <= done)
                )
        for path in (self.path / "eval").glob("iter-*.json*"):
            number = path.name[len("iter-") :].split(".")[0]
            if path.name.endswith(".tmp") or not number.isdigit() or int(number) > done:
                path.unlink()  # the evaluation of an iteration that runs again (or half a file)
        return done

    def _checkpoints(self) -> list[Path]:
        return sorted(p for p in self.checkpoints.glob("iter-*") if not p.name.endswith(".tmp"))


def _finite(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
