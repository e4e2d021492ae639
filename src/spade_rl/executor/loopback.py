"""Moved to :mod:`spade_rl.testing.loopback_cluster` (a test double); this alias keeps
``bench/scale.py`` and the README's ``spade_rl.executor.loopback.LoopbackCluster`` working until they
import it from there."""

from spade_rl.testing.loopback_cluster import LoopbackCluster

__all__ = ["LoopbackCluster"]
