"""Giving freed memory back to the system between the phases of an iteration, and measuring each phase's.

glibc's allocator keeps what a process frees for its next allocations. An iteration frees gigabytes at
each phase change (the prefix cache before the update, the update's activations after it) in pieces of
every size, so that the memory it retains is scattered and a later, differently shaped phase allocates
more on top of it: the peak resident size grows with every phase that came before. ``malloc_trim``
hands whole free pages back (glibc 2.8 and later trim inside the heap, not only at its top). On the CPU
default, trimming at the phase boundaries lowered the play phase's peak from 3436 to 2748 MiB in the
first iteration (measured). Elsewhere (musl, macOS, Windows) this does nothing.

The phases' sizes are the host's (resident set) and, where this process uses a CUDA GPU, the GPU's:
the most memory torch's allocator held for tensors during the phase (``torch.cuda.max_memory_allocated``
after ``reset_peak_memory_stats`` at the phase's start, on the current device). Memory another engine
holds (vLLM's cache in process, the servers) and the allocator's cached, unused blocks are not in it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None


def release_unused_memory() -> None:
    """Return the allocator's free pages to the system (glibc); a no-op where there is no malloc_trim."""
    trim = _malloc_trim()
    if trim is None:
        return
    started = time.perf_counter()
    trim(0)
    log.debug("malloc_trim: %.3f s", time.perf_counter() - started)


# --- how much memory each phase takes ------------------------------------------------------------------
_STATM = Path("/proc/self/statm")


def resident_mib() -> float | None:
    """This process's resident size now, in MiB (Linux's /proc/self/statm); None where it cannot be read."""
    try:
        pages = int(_STATM.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_resident_mib() -> float | None:
    """The largest resident size this process has had so far, in MiB (what ``/usr/bin/time -v`` reports as
    its maximum resident set size at the end); None where the system does not say (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


class PhasePeak:
    """The largest resident size of this process during a ``with`` block, sampled every ``interval``
    seconds by a daemon thread (and at the block's start and end); ``peak_mib`` after it, None where the
    resident size cannot be read. Reading /proc costs microseconds, and the thread sleeps in between (it
    needs the interpreter lock only for the read; torch releases it in its kernels), so a phase's time is
    not changed by it. A peak shorter than ``interval`` can be missed: the process's own peak so far is
    :func:`peak_resident_mib`.

        with PhasePeak() as play:
            ...
        metrics["memory/play_peak_mib"] = play.peak_mib
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        now = resident_mib()
        if now is not None and (self.peak_mib is None or now > self.peak_mib):
            self.peak_mib = now

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PhasePeak:
        self._stop.clear()
        self.peak_mib = None  # this block's peak, not an earlier one's
        self._sample()
        if self.peak_mib is not None:
            thread = threading.Thread(target=self._watch, name="spade-rl-phase-peak", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to be had (a process limit): the ends are still read
                log.debug("no sampling thread (%s): the phase's peak is read at its start and end", exc)
            else:
                self._thread = thread
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample()


def _cuda() -> object | None:
    """``torch.cuda`` where this process has imported torch and a CUDA GPU is available; None otherwise
    (torch is not imported here: a process that never loaded it holds no GPU memory through it)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return cuda if cuda is not None and cuda.is_available() else None
    except RuntimeError:  # a broken driver: nothing to measure
        return None


class GPUPeak:
    """The most GPU memory torch's allocator held for tensors during a ``with`` block, in MiB, on the
    current CUDA device: ``peak_mib`` after it, None without a CUDA GPU. The allocator's peak is reset at
    the block's start, so blocks measured one after another each get their own."""

    def __init__(self) -> None:
        self.peak_mib: float | None = None
        self._cuda: object | None = None

    def __enter__(self) -> GPUPeak:
        self.peak_mib = None
        self._cuda = _cuda()
        if self._cuda is not None:
            self._cuda.reset_peak_memory_stats()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda is not None:
            self.peak_mib = self._cuda.max_memory_allocated() / 2**20  # type: ignore[attr-defined]


class PhaseMeter:
    """The seconds and the peak memory of named phases: ``with meter("play"): ...`` records
    ``time/play_s``, ``memory/play_peak_mib`` (the host's resident size, when it can be read) and
    ``memory/play_gpu_peak_mib`` (where a CUDA GPU is in use: :class:`GPUPeak`) in ``meter.metrics``.
    Phases are measured one after another, not nested (each resets the GPU's peak at its start)."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        with PhasePeak() as peak, GPUPeak() as gpu:
            yield
        self.metrics[f"time/{name}_s"] = time.perf_counter() - started
        if peak.peak_mib is not None:
            self.metrics[f"memory/{name}_peak_mib"] = peak.peak_mib
        if gpu.peak_mib is not None:
            self.metrics[f"memory/{name}_gpu_peak_mib"] = gpu.peak_mib

    def process(self) -> dict[str, float]:
        """The process's peak resident size so far and its size now: ``memory/peak_mib`` and
        ``memory/resident_mib``."""
        resident = resident_mib()  # first: the peak read after it is at least as high
        now = {"memory/peak_mib": peak_resident_mib(), "memory/resident_mib": resident}
        return {name: mib for name, mib in now.items() if mib is not None}
