"""An optimiser's state on disk between updates: the memory of the AdamW moments given to the phases that
do not need them.

    offload = StateOffload()
    offload.park(optimizer, run_dir / "optimizer-state.bin")   # written, then dropped from memory
    ...                                                          # design, play, evaluation
    offload.restore(optimizer)                                   # read back exactly, the file removed

AdamW keeps two moments per weight: on the CPU default (SmolLM2-135M, float32) 1.08 GB, twice the model,
held through the design, play and evaluation phases that never read them. Parked, they cost one write
and one read of that size per iteration (about 1-3 s on 2 cores, most of it the page cache), against
iterations of a minute or more. The bytes come back unchanged: a run with the state parked trains
exactly as one without.

Only the tensors of more than one element move (the moments; a step counter stays). The file goes where
the caller says: the run directory, not the temporary folder, which is memory itself on systems that
mount /tmp as tmpfs.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class OffloadError(RuntimeError):
    """The parked state cannot be read back (its file removed or cut short): the update cannot go on."""


def _inner(optimizer: Any) -> Any:
    """The torch optimiser itself (accelerate wraps it in an ``AcceleratedOptimizer``)."""
    return getattr(optimizer, "optimizer", optimizer)


class StateOffload:
    """Parks an optimiser's state tensors in a file and restores them; see the module doc."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._entries: list[tuple[dict, str, tuple, Any, Any]] = []

    @property
    def parked(self) -> bool:
        return self.path is not None

    def park(self, optimizer: Any, path: str | Path) -> int:
        """Write the state tensors of ``optimizer`` to ``path`` and drop them from it; returns the bytes
        written (0: nothing to park, as before the first step, or already parked). The state is left as
        it was if the write fails."""
        import torch

        if self.parked:
            return 0
        moving = []
        for state in _inner(optimizer).state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and value.numel() > 1:
                    moving.append((state, key, value))
        if not moving:
            return 0
        started = time.perf_counter()
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        written = 0
        try:
            with open(partial, "wb") as f:
                for _, _, value in moving:
                    data = value.detach().contiguous().cpu()
                    f.write(memoryview(data.view(torch.uint8).numpy()).cast("B"))
                    written += data.numel() * data.element_size()
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        self._entries = [(state, key, tuple(v.shape), v.dtype, v.device) for state, key, v in moving]
        for state, key, _ in moving:
            del state[key]
        del moving
        self.path = path
        log.debug(
            "parked %.0f MB of optimiser state in %s (%.2f s)",
            written / 1e6,
            path,
            time.perf_counter() - started,
        )
        return written

    def restore(self, optimizer: Any) -> bool:
        """Put the parked tensors back into ``optimizer`` (which must be the one parked) and remove the
        file; False when nothing was parked."""
        import torch

        if not self.parked:
            return False
        path = self.path
        started = time.perf_counter()
        restored = []
        try:
            with open(path, "rb") as f:
                for state, key, shape, dtype, device in self._entries:
                    tensor = torch.empty(shape, dtype=dtype)
                    buffer = memoryview(tensor.view(torch.uint8).numpy()).cast("B")
                    if f.readinto(buffer) != len(buffer):
                        raise OffloadError("the file ends before the state it was written from")
                    restored.append((state, key, tensor if device.type == "cpu" else tensor.to(device)))
                if f.read(1):
                    raise OffloadError("the file is longer than the state it was written from")
        except (OSError, OffloadError) as exc:
            raise OffloadError(
                f"the optimiser state parked in {path} cannot be read back ({exc}): the run cannot "
                "update from here; resume the run from its last checkpoint"
            ) from None
        for state, key, tensor in restored:
            state[key] = tensor
        self.discard()
        log.debug("restored the optimiser state from %s (%.2f s)", path, time.perf_counter() - started)
        return True

    def discard(self) -> None:
        """Forget what is parked and remove its file (the state was replaced, as by loading a checkpoint)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        self.path, self._entries = None, []
