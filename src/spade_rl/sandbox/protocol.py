"""Length-prefixed JSON messages between the pool (trusted) and a worker (untrusted).

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON. Both sides
read raw file descriptors. The trusted side never believes a length: ``read_frame`` refuses a frame
larger than ``max_bytes`` before reading its body, and gives up at a deadline.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

HEADER = struct.Struct(">I")


class FrameTooLarge(Exception):
    """The peer announced a frame larger than allowed."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"message of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class Deadline(Exception):
    """No complete frame arrived before the deadline."""


class PeerClosed(Exception):
    """The peer closed its end (it exited or crashed)."""


def encode(message: Any) -> bytes:
    """One frame for ``message``. Non-finite floats are written as NaN/Infinity (Python's JSON
    dialect) so that the trusted side can see and reject them instead of the worker failing."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    return HEADER.pack(len(body)) + body


def write_frame(fd: int, message: Any, deadline: float | None = None) -> None:
    """Write one frame. With a ``deadline``, ``fd`` must be non-blocking: a peer that stops reading
    (its pipe fills up) makes this raise ``Deadline`` instead of hanging the caller."""
    data = memoryview(encode(message))
    poller = None
    while data:
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            if deadline is None:
                raise
            if poller is None:
                poller = select.poll()
                poller.register(fd, select.POLLOUT | select.POLLERR | select.POLLHUP)
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000.0):
                raise Deadline() from None
            continue
        data = data[written:]


MAX_DEPTH = 64  # deeper values are refused: they would overflow the stack of code that recurses on them


def decode(body: bytes, max_depth: int | None = MAX_DEPTH) -> Any:
    """Decode one body; ``ValueError`` for anything that is not acceptable JSON, including values
    nested deeper than ``max_depth`` (a hostile worker can send ``[[[[...]]]]``, which would make
    ``json``, ``copy.deepcopy`` or any recursive consumer overflow the stack)."""
    try:
        value = json.loads(body.decode("utf-8", "surrogatepass"))
    except RecursionError:
        raise ValueError("the message is nested too deeply") from None
    if max_depth is not None and nesting_depth(value, max_depth) > max_depth:
        raise ValueError(f"the message is nested deeper than {max_depth} levels")
    return value


def nesting_depth(value: Any, stop_at: int) -> int:
    """How deeply lists and dicts nest in ``value`` (0 for a scalar); stops counting past ``stop_at``."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_at:
                    return deepest
            stack.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


class FrameReader:
    """Reads frames from one descriptor through a buffer, so that a small answer costs one ``read``.

    ``deadline`` is a ``time.monotonic()`` value (or None to block). Raises ``Deadline``,
    ``PeerClosed``, ``FrameTooLarge`` or ``ValueError`` (the body is not JSON).
    """

    def __init__(self, fd: int, max_bytes: int, max_depth: int | None = MAX_DEPTH):
        self.fd = fd
        self.max_bytes = max_bytes
        self.max_depth = max_depth  # None on the worker's side, which trusts what the pool sends
        self.buffer = bytearray()
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def read(self, deadline: float | None = None, spin_s: float = 0.0) -> Any:
        """Read one frame. With ``spin_s`` > 0, poll without sleeping for up to that long before
        blocking: a sleeping process takes tens of microseconds to wake, far longer than a
        trivial call takes to answer, so a short spin halves the round trip."""
        buffer = self.buffer
        spin_until = time.perf_counter() + spin_s if spin_s > 0 else 0.0
        while True:
            if len(buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(buffer)
                if size > self.max_bytes:
                    raise FrameTooLarge(size, self.max_bytes)
                end = HEADER.size + size
                if len(buffer) >= end:
                    body = bytes(buffer[HEADER.size : end])
                    del buffer[:end]
                    return decode(body, self.max_depth)
                want = end - len(buffer)
            else:
                want = HEADER.size - len(buffer)
            while spin_until and not self._poller.poll(0):
                if time.perf_counter() >= spin_until:
                    spin_until = 0.0
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._poller.poll(left * 1000.0):
                    raise Deadline()
            chunk = os.read(self.fd, max(want, 1 << 16))
            if not chunk:
                raise PeerClosed()
            buffer += chunk

    @property
    def pending(self) -> int:
        """Bytes received beyond the frames read so far (a well-behaved peer leaves none)."""
        return len(self.buffer)


def read_frame(fd: int, max_bytes: int, deadline: float | None = None) -> Any:
    """Read one frame from ``fd`` without buffering beyond it (for a one-off message)."""
    reader = FrameReader(fd, max_bytes)
    message = reader.read(deadline)
    if reader.pending:
        raise ValueError(f"{reader.pending} unexpected bytes after the frame")
    return message
