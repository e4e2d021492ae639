"""The worker's clock: environment code reads a virtual time that is the same in validation and in play.

An environment that reads the time can tell the validation battery (which answers its next call within
microseconds) from training's play (where a model writes for seconds between two turns), and be honest
only while it is validated. A worker therefore installs this clock before it reads environment code:
every clock the standard library offers environment code reads a virtual time instead of the machine's,
and every read is recorded, call by call, so that the pool can say which call read which clock.

The virtual time starts at ``EPOCH`` (wall clocks) or 0 (the others) in every worker and moves forward
by ``TICK`` at each read and by what ``time.sleep`` was asked to sleep: it depends only on what the
environment itself did, never on how long the pool took to send the next request. The validation
battery refuses an environment that reads a clock in ``reset``, ``step`` or ``solution``
(``nondeterministic``: the contract asks for the same transcript for a seed, whatever the time).

Covered (Python 3.11+): ``time.time``, ``time_ns``, ``monotonic``, ``perf_counter``, ``process_time``,
``thread_time`` (and their ``_ns`` forms), ``clock_gettime``/``_ns``, ``localtime``/``gmtime``/
``ctime``/``asctime``/``strftime`` without a time argument; ``datetime.datetime.now``/``utcnow``/
``today`` and ``datetime.date.today`` (the module's classes, here and in ``_datetime``, are subclasses
whose only change is that); ``os.times``/``posix.times``; ``resource.getrusage``'s CPU times; and
``uuid.uuid1`` (its C generator is hidden, so it reads ``time.time_ns``).

Not covered, on purpose stated: the original functions stay reachable to code that looks for them
(``type(datetime.datetime.min)``, ``gc.get_referents`` of a wrapper, ``ctypes`` calls into the C
library's ``clock_gettime``, which the kernel answers without a system call, so seccomp cannot deny
it). Environment code shares the worker's interpreter: this clock stops environments that use the
standard library's clocks as documented, not code written to find the machine's clock. Timers and
threads, the other ways to measure time between calls, are denied by the seccomp filter.
"""

from __future__ import annotations

import datetime as _datetime_module
import os
import sys
import time

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: what the wall clocks read first in every worker
TICK = 0.001  # seconds the virtual time moves forward at each read
_WALL = frozenset(
    {time.CLOCK_REALTIME, getattr(time, "CLOCK_TAI", -1), getattr(time, "CLOCK_REALTIME_COARSE", -1)}
)


class WorkerClock:
    """The virtual time of one worker, and the clocks read since the last ``take``."""

    def __init__(self) -> None:
        self.elapsed = 0.0
        self.reads: dict[str, int] = {}

    def read(self, name: str) -> float:
        """The virtual time since the worker started (seconds), after one more ``TICK``; records ``name``."""
        self.elapsed += TICK
        self.reads[name] = self.reads.get(name, 0) + 1
        return self.elapsed

    def wall(self, name: str) -> float:
        return EPOCH + self.read(name)

    def slept(self, seconds: float) -> None:
        self.elapsed += max(float(seconds), 0.0)

    def take(self) -> list[str]:
        """The names of the clocks read since the last call (sorted), and forget them."""
        names = sorted(self.reads)
        self.reads.clear()
        return names


def install(clock: WorkerClock) -> None:
    """Point every clock of the standard library listed in the module docstring at ``clock``."""
    _install_time(clock)
    _install_datetime(clock)
    _install_process_times(clock)
    sys.modules["_uuid"] = None  # uuid.uuid1 falls back to time.time_ns
    uuid = sys.modules.get("uuid")
    if uuid is not None and hasattr(uuid, "_generate_time_safe"):
        uuid._generate_time_safe = None


def _install_time(clock: WorkerClock) -> None:
    real = {
        name: getattr(time, name) for name in ("localtime", "gmtime", "ctime", "asctime", "strftime", "sleep")
    }

    def seconds(name: str, wall: bool):
        def read() -> float:
            return clock.wall(f"time.{name}") if wall else clock.read(f"time.{name}")

        def read_ns() -> int:
            return round(read() * 1e9)

        return read, read_ns

    for name, wall in (
        ("time", True),
        ("monotonic", False),
        ("perf_counter", False),
        ("process_time", False),
        ("thread_time", False),
    ):
        read, read_ns = seconds(name, wall)
        setattr(time, name, read)
        setattr(time, name + "_ns", read_ns)

    def clock_gettime(clk_id: int) -> float:
        name = f"time.clock_gettime({clk_id})"
        return clock.wall(name) if clk_id in _WALL else clock.read(name)

    def clock_gettime_ns(clk_id: int) -> int:
        return round(clock_gettime(clk_id) * 1e9)

    def at(name: str, secs):
        return clock.wall(f"time.{name}") if secs is None else secs

    def localtime(secs=None):
        return real["localtime"](at("localtime", secs))

    def gmtime(secs=None):
        return real["gmtime"](at("gmtime", secs))

    def ctime(secs=None):
        return real["ctime"](at("ctime", secs))

    def asctime(t=None):
        return real["asctime"](real["localtime"](clock.wall("time.asctime")) if t is None else t)

    def strftime(format, t=None):
        return real["strftime"](format, real["localtime"](clock.wall("time.strftime")) if t is None else t)

    def sleep(seconds):
        real["sleep"](seconds)
        clock.slept(seconds)

    time.clock_gettime, time.clock_gettime_ns = clock_gettime, clock_gettime_ns
    time.localtime, time.gmtime, time.ctime, time.asctime, time.strftime = (
        localtime,
        gmtime,
        ctime,
        asctime,
        strftime,
    )
    time.sleep = sleep


def _install_datetime(clock: WorkerClock) -> None:
    base_date, base_datetime = _datetime_module.date, _datetime_module.datetime

    class date(base_date):
        __slots__ = ()

        @classmethod
        def today(cls):
            return cls.fromtimestamp(clock.wall("datetime.date.today"))

    class datetime(base_datetime, date):
        __slots__ = ()

        @classmethod
        def now(cls, tz=None):
            return cls.fromtimestamp(clock.wall("datetime.datetime.now"), tz)

        @classmethod
        def utcnow(cls):
            seconds = clock.wall("datetime.datetime.utcnow")
            return cls.fromtimestamp(seconds, _datetime_module.UTC).replace(tzinfo=None)

        @classmethod
        def today(cls):
            return cls.fromtimestamp(clock.wall("datetime.datetime.today"))

    for cls in (date, datetime):
        cls.__module__, cls.__qualname__ = "datetime", cls.__name__
    for module_name in ("datetime", "_datetime", "_pydatetime"):
        module = sys.modules.get(module_name)
        if module is not None:
            module.date, module.datetime = date, datetime


def _install_process_times(clock: WorkerClock) -> None:
    def times():
        now = clock.read("os.times")
        return os.times_result((now, 0.0, 0.0, 0.0, now))

    os.times = times
    posix = sys.modules.get("posix")
    if posix is not None:
        posix.times = times
    resource = sys.modules.get("resource")
    if resource is not None:
        real_getrusage = resource.getrusage

        def getrusage(who):
            usage = real_getrusage(who)
            return resource.struct_rusage((clock.read("resource.getrusage"), 0.0, *tuple(usage)[2:]))

        resource.getrusage = getrusage
