"""Where the learner's metrics go besides the loop's metrics.jsonl: TensorBoard or Weights & Biases.

    reporter = Reporter("tensorboard", "runs/r1/tensorboard", main_process=True)
    reporter.log({"train/loss": 0.3, "train/grad_norm": 1.2}, step=7)
    reporter.close()

``train.report_to``: "none" (nothing), "tensorboard" (``<output_dir>/runs``, through
``torch.utils.tensorboard``, which needs the ``tensorboard`` package) or "wandb" (``wandb.init`` with its
files under ``output_dir``; the project and run names come from wandb's own environment variables). Only
the main process of a distributed run reports. A backend that is not installed is named when the learner
is built, not at the first step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


class Reporter:
    def __init__(self, report_to: str, output_dir: str | None, main_process: bool = True) -> None:
        self.kind = report_to if main_process else "none"
        self._writer: Any = None
        if self.kind == "none":
            return
        if output_dir is None:
            raise ValueError(f"train.report_to = {report_to!r} needs train.output_dir to write into")
        if self.kind == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:
                raise ValueError(
                    "train.report_to = 'tensorboard' needs the tensorboard package (pip install tensorboard)"
                ) from error
            self._writer = SummaryWriter(log_dir=str(Path(output_dir) / "runs"))
        elif self.kind == "wandb":
            try:
                import wandb
            except ImportError as error:
                raise ValueError(
                    "train.report_to = 'wandb' needs the wandb package (pip install wandb)"
                ) from error
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            self._writer = wandb.init(dir=output_dir)
        else:
            raise ValueError(f"train.report_to {report_to!r} is not one of ['none', 'tensorboard', 'wandb']")

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._writer is None:
            return
        values = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v)}
        if self.kind == "tensorboard":
            for name, value in values.items():
                self._writer.add_scalar(name, value, step)
        else:
            self._writer.log(values, step=step)

    def close(self) -> None:
        if self._writer is not None:
            (self._writer.close if self.kind == "tensorboard" else self._writer.finish)()
            self._writer = None
