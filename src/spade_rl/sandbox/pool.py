"""The sandbox: persistent, hardened worker processes that run environment code.

Usage::

    with Sandbox(SandboxConfig()) as sandbox:
        opened = sandbox.open(source, kwargs={"max_turns": 10})
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

This module places episodes on workers and runs the exchange; how a worker is launched is in
``spade_rl.sandbox.launch``, its process in ``spade_rl.sandbox.worker_process``, the checks of its
answers in ``spade_rl.sandbox.exchange``, the results in ``spade_rl.sandbox.results``.

The sandbox is not thread-safe by design beyond a lock that serialises its public methods.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import select
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from spade_rl.sandbox import protocol
from spade_rl.sandbox.config import SandboxConfig
from spade_rl.sandbox.exchange import Failure, idle_failure, judge, read_failure, send
from spade_rl.sandbox.handle import EnvHandle
from spade_rl.sandbox.launch import bwrap_prefix
from spade_rl.sandbox.results import CLOSED, CallResult, SandboxFull, SandboxUnavailable, Status, with_phase
from spade_rl.sandbox.worker_process import Worker, await_ready, kill, lost, spawn


class Sandbox:
    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self._workers: list[Worker] = []
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._closed = False
        self.stats = {"spawned": 0, "killed": 0, "timeouts": 0, "crashes": 0, "calls": 0}
        self._bwrap = bwrap_prefix(self.config)
        # The workers' view of the interpreter (``spade_rl.sandbox.view``): made by bwrap's arguments
        # (``launch.bwrap_command``), or else reported by each worker, which makes it itself.
        self._bwrap_view = "--remount-ro" in self._bwrap
        self.view: dict = (
            {"active": True, "not_needed": False, "detail": "made by bwrap"} if self._bwrap_view else {}
        )
        self._spin_s = self.config.spin_us / 1e6
        self._unreachable: list[str] | None = None  # found when an import first fails (see _explain_import)
        finalizer = weakref.finalize(self, Sandbox._kill_all, self._workers)
        atexit.register(finalizer)

    # --- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
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
    def _kill_all(workers: list[Worker]) -> None:
        for worker in workers:
            if not worker.dead:
                kill(worker)

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
                raise RuntimeError("the sandbox is closed")
            timeout = timeout_s or self.config.load_timeout_s
            placed: list[Worker] = []
            if beside is not None:  # the worker of an open handle, bound to the same source
                if beside.closed or beside._worker.dead:
                    gone = lost(beside._worker) if beside._worker.dead else CLOSED
                    return [gone] * len(requests)
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
                    load_failed[id(worker)] = self._explain_import(with_phase(result, "load"))
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
                    results[index] = replace(
                        result, value=EnvHandle(self, worker, instance, worker.class_name)
                    )
                else:
                    worker.live.discard(instance)
                    results[index] = self._explain_import(with_phase(result, "init"))
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
                    results[index] = CLOSED
                elif env._worker.dead:
                    results[index] = lost(env._worker)
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
        if self.view.get("active"):
            return result  # the worker reads the interpreter through its view: the module is missing
        if self._unreachable is None:
            from spade_rl.sandbox.doctor import sandbox_user_access

            self._unreachable = sandbox_user_access(self.config)
        if not self._unreachable:
            return result
        why = (
            f" (the sandbox worker runs as uid {self.config.unprivileged_uid}, which cannot read where this "
            f"Python's modules are: {'; '.join(self._unreachable)})"
        )
        return replace(result, error=result.error + why)

    @property
    def under_bwrap(self) -> bool:
        """Whether workers start inside bubblewrap (the ``bwrap`` layer, on and usable)."""
        return bool(self._bwrap)

    def layer_reports(self) -> list[dict]:
        """The layer reports of a (new, if need be) worker: what is active on this machine."""
        return self.start()

    # --- placement ------------------------------------------------------------------------------
    def _live_workers(self) -> list[Worker]:
        return [w for w in self._workers if not w.dead]

    def _place(self, digest: str, fresh: bool = False, taken: Sequence[Worker] = ()) -> Worker:
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
            kill(idle[0])
            self.stats["killed"] += 1
            self._workers.remove(idle[0])
            return self._claim(self._spawn(), digest)
        if best is not None:
            return self._claim(best, digest)
        raise SandboxFull(
            f"all {self.config.max_workers} workers (sandbox max_workers) hold open episodes of other "
            "environments; close episodes or raise max_workers"
        )

    @staticmethod
    def _claim(worker: Worker, digest: str) -> Worker:
        # Reserve the worker for this source now, so that later requests of a batch see it.
        worker.source_hash = digest
        return worker

    def _maybe_retire(self, worker: Worker) -> None:
        if worker.dead or worker.live:
            return
        worn = worker.tainted or worker.created >= self.config.episodes_per_worker
        surplus = len(self._live_workers()) > self.config.pool_size
        if worn or surplus:
            kill(worker)
            self.stats["killed"] += 1
            self._workers.remove(worker)
            if len(self._live_workers()) < self.config.pool_size and not self._closed:
                self._spawn()  # a warm replacement, started now and awaited when first used

    # --- workers ----------------------------------------------------------------------------------
    def _spawn(self) -> Worker:
        worker = spawn(self.config, self._bwrap)
        self._workers.append(worker)
        self.stats["spawned"] += 1
        return worker

    def _await_ready(self, worker: Worker) -> None:
        try:
            await_ready(worker, self.config)
        except SandboxUnavailable:
            self._workers.remove(worker)  # await_ready killed it
            raise
        if worker.view and not self._bwrap_view:
            self.view = worker.view

    # --- the exchange -----------------------------------------------------------------------------
    def _run(self, calls: list[tuple[Worker, str, dict]], timeout: float) -> list[CallResult]:
        """Send each call to its worker, one at a time per worker, and collect the answers. Every
        worker is read as its data arrives, and each call is held to its own deadline (``timeout``
        after it was sent): a worker that sends half an answer and stalls delays nobody else, and
        data that arrived before a deadline is read before that deadline is judged."""
        self.stats["calls"] += len(calls)
        if len(calls) == 1:  # the common case of one step: no poller to build
            worker, op, args = calls[0]
            if worker.dead:
                return [lost(worker)]
            start = time.monotonic()
            rid = next(self._ids)
            failed = self._start_call(worker, {"op": op, "id": rid, **args}, start, start + timeout)
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
                    results[index] = lost(worker)
                    continue
                start = time.monotonic()
                rid = next(self._ids)
                deadline = start + timeout
                failed = self._start_call(worker, {"op": op, "id": rid, **args}, start, deadline)
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

    def _start_call(self, worker: Worker, request: dict, start: float, deadline: float) -> CallResult | None:
        """Send a request, after the idle CPU check (not under bubblewrap: see ``idle_failure``); the
        failure result when either fails, None when the request is on its way."""
        failure = (None if self._bwrap else idle_failure(worker, start, self._spin_s)) or send(
            worker, request, deadline
        )
        return None if failure is None else self._fail(worker, failure, start)

    def _read_failure(
        self, worker: Worker, op: str, start: float, deadline: float, exc: Exception
    ) -> CallResult:
        return self._settle(worker, start, read_failure(worker, op, start, deadline, exc))

    def _judge(self, worker: Worker, op: str, rid: int, start: float, answer: Any) -> CallResult:
        outcome = judge(worker, op, rid, start, answer, self.config.max_captured_output)
        return self._settle(worker, start, outcome)

    def _fail(self, worker: Worker, failure: Failure, start: float) -> CallResult:
        """Kill ``worker`` for ``failure`` and answer the call with it."""
        if not worker.dead:
            kill(worker)
            self.stats["killed"] += 1
        error, reason = failure.error, failure.reason
        worker.death = f"{reason}: {error}" if error else reason
        if failure.status is Status.TIMEOUT:
            self.stats["timeouts"] += 1
        if failure.status is Status.CRASHED:
            self.stats["crashes"] += 1
        if worker in self._workers:
            self._workers.remove(worker)
        return CallResult(failure.status, None, reason, error or reason, elapsed_s=time.monotonic() - start)

    def _settle(self, worker: Worker, start: float, outcome: CallResult | Failure) -> CallResult:
        return self._fail(worker, outcome, start) if isinstance(outcome, Failure) else outcome


def _source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _unique(workers: list[Worker]) -> list[Worker]:
    return list({id(w): w for w in workers}.values())
