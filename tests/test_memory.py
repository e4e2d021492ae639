"""Measuring memory by phase (spade_rl.memory): what the iteration's metrics memory/* are made of."""

from __future__ import annotations

import mmap
import sys
import threading
import time

import pytest

from spade_rl import memory


def slack(mib: float) -> float:
    """How far a sampled resident size may exceed the kernel's own peak: its counters are per-CPU
    approximations (a fraction of a MiB on 2 cores, more on many)."""
    return max(16.0, 0.01 * mib)


linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")


@linux
def test_a_phase_peak_sees_memory_held_only_inside_the_block():
    # An anonymous mapping of its own, written page by page and unmapped when closed: the allocator
    # may keep a freed bytearray's pages (it did once in CI, 85% into the suite), munmap cannot
    size = 256 * 2**20
    before = memory.resident_mib()
    with memory.PhasePeak(interval=0.01) as peak:
        block = mmap.mmap(-1, size)
        for offset in range(0, size, mmap.PAGESIZE):
            block[offset] = 1  # every page touched, so resident
        time.sleep(0.05)
        block.close()
    after = memory.resident_mib()
    assert before is not None and after is not None and peak.peak_mib is not None
    assert peak.peak_mib >= before + 200  # seen while it was held, though freed before the block ended
    assert after < peak.peak_mib - 200
    # the process's own peak is at least as high (the kernel's counters are approximate: a little slack)
    assert memory.peak_resident_mib() >= peak.peak_mib - slack(peak.peak_mib)


def test_a_phase_meter_records_time_and_peak_of_each_named_phase():
    meter = memory.PhaseMeter()
    with meter("play"):
        time.sleep(0.02)
    with meter("update"):
        pass
    assert meter.metrics["time/play_s"] >= 0.02 and meter.metrics["time/update_s"] >= 0
    if sys.platform.startswith("linux"):
        assert meter.metrics["memory/play_peak_mib"] > 0 and meter.metrics["memory/update_peak_mib"] > 0
        process = meter.process()
        resident = process["memory/resident_mib"]
        assert process["memory/peak_mib"] >= resident - slack(resident) and resident > 0


def test_where_the_resident_size_cannot_be_read_nothing_is_recorded(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "_STATM", tmp_path / "missing")
    assert memory.resident_mib() is None
    meter = memory.PhaseMeter()
    with meter("play"):
        pass
    assert set(meter.metrics) == {"time/play_s"}  # a time, and no made-up size
    assert "memory/resident_mib" not in meter.process()


def test_a_phase_that_raises_stops_its_sampler(monkeypatch):
    with pytest.raises(RuntimeError, match="boom"), memory.PhasePeak(interval=0.01) as peak:
        raise RuntimeError("boom")
    assert peak._thread is None and not any(t.name == "spade-rl-phase-peak" for t in threading.enumerate())


def test_a_phase_peak_can_be_used_again():
    peak = memory.PhasePeak(interval=0.01)
    for _ in range(2):
        with peak:
            time.sleep(0.03)
            assert peak._thread is not None and peak._thread.is_alive()


class _StandInCUDA:
    """torch.cuda's allocator statistics, for a machine without a GPU: ``allocate`` moves the peak."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.resets = 0

    def allocate(self, mib: int) -> None:
        self.now += mib * 2**20
        self.peak = max(self.peak, self.now)

    def reset_peak_memory_stats(self) -> None:
        self.peak, self.resets = self.now, self.resets + 1

    def max_memory_allocated(self) -> int:
        return self.peak


def test_each_phase_records_its_own_gpu_peak_where_cuda_is_used(monkeypatch):
    # Never run on a GPU here: torch.cuda's functions are stand-ins (issue 38, item 4).
    torch = pytest.importorskip("torch")
    cuda = _StandInCUDA()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", cuda.reset_peak_memory_stats)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", cuda.max_memory_allocated)
    meter = memory.PhaseMeter()
    with meter("play"):
        cuda.allocate(300)
        cuda.allocate(-200)  # freed before the phase ended: its peak still counts
    with meter("update"):
        cuda.allocate(50)
    assert meter.metrics["memory/play_gpu_peak_mib"] == 300
    assert meter.metrics["memory/update_gpu_peak_mib"] == 150  # its own peak, not the play's 300
    assert cuda.resets == 2


def test_without_cuda_no_gpu_figure_is_recorded(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    meter = memory.PhaseMeter()
    with meter("play"):
        pass
    assert not any("gpu" in key for key in meter.metrics)
    monkeypatch.delitem(sys.modules, "torch")  # a process that never imported torch: not imported here
    with meter("update"):
        pass
    assert "torch" not in sys.modules and not any("gpu" in key for key in meter.metrics)
