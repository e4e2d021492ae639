"""Length-prefixed JSON messages between the pool (trusted) and a worker (untrusted).

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON. Both sides
read raw file descriptors. The trusted side never believes a length: ``read_frame`` refuses a frame
larger than ``max_bytes`` before reading its body, and gives up at a deadline.

This is the one boundary every value from a worker crosses, so the trusted side's decoding
(``decode`` with ``checked=True``) makes each value safe for any consumer: at most ``max_objects``
values (counted in the bytes before anything is built: 47 MB of ``[[],[],...]`` would be about
1.2 GB of Python lists), nesting at most ``MAX_DEPTH`` deep, integers within ``INT_BOUND`` (SQLite
and ``float()`` raise beyond), and text that encodes as UTF-8 (a lone surrogate, which JSON can
carry as ``\\ud800``, makes tokenizers and SQLite raise later): such characters become U+FFFD.
Non-finite floats pass, so that the contract can name them (``reward_not_finite``).
"""

from __future__ import annotations

import json
import os
import re
import select
import struct
import time
from typing import Any

HEADER = struct.Struct(">I")
# Bound at import: a sandbox worker points the time module's clocks at its virtual clock
# (spade_rl.sandbox.clock) once it has imported this, and its deadlines and spin need the machine's.
_monotonic, _perf_counter = time.monotonic, time.perf_counter


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


class TooManyValues(FrameTooLarge):
    """The frame would decode into more values than allowed (a memory bomb in few bytes per value)."""

    def __init__(self, count: int, limit: int):
        Exception.__init__(self, f"message of at least {count} values exceeds the limit of {limit} values")
        self.size = count
        self.limit = limit


class ValueOutOfBounds(ValueError):
    """A well-formed message holds a value the trusted side does not accept (a huge integer)."""


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
            left = deadline - _monotonic()
            if left <= 0 or not poller.poll(left * 1000.0):
                raise Deadline() from None
            continue
        data = data[written:]


MAX_DEPTH = 64  # deeper values are refused: they would overflow the stack of code that recurses on them
MAX_OBJECTS = 100_000  # values one message may decode into (about 10 MB of Python objects at most)
INT_BOUND = 2**63 - 1  # integers beyond are refused: SQLite, float() and C extensions overflow on them

# A JSON string (the unrolled form: linear, no backtracking), to count values outside strings.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def count_bound(body: bytes) -> int:
    """An upper bound on the number of values ``body`` decodes into, found without building them:
    every value but the first follows a ``,``, a ``:``, a ``[`` or a ``{`` outside a string."""
    bare = _STRING.sub(b'""', body)
    return 1 + bare.count(b",") + bare.count(b":") + bare.count(b"[") + bare.count(b"{")


def decode(
    body: bytes, max_depth: int | None = MAX_DEPTH, max_objects: int = MAX_OBJECTS, checked: bool = True
) -> Any:
    """Decode one body. With ``checked`` (the trusted side), ``ValueError`` for anything that is not
    acceptable JSON: values nested deeper than ``max_depth`` (a hostile worker can send ``[[[[...]]]]``,
    which would make ``json``, ``copy.deepcopy`` or any recursive consumer overflow the stack),
    ``TooManyValues`` past ``max_objects``, ``ValueOutOfBounds`` for an integer beyond ``INT_BOUND``;
    text that is not valid UTF-8 is repaired (U+FFFD). Unchecked (the worker's side, reading the
    pool's requests), the body is only parsed."""
    if checked and len(body) > max_objects:  # below, there cannot be more values than bytes
        count = count_bound(body)
        if count > max_objects:
            raise TooManyValues(count, max_objects)
    try:
        value = json.loads(body.decode("utf-8", "surrogatepass"))
    except RecursionError:
        raise ValueError("the message is nested too deeply") from None
    if not checked:
        return value
    return normalise(value, MAX_DEPTH if max_depth is None else max_depth)


def normalise(value: Any, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` (decoded JSON) checked and made safe, in one pass without recursion: lists and dicts
    at most ``max_depth`` deep, integers within ``INT_BOUND``, text valid UTF-8 (lone surrogates
    replaced by U+FFFD, in dict keys too). Raises ``ValueError`` / ``ValueOutOfBounds``."""
    if type(value) is str:
        return _text(value)
    if type(value) not in (list, dict):
        _scalar(value)
        return value
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise ValueError(f"the message is nested deeper than {max_depth} levels")
        is_dict = type(item) is dict
        for key, child in list(item.items()) if is_dict else enumerate(item):
            kind = type(child)
            if kind is str:
                if not child.isascii():
                    item[key] = _text(child)
            elif kind is list or kind is dict:
                stack.append((child, depth + 1))
            else:
                _scalar(child)
        if is_dict:  # keys too, once the values are done
            for key in [k for k in item if not k.isascii() and _text(k) is not k]:
                item[_text(key)] = item.pop(key)
    return value


def _scalar(value: Any) -> None:
    if type(value) is int and not -INT_BOUND <= value <= INT_BOUND:
        raise ValueOutOfBounds(
            f"an integer of {value.bit_length()} bits; integers must lie within ±(2**63 - 1)"
        )


def _text(text: str) -> str:
    """``text`` if it encodes as UTF-8, else a copy with each lone surrogate replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


class FrameReader:
    """Reads frames from one descriptor through a buffer, so that a small answer costs one ``read``.

    ``deadline`` is a ``time.monotonic()`` value (or None to block). Raises ``Deadline``,
    ``PeerClosed``, ``FrameTooLarge`` or ``ValueError`` (the body is not acceptable JSON). Data that
    is already waiting is always read before a deadline is judged: an answer that arrived in time is
    never lost because its reader came to it late. ``fill`` and ``take`` let a caller that waits on
    many descriptors at once read each as its data arrives.
    """

    def __init__(
        self, fd: int, max_bytes: int, max_depth: int | None = MAX_DEPTH, max_objects: int = MAX_OBJECTS
    ):
        self.fd = fd
        self.max_bytes = max_bytes
        self.max_depth = max_depth  # None on the worker's side, which trusts what the pool sends
        self.max_objects = max_objects
        self.buffer = bytearray()
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def take(self) -> Any:
        """The next complete frame in the buffer, decoded, or ``None`` when none is complete yet
        (JSON ``null`` is never a frame of this protocol's peers). Raises ``FrameTooLarge`` as soon as
        a header announces too much."""
        buffer = self.buffer
        if len(buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(buffer)
        if size > self.max_bytes:
            raise FrameTooLarge(size, self.max_bytes)
        end = HEADER.size + size
        if len(buffer) < end:
            return None
        body = bytes(buffer[HEADER.size : end])
        del buffer[:end]
        return decode(body, self.max_depth, self.max_objects, checked=self.max_depth is not None)

    def fill(self) -> None:
        """One ``read`` of what is waiting (call it when the descriptor polled readable).
        Raises ``PeerClosed`` at end of file."""
        chunk = os.read(self.fd, max(self._wanted(), 1 << 16))
        if not chunk:
            raise PeerClosed()
        self.buffer += chunk

    def drain(self) -> None:
        """Read what is waiting now, without blocking (a pipe holds at most its buffer's size)."""
        while self._poller.poll(0):
            before = len(self.buffer)
            self.fill()
            if len(self.buffer) == before or self._complete():
                return

    def _complete(self) -> bool:
        if len(self.buffer) < HEADER.size:
            return False
        (size,) = HEADER.unpack_from(self.buffer)
        return size > self.max_bytes or len(self.buffer) >= HEADER.size + size

    def _wanted(self) -> int:
        if len(self.buffer) < HEADER.size:
            return HEADER.size - len(self.buffer)
        (size,) = HEADER.unpack_from(self.buffer)
        return HEADER.size + size - len(self.buffer)

    def read(self, deadline: float | None = None, spin_s: float = 0.0) -> Any:
        """Read one frame. With ``spin_s`` > 0, poll without sleeping for up to that long before
        blocking: a sleeping process takes tens of microseconds to wake, far longer than a
        trivial call takes to answer, so a short spin halves the round trip."""
        spin_until = _perf_counter() + spin_s if spin_s > 0 else 0.0
        while True:
            frame = self.take()
            if frame is not None:
                return frame
            while spin_until and not self._poller.poll(0):
                if _perf_counter() >= spin_until:
                    spin_until = 0.0
            if deadline is not None:
                left = deadline - _monotonic()
                if left <= 0:
                    self.drain()  # what arrived in time counts, however late it is read
                    frame = self.take()
                    if frame is not None:
                        return frame
                    raise Deadline()
                if not self._poller.poll(left * 1000.0):
                    continue  # the deadline passed while waiting: drain, then judge
            self.fill()

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
