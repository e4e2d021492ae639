"""Framing between pool and worker: the trusted side never trusts a length or a body."""

from __future__ import annotations

import math
import os
import struct
import time

import pytest

from spade_rl.sandbox import protocol


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_round_trip_and_buffering(pipe):
    r, w = pipe
    reader = protocol.FrameReader(r, 1 << 20)
    os.write(w, protocol.encode({"a": [1, "é", None]}) + protocol.encode("second"))
    assert reader.read(time.monotonic() + 1) == {"a": [1, "é", None]}
    assert reader.pending > 0
    assert reader.read(time.monotonic() + 1) == "second"
    assert reader.pending == 0


def test_non_finite_numbers_cross_as_values(pipe):
    r, w = pipe
    os.write(w, protocol.encode([math.nan, math.inf]))
    value = protocol.FrameReader(r, 1 << 20).read(time.monotonic() + 1)
    assert math.isnan(value[0]) and value[1] == math.inf


def test_announced_size_over_limit_is_refused_before_reading(pipe):
    r, w = pipe
    os.write(w, struct.pack(">I", 10_000_000))
    with pytest.raises(protocol.FrameTooLarge):
        protocol.FrameReader(r, 1000).read(time.monotonic() + 1)


def test_deadline_on_partial_frame(pipe):
    r, w = pipe
    os.write(w, struct.pack(">I", 100) + b"{")
    with pytest.raises(protocol.Deadline):
        protocol.FrameReader(r, 1000).read(time.monotonic() + 0.05, spin_s=0.01)


def test_peer_closed(pipe):
    r, w = pipe
    os.write(w, b"\x00\x00")
    os.close(w)
    with pytest.raises(protocol.PeerClosed):
        protocol.FrameReader(r, 1000).read(time.monotonic() + 1)


def test_garbage_body_is_value_error(pipe):
    r, w = pipe
    os.write(w, struct.pack(">I", 3) + b"\xff{x")
    with pytest.raises(ValueError):
        protocol.FrameReader(r, 1000).read(time.monotonic() + 1)


def test_read_frame_refuses_trailing_bytes(pipe):
    r, w = pipe
    os.write(w, protocol.encode(1) + b"extra")
    with pytest.raises(ValueError, match="unexpected bytes"):
        protocol.read_frame(r, 1000, time.monotonic() + 1)


def test_deep_nesting_is_refused_on_the_trusted_side(pipe):
    r, w = pipe
    deep = "[" * 65 + "]" * 65
    os.write(w, struct.pack(">I", len(deep)) + deep.encode())
    with pytest.raises(ValueError, match="nested deeper"):
        protocol.FrameReader(r, 1 << 20).read(time.monotonic() + 1)
    assert protocol.decode(b'{"a": [[1], {"b": []}]}', max_depth=4) == {"a": [[1], {"b": []}]}
    with pytest.raises(ValueError, match="nested deeper than 3"):
        protocol.decode(b'{"a": [[1], {"b": []}]}', max_depth=3)
    assert protocol.decode(b"5", max_depth=0) == 5


def test_write_with_deadline_to_a_full_pipe(pipe):
    _, w = pipe
    os.set_blocking(w, False)
    with pytest.raises(protocol.Deadline):
        protocol.write_frame(w, "x" * 2_000_000, time.monotonic() + 0.2)  # nobody reads: the pipe fills
