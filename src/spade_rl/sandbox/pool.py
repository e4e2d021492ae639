"""A pool of persistent, hardened worker processes that run environment code.

Usage::

    with SandboxPool(SandboxConfig()) as pool:
        opened = pool.open(source, kwargs={"max_turns": 10})
        if opened.ok:
            env = opened.value                      # an EnvHandle
            first = env.reset(seed=0)               # CallResult; first.value == [obs, info]
            result = env.step(r"\\boxed{50}")        # CallResult; result.value == [obs, r, term, trunc, info]
            env.close()

Every call returns a ``CallResult`` with a ``Status``; nothing an environment does raises in the
caller. Each worker is bound to one source for its whole life and may hold many instances of its
class (one per episode), so that the plays of one environment share a warm worker while different
environments never share an interpreter. A timeout, crash, memory exhaustion, oversized or
malformed answer kills the worker's whole process group; its other episodes then answer
``worker_lost``. A worker whose environment raised, or that created ``episodes_per_worker``
instances, is retired once its episodes close. ``call_many`` runs calls on many workers at once.

The pool is not thread-safe by design beyond a lock that serialises its public methods.
"""

from __future__ import annotations

import atexit
import enum
import hashlib
import itertools
import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spade_rl.sandbox import protocol
from spade_rl.sandbox.config import SandboxConfig

log = logging.getLogger(__name__)


class Status(enum.StrEnum):
    OK = "ok"
    EXCEPTION = "exception"  # the environment raised (or broke the contract while loading)
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # the worker died (signal, exit)
    MEMORY = "memory"
    OUTPUT_TOO_LARGE = "output_too_large"
    PROTOCOL_ERROR = "protocol_error"  # the answer was not a well-formed frame for this request
    WORKER_LOST = "worker_lost"  # another episode on the same worker made it be killed


# The reason codes a worker may report for a source it could not load (``spade_rl.envs.loader``).
LOADER_REASONS = frozenset({"syntax_error", "no_env_class", "multiple_env_classes"})

# Statuses after which the worker is killed and replaced.
FATAL = frozenset(
    {
        Status.TIMEOUT,
        Status.CRASHED,
        Status.MEMORY,
        Status.OUTPUT_TOO_LARGE,
        Status.PROTOCOL_ERROR,
        Status.WORKER_LOST,
    }
)


@dataclass(frozen=True)
class CallResult:
    status: Status
    value: Any = None
    reason: str = ""  # stable code for statistics: "ok", "timeout", "syntax_error", "exception", ...
    error: str = ""  # human-readable message
    error_type: str = ""  # exception class name, when the environment raised
    traceback: str = ""
    output: str = ""  # what the environment printed during the call (capped)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class SandboxUnavailable(RuntimeError):
    """A required isolation layer is missing: the pool refuses to run generated code."""


class PoolExhausted(RuntimeError):
    """Every allowed worker is busy with episodes of other environments."""


@dataclass(eq=False)
class _Worker:
    proc: subprocess.Popen
    to_fd: int
    from_fd: int
    started: float
    reader: protocol.FrameReader | None = None
    ready: bool = False
    pid: int = 0
    layers: list[dict] = field(default_factory=list)
    source_hash: str | None = None  # the source this worker is bound to (set when placed)
    loaded: bool = False  # the worker has loaded that source
    class_name: str = ""
    live: set[int] = field(default_factory=set)
    created: int = 0
    tainted: bool = False
    dead: bool = False
    death: str = ""
    # CPU accounting (see SandboxPool._idle_check): at the last check, the worker's CPU seconds and
    # the time; since then, the wall time its calls took and how many there were.
    cpu_at: float = 0.0
    checked_at: float = 0.0
    busy_s: float = 0.0
    calls: int = 0


class EnvHandle:
    """One environment instance (one episode at a time) living in a worker of the pool."""

    def __init__(self, pool: SandboxPool, worker: _Worker, instance: int, class_name: str):
        self._pool = pool
        self._worker = worker
        self.instance = instance
        self.class_name = class_name
        self.closed = False

    def reset(self, seed: int | None = None, timeout_s: float | None = None) -> CallResult:
        return self._pool.call(self, "reset", {"seed": seed}, timeout_s)

    def step(self, action: str, timeout_s: float | None = None) -> CallResult:
        return self._pool.call(self, "step", {"action": action}, timeout_s)

    def solution(self, timeout_s: float | None = None) -> CallResult:
        return self._pool.call(self, "solution", {}, timeout_s)

    def close(self) -> CallResult:
        return self._pool.close_env(self)

    @property
    def alive(self) -> bool:
        return not self.closed and not self._worker.dead

    @property
    def worker_pid(self) -> int:
        return self._worker.pid


def _source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


class SandboxPool:
    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self._workers: list[_Worker] = []
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._closed = False
        self.stats = {"spawned": 0, "killed": 0, "timeouts": 0, "crashes": 0, "calls": 0}
        self._bwrap = self._bwrap_prefix()
        self._spin_s = self.config.spin_us / 1e6
        self._unreachable: list[str] | None = None  # found when an import first fails (see _explain_import)
        finalizer = weakref.finalize(self, SandboxPool._kill_all, self._workers)
        atexit.register(finalizer)

    # --- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> SandboxPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> list[dict]:
        """Start ``pool_size`` warm workers and check their layers; returns the first one's layer
        reports. Raises ``SandboxUnavailable`` when a required layer is missing."""
        with self._lock:
            while len(self._live_workers()) < self.config.pool_size:
                self._spawn()
            for worker in self._live_workers():
                self._await_ready(worker)
            return self._live_workers()[0].layers

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._kill_all(self._workers)
            self._workers.clear()

    @staticmethod
    def _kill_all(workers: list[_Worker]) -> None:
        for worker in workers:
            if not worker.dead:
                _kill(worker)

    # --- public operations ----------------------------------------------------------------------
    def open(
        self,
        source: str,
        kwargs: dict | None = None,
        timeout_s: float | None = None,
        fresh_worker: bool = False,
        beside: EnvHandle | None = None,
    ) -> CallResult:
        """Load ``source`` (in a worker bound to it) and create one instance of its ``*Env`` class.
        On success ``value`` is an ``EnvHandle``. ``fresh_worker`` asks for a worker that has run
        nothing yet (a new interpreter: new hash seed, new global RNG state), as the determinism
        check needs; ``beside`` asks for the worker of that open handle (of the same source), so that
        several instances share one interpreter, as training's episodes do."""
        return self.open_many([(source, kwargs)], timeout_s, fresh_worker, beside)[0]

    def open_many(
        self,
        requests: list[tuple[str, dict | None]],
        timeout_s: float | None = None,
        fresh_worker: bool = False,
        beside: EnvHandle | None = None,
    ) -> list[CallResult]:
        """``open`` for many (source, kwargs) pairs; new workers start in parallel. With
        ``fresh_worker`` every request gets a worker of its own, even for the same source; with
        ``beside`` every request gets that open handle's worker."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox pool is closed")
            timeout = timeout_s or self.config.load_timeout_s
            placed: list[_Worker] = []
            if beside is not None:  # the worker of an open handle, bound to the same source
                if beside.closed or beside._worker.dead:
                    lost = _lost(beside._worker) if beside._worker.dead else _CLOSED
                    return [lost] * len(requests)
                if any(_source_hash(source) != beside._worker.source_hash for source, _ in requests):
                    raise ValueError("beside: that handle's worker is bound to another source")
                placed = [beside._worker] * len(requests)
            for source, _ in requests[len(placed) :]:
                # Fresh requests of one batch each get their own worker, never one placed just before.
                placed.append(self._place(_source_hash(source), fresh_worker, placed if fresh_worker else ()))
            for worker in _unique(placed):
                self._await_ready(worker)
            loads = {
                id(w): (w, "load", {"source": source})
                for w, (source, _) in zip(placed, requests, strict=True)
                if not w.loaded
            }
            load_failed: dict[int, CallResult] = {}
            for (worker, _, _), result in zip(
                loads.values(), self._run(list(loads.values()), timeout), strict=True
            ):
                if result.ok and isinstance(result.value, dict):
                    worker.loaded = True
                    worker.class_name = str(result.value.get("class_name", ""))
                else:
                    load_failed[id(worker)] = self._explain_import(_phase(result, "load"))
            results: list[CallResult | None] = [None] * len(requests)
            news = []
            for index, (worker, (_, kwargs)) in enumerate(zip(placed, requests, strict=True)):
                if id(worker) in load_failed:
                    results[index] = load_failed[id(worker)]
                    continue
                instance = next(self._ids)
                worker.live.add(instance)
                worker.created += 1
                news.append((index, worker, instance, kwargs))
            calls = [(w, "new", {"instance": i, "kwargs": kw or {}}) for _, w, i, kw in news]
            for (index, worker, instance, _), result in zip(news, self._run(calls, timeout), strict=True):
                if result.ok:
                    results[index] = _replace(
                        result, value=EnvHandle(self, worker, instance, worker.class_name)
                    )
                else:
                    worker.live.discard(instance)
                    results[index] = self._explain_import(_phase(result, "init"))
            for worker in _unique(placed):
                self._maybe_retire(worker)
            return results  # type: ignore[return-value]

    def call(self, env: EnvHandle, op: str, args: dict, timeout_s: float | None = None) -> CallResult:
        return self.call_many([(env, op, args)], timeout_s)[0]

    def call_many(
        self, calls: list[tuple[EnvHandle, str, dict]], timeout_s: float | None = None
    ) -> list[CallResult]:
        """Run ``(env, op, args)`` calls (op: reset, step, solution); calls on different workers
        run at the same time, calls on one worker in order, each held to its own deadline. One
        result per call, in order."""
        with self._lock:
            timeout = timeout_s or self.config.call_timeout_s
            results: list[CallResult | None] = [None] * len(calls)
            runnable = []
            for index, (env, op, args) in enumerate(calls):
                if env.closed:
                    results[index] = _CLOSED
                elif env._worker.dead:
                    results[index] = _lost(env._worker)
                else:
                    runnable.append((index, (env._worker, op, {"instance": env.instance, **args})))
            for (index, _), result in zip(
                runnable,
                self._run([c for _, c in runnable], timeout),
                strict=True,
            ):
                results[index] = result
            return results  # type: ignore[return-value]

    def close_env(self, env: EnvHandle) -> CallResult:
        with self._lock:
            if env.closed:
                return CallResult(Status.OK, reason="ok")
            env.closed = True
            worker = env._worker
            worker.live.discard(env.instance)
            if worker.dead:
                return CallResult(Status.OK, reason="ok")
            result = self._run([(worker, "close", {"instance": env.instance})], self.config.call_timeout_s)[0]
            self._maybe_retire(worker)
            return result

    def _explain_import(self, result: CallResult) -> CallResult:
        """An import that failed in a worker started by root: say which folder the worker's uid cannot
        read (a module not preloaded cannot be imported after the drop, wherever Python lives out of
        that uid's reach), instead of a bare ``ModuleNotFoundError``."""
        if result.error_type not in ("ModuleNotFoundError", "ImportError", "PermissionError"):
            return result
        if self._unreachable is None:
            from spade_rl.sandbox.doctor import sandbox_user_access

            self._unreachable = sandbox_user_access(self.config)
        if not self._unreachable:
            return result
        why = (
            f" (the sandbox worker runs as uid {self.config.unprivileged_uid}, which cannot read where this "
            f"Python's modules are: {self._unreachable[0]})"
        )
        return _replace(result, error=result.error + why)

    def layer_reports(self) -> list[dict]:
        """The layer reports of a (new, if need be) worker: what is active on this machine."""
        return self.start()

    # --- placement ------------------------------------------------------------------------------
    def _live_workers(self) -> list[_Worker]:
        return [w for w in self._workers if not w.dead]

    def _place(self, digest: str, fresh: bool = False, taken: Sequence[_Worker] = ()) -> _Worker:
        live = self._live_workers()
        bound = [
            w
            for w in live
            if w.source_hash == digest
            and not w.tainted
            and w.created < self.config.episodes_per_worker
            and not (fresh and (w.loaded or w in taken))
        ]
        free = [w for w in live if w.source_hash is None]
        best = min(bound, key=lambda w: len(w.live), default=None)
        # Spread the episodes of one environment over idle warm workers before stacking them.
        if best is not None and (not best.live or not free):
            return self._claim(best, digest)
        if free:
            return self._claim(free[0], digest)
        if len(live) < self.config.max_workers:
            return self._claim(self._spawn(), digest)
        idle = [w for w in live if not w.live]
        if idle:
            _kill(idle[0])
            self.stats["killed"] += 1
            self._workers.remove(idle[0])
            return self._claim(self._spawn(), digest)
        if best is not None:
            return self._claim(best, digest)
        raise PoolExhausted(
            f"all {self.config.max_workers} workers (sandbox max_workers) hold open episodes of other "
            "environments; close episodes or raise max_workers"
        )

    @staticmethod
    def _claim(worker: _Worker, digest: str) -> _Worker:
        # Reserve the worker for this source now, so that later requests of a batch see it.
        worker.source_hash = digest
        return worker

    def _maybe_retire(self, worker: _Worker) -> None:
        if worker.dead or worker.live:
            return
        worn = worker.tainted or worker.created >= self.config.episodes_per_worker
        surplus = len(self._live_workers()) > self.config.pool_size
        if worn or surplus:
            _kill(worker)
            self.stats["killed"] += 1
            self._workers.remove(worker)
            if len(self._live_workers()) < self.config.pool_size and not self._closed:
                self._spawn()  # a warm replacement, started now and awaited when first used

    # --- workers ----------------------------------------------------------------------------------
    def _settings(self) -> dict:
        c = self.config
        return {
            "layers": c.layers,
            "memory_bytes": c.memory_bytes,
            "cpu_seconds": c.cpu_seconds,
            "open_files": c.open_files,
            "uid": c.unprivileged_uid,
            "gid": c.unprivileged_gid,
            "parent_pid": None if self._bwrap else os.getpid(),
            "preload": list(c.preload),
            "recursion_limit": c.recursion_limit,
            "max_message_bytes": c.max_message_bytes,
            "max_captured_output": c.max_captured_output,
            "spin_us": c.spin_us,
        }

    def _bwrap_prefix(self) -> list[str]:
        mode = self.config.mode("bwrap")
        if mode == "off":
            return []
        from spade_rl.sandbox.doctor import bwrap_status

        ok, detail = bwrap_status()
        if not ok:
            if mode == "required":
                raise SandboxUnavailable(f"the required sandbox layer 'bwrap' is unavailable: {detail}")
            log.info("bubblewrap layer skipped: %s", detail)
            return []
        return bwrap_command()

    def _spawn(self) -> _Worker:
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        bootstrap = (
            f"import sys; sys.path.insert(0, {package_parent!r}); "
            "from spade_rl.sandbox.worker import main; main()"
        )
        cmd = [*self._bwrap, sys.executable, "-I", "-c", bootstrap, json.dumps(self._settings())]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # nothing of the parent's environment
            start_new_session=True,  # its own process group, killed as a whole
            close_fds=True,
        )
        worker = _Worker(proc, proc.stdin.fileno(), proc.stdout.fileno(), time.monotonic())
        os.set_blocking(worker.to_fd, False)  # requests are written with a deadline (see _send)
        worker.reader = protocol.FrameReader(worker.from_fd, self.config.max_message_bytes)
        self._workers.append(worker)
        self.stats["spawned"] += 1
        return worker

    def _await_ready(self, worker: _Worker) -> None:
        if worker.ready or worker.dead:
            return
        deadline = worker.started + self.config.start_timeout_s
        try:
            hello = worker.reader.read(deadline)
        except (protocol.Deadline, protocol.PeerClosed, protocol.FrameTooLarge, ValueError) as exc:
            _kill(worker)
            self._workers.remove(worker)
            raise SandboxUnavailable(
                f"a sandbox worker failed to start: {type(exc).__name__} {exc}"
            ) from None
        worker.layers = hello.get("layers", [])
        worker.pid = hello.get("pid", 0)
        missing = [
            f"{r['name']} ({r['detail']})"
            for r in worker.layers
            if self.config.mode(r["name"]) == "required" and not (r["active"] or r["not_needed"])
        ]
        if hello.get("error"):
            _kill(worker)
            self._workers.remove(worker)
            raise SandboxUnavailable(f"a sandbox worker failed to start:\n{hello['error']}")
        if missing or not hello.get("ready"):
            _kill(worker)
            self._workers.remove(worker)
            raise SandboxUnavailable(
                "refusing to run generated code: required sandbox layer(s) unavailable: "
                + "; ".join(missing or ["worker refused"])
                + ". Run `spade-rl doctor` for details, or set the layer to 'optional' or 'off' in the "
                "sandbox configuration if you accept the risk."
            )
        worker.ready = True

    # --- the exchange -----------------------------------------------------------------------------
    def _run(self, calls: list[tuple[_Worker, str, dict]], timeout: float) -> list[CallResult]:
        """Send each call to its worker, one at a time per worker, and collect the answers. Every
        worker is read as its data arrives, and each call is held to its own deadline (``timeout``
        after it was sent): a worker that sends half an answer and stalls delays nobody else, and
        data that arrived before a deadline is read before that deadline is judged."""
        self.stats["calls"] += len(calls)
        if len(calls) == 1:  # the common case of one step: no poller to build
            worker, op, args = calls[0]
            if worker.dead:
                return [_lost(worker)]
            start = time.monotonic()
            rid = next(self._ids)
            failed = self._idle_check(worker, start) or self._send(
                worker, {"op": op, "id": rid, **args}, start, start + timeout
            )
            if failed is not None:
                return [failed]
            try:
                answer = worker.reader.read(start + timeout, self._spin_s)
            except Exception as exc:  # noqa: BLE001 - each kind of failure becomes a typed result
                return [self._read_failure(worker, op, start, start + timeout, exc)]
            return [self._judge(worker, op, rid, start, answer)]
        results: list[CallResult | None] = [None] * len(calls)
        queues: dict[int, list[int]] = {}
        for index, (worker, _, _) in enumerate(calls):
            queues.setdefault(id(worker), []).append(index)
        in_flight: dict[int, tuple[int, int, float, float]] = {}  # fd -> (call index, id, start, deadline)
        poller = select.poll()

        def send_next(queue: list[int]) -> None:
            while queue:
                index = queue.pop(0)
                worker, op, args = calls[index]
                if worker.dead:
                    results[index] = _lost(worker)
                    continue
                start = time.monotonic()
                rid = next(self._ids)
                deadline = start + timeout
                failed = self._idle_check(worker, start) or self._send(
                    worker, {"op": op, "id": rid, **args}, start, deadline
                )
                if failed is not None:
                    results[index] = failed
                    continue
                in_flight[worker.from_fd] = (index, rid, start, deadline)
                poller.register(worker.from_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
                return

        def settle(fd: int, result: CallResult) -> None:
            index = in_flight.pop(fd)[0]
            poller.unregister(fd)
            results[index] = result
            send_next(by_fd[fd])

        by_fd = {}
        for queue in queues.values():
            worker = calls[queue[0]][0]
            by_fd[worker.from_fd] = queue
            send_next(queue)
        while in_flight:
            now = time.monotonic()
            wait_ms = max(0.0, min(d for *_, d in in_flight.values()) - now) * 1000.0
            for fd, _ in poller.poll(wait_ms):  # read every worker that has data, as it comes
                index, rid, start, deadline = in_flight[fd]
                worker, op, _ = calls[index]
                try:
                    worker.reader.fill()
                    answer = worker.reader.take()
                except Exception as exc:  # noqa: BLE001 - each kind of failure becomes a typed result
                    settle(fd, self._read_failure(worker, op, start, deadline, exc))
                    continue
                if answer is not None:
                    settle(fd, self._judge(worker, op, rid, start, answer))
            now = time.monotonic()
            for fd in [fd for fd, (*_, deadline) in in_flight.items() if now >= deadline]:
                index, rid, start, deadline = in_flight[fd]
                worker, op, _ = calls[index]
                try:  # what arrived in time counts, however late it is read
                    worker.reader.drain()
                    answer = worker.reader.take()
                except Exception as exc:  # noqa: BLE001
                    settle(fd, self._read_failure(worker, op, start, deadline, exc))
                    continue
                if answer is None:
                    settle(fd, self._read_failure(worker, op, start, deadline, protocol.Deadline()))
                else:
                    settle(fd, self._judge(worker, op, rid, start, answer))
        return results  # type: ignore[return-value]

    def _idle_check(self, worker: _Worker, now: float) -> CallResult | None:
        """A failure (the worker is killed) when the worker used CPU between calls: at most once a
        second per worker, its CPU time since the last check, less the wall time of its calls and
        their short spins, must stay under ``IDLE_CPU_SHARE`` of the idle time (plus a little). An
        honest worker sleeps between calls; timers and threads are denied, so one that computes then
        has rewritten its own loop. (Not under bubblewrap: the worker is in another pid namespace.)"""
        if self._bwrap or now - worker.checked_at < IDLE_CHECK_S:
            return None
        cpu = _cpu_seconds(worker.proc.pid)
        if cpu is None:
            return None
        first = worker.checked_at == 0.0
        idle = now - worker.checked_at - worker.busy_s
        used = cpu - worker.cpu_at - worker.busy_s - worker.calls * self._spin_s
        worker.cpu_at, worker.checked_at, worker.busy_s, worker.calls = cpu, now, 0.0, 0
        if first or used <= IDLE_CPU_GRACE_S + IDLE_CPU_SHARE * idle:
            return None
        return self._fail(
            worker,
            Status.PROTOCOL_ERROR,
            "protocol_error",
            now,
            f"the worker used {used:.2f} s of CPU between calls, in {idle:.2f} s without a request: "
            "a worker computes only while it answers",
        )

    def _send(self, worker: _Worker, request: dict, start: float, deadline: float) -> CallResult | None:
        """Write a request; a failure result when the worker is gone or stopped reading in time."""
        try:
            protocol.write_frame(worker.to_fd, request, deadline)
        except protocol.Deadline:
            self.stats["timeouts"] += 1
            return self._fail(worker, Status.TIMEOUT, "timeout", start, "the worker stopped reading requests")
        except OSError:
            return self._fail(worker, Status.CRASHED, "crashed", start, _exit_text(worker))
        return None

    def _read_failure(
        self, worker: _Worker, op: str, start: float, deadline: float, exc: Exception
    ) -> CallResult:
        """The result of a failed read: the worker is killed, whatever went wrong."""
        if isinstance(exc, protocol.Deadline):
            self.stats["timeouts"] += 1
            return self._fail(
                worker,
                Status.TIMEOUT,
                "timeout",
                start,
                f"{op} did not answer within {deadline - start:.3g} s",
            )
        if isinstance(exc, (protocol.PeerClosed, OSError)):
            return self._fail(worker, Status.CRASHED, "crashed", start, _exit_text(worker))
        if isinstance(exc, protocol.FrameTooLarge):  # TooManyValues too
            return self._fail(worker, Status.OUTPUT_TOO_LARGE, "output_too_large", start, str(exc))
        if isinstance(exc, protocol.ValueOutOfBounds):  # a whole frame was read: the stream is intact
            worker.tainted = True
            return CallResult(
                Status.EXCEPTION,
                None,
                "unserializable",
                f"the value is outside what the protocol carries: {exc}",
                "ValueOutOfBounds",
                elapsed_s=time.monotonic() - start,
            )
        if isinstance(exc, (ValueError, RecursionError, MemoryError)):
            return self._fail(worker, Status.PROTOCOL_ERROR, "protocol_error", start, f"not JSON: {exc}")
        raise exc  # a bug of ours, not something the worker did

    def _judge(self, worker: _Worker, op: str, rid: int, start: float, answer: Any) -> CallResult:
        """The result of a decoded answer, every field checked: only the pool's own reason codes
        and bounded text come out."""
        elapsed = time.monotonic() - start
        worker.busy_s += elapsed
        worker.calls += 1
        if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool) or answer.get("id") != rid:
            return self._fail(
                worker,
                Status.PROTOCOL_ERROR,
                "protocol_error",
                start,
                "the answer is not a well-formed reply to this request",
            )
        if worker.reader.pending:
            return self._fail(
                worker, Status.PROTOCOL_ERROR, "protocol_error", start, "the worker sent more than one answer"
            )
        # The worker caps printed output, but it runs hostile code: cap again here.
        output = answer.get("output") if isinstance(answer.get("output"), str) else ""
        output = output[: self.config.max_captured_output]
        if answer["ok"]:
            return CallResult(Status.OK, answer.get("value"), "ok", output=output, elapsed_s=elapsed)
        kind = answer.get("kind")
        message = str(answer.get("message", ""))[:4000]
        if kind == "memory":
            return self._fail(worker, Status.MEMORY, "memory", start, message)
        if kind == "too_large":
            return self._fail(worker, Status.OUTPUT_TOO_LARGE, "output_too_large", start, message)
        if kind not in ("exception", "contract", "unserializable"):
            return self._fail(
                worker, Status.PROTOCOL_ERROR, "protocol_error", start, f"unknown kind {kind!r}"
            )
        worker.tainted = True
        # Only the loader's own codes pass as they are: environment code shares the worker's
        # interpreter and can raise a ContractViolation of its own with any reason it likes.
        reason = answer.get("reason") if kind == "contract" else kind
        if kind == "contract" and (op != "load" or reason not in LOADER_REASONS):
            reason = "exception"
        return CallResult(
            Status.EXCEPTION,
            None,
            reason,
            message,
            str(answer.get("type", ""))[:128],
            str(answer.get("traceback", ""))[:4000],
            output,
            elapsed,
        )

    def _fail(
        self, worker: _Worker, status: Status, reason: str, start: float, error: str = ""
    ) -> CallResult:
        if not worker.dead:
            _kill(worker)
            self.stats["killed"] += 1
        worker.death = f"{reason}: {error}" if error else reason
        if status is Status.CRASHED:
            self.stats["crashes"] += 1
        if worker in self._workers:
            self._workers.remove(worker)
        return CallResult(status, None, reason, error or reason, elapsed_s=time.monotonic() - start)


IDLE_CHECK_S = 1.0  # how often (at most) a worker's CPU time is checked, when it is sent a call
IDLE_CPU_SHARE = 0.25  # the share of its idle time a worker may spend on the CPU (an honest one: 0)
IDLE_CPU_GRACE_S = 0.1  # plus this much: clock ticks, the end of an answer, the start of a read
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of a process, from ``/proc``; None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


_CLOSED = CallResult(Status.EXCEPTION, reason="closed", error="the environment is closed")


def _replace(result: CallResult, **changes: Any) -> CallResult:
    from dataclasses import replace

    return replace(result, **changes)


def _phase(result: CallResult, phase: str) -> CallResult:
    """Name the phase of ``open`` in which the environment raised: ``load_raised`` (the module
    body) or ``init_raised`` (the constructor)."""
    if result.status is Status.EXCEPTION and result.reason in ("exception", "unserializable"):
        return _replace(result, reason=f"{phase}_raised")
    return result


def _unique(workers: list[_Worker]) -> list[_Worker]:
    return list({id(w): w for w in workers}.values())


def _lost(worker: _Worker) -> CallResult:
    return CallResult(
        Status.WORKER_LOST,
        None,
        "worker_lost",
        f"the worker holding this episode was killed ({worker.death})",
    )


def _kill(worker: _Worker) -> None:
    """Kill the worker's whole process group and reap it."""
    worker.dead = True
    try:
        os.killpg(worker.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (worker.proc.stdin, worker.proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
    try:
        worker.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("sandbox worker %s did not die after SIGKILL", worker.proc.pid)


def _exit_text(worker: _Worker) -> str:
    try:
        code = worker.proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return "the worker closed its pipe"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return f"the worker was killed by {name}"
    return f"the worker exited with status {code}"


def bwrap_command() -> list[str]:
    """The bubblewrap prefix: new namespaces (no network), read-only root, private /tmp and /proc.

    As root, no user namespace is made (inside one, uid 65534 would map back to root outside);
    bwrap keeps only CAP_SETUID/CAP_SETGID, which the worker's own uid drop then clears. As an
    ordinary user, bwrap makes a user namespace and the worker has nothing to drop. The package and
    the interpreter are bound again after the private /tmp, in case they live under /tmp."""
    path = shutil.which("bwrap") or "bwrap"
    if os.geteuid() == 0:
        namespaces = [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
        caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        namespaces = ["--unshare-all"]
        caps = ["--cap-drop", "ALL"]
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    keep = sorted(
        {package_parent, sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    )
    rebinds = [arg for p in keep if p.startswith("/tmp") for arg in ("--ro-bind", p, p)]
    return [
        path,
        "--die-with-parent",
        *namespaces,
        *caps,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        *rebinds,
        "--",
    ]


def unreachable(path: str, uid: int, gid: int) -> str:
    """Why ``uid`` (with group ``gid`` and no others) cannot read ``path``, or '' when it can: every
    folder above it must let it enter, the path itself let it read (and enter, for a folder)."""
    try:
        real = Path(os.path.realpath(path))
        chain = [*reversed(real.parents), real]
        for place in chain:
            st = place.stat()
            shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
            bits = (st.st_mode >> shift) & 0o7
            is_dir = stat.S_ISDIR(st.st_mode)
            need = 0o1 if place != real else (0o5 if is_dir else 0o4)
            if bits & need != need:
                fix = f"chmod o+x {place}" if place != real or is_dir else f"chmod o+r {place}"
                return (
                    f"{place} is mode {stat.filemode(st.st_mode)}, owned by uid {st.st_uid}: uid {uid} "
                    f"cannot {'enter' if need == 0o1 else 'read'} it (run `{fix}`, or use a Python "
                    f"installed where uid {uid} can read it, or add the module to sandbox preload)"
                )
    except OSError as exc:
        return f"{path}: {exc}"
    return ""


def unreachable_interpreter(uid: int, gid: int) -> list[str]:
    """What of the interpreter, its packages and spade_rl a worker dropped to ``uid`` cannot read: the
    modules there can be imported only if a worker loads them before the drop (``preload``)."""
    from spade_rl.sandbox.hardening import read_only_paths

    found = []
    for path in read_only_paths():
        if path.startswith(("/usr/", "/lib")):
            continue  # system folders: readable by everyone
        why = unreachable(path, uid, gid)
        if why and why not in found:
            found.append(why)
    return found
