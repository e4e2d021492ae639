"""The Ray executor: one sandbox pool in each of several Ray actors, spread over a cluster's nodes.

    executor = RayExecutor(ExecutorConfig(kind="ray", address="auto", num_actors=8), SandboxConfig())
    executor.start()                                    # places the actors; each starts its pool
    reports = executor.validate_many([(source, hint), ...], ValidationSettings())
    episodes = run_episodes(policy, executor, specs, RolloutConfig())
    executor.actors()                                   # where each actor runs, what it holds
    executor.close()

The driver keeps the policy and the archive; only environment code runs on the actors, each in its
own ``Sandbox`` with every hardening layer, exactly as it would run locally.

- **Validation** goes one source at a time to each free actor (the battery runs whole on one actor,
  which then takes the next source), so it scales with the number of actors. A judge, when
  configured, runs here on the driver after the battery passed.
- **Rollouts**: ``open_many`` routes each new environment instance to the actor holding the fewest,
  and the instance stays there for its whole episode (sticky); ``call_many`` then sends each actor
  one batch per turn, and the actors step their episodes at the same time.

Failures. An actor is lost when Ray reports it dead (its node died, its process was killed) or when
it does not answer within the sandbox's deadlines plus ``actor_timeout_s``. Only its in-flight work
is lost: a validation or an opening is run again on another actor (up to ``retries`` times), while
a running episode, whose state lived in the lost actor, answers ``worker_lost`` and ends as an
environment error with the reason. A lost actor is replaced by a new one when the cluster has room
for it; work goes on with the actors left meanwhile. ``ExecutorError`` is raised only when no actor
is left at all.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import ray

from spade_rl.design.validate import ValidationReport, ValidationSettings
from spade_rl.executor.base import ExecutorError, ValidationRequest, apply_judge
from spade_rl.executor.config import ExecutorConfig
from spade_rl.executor.ray_actor import SandboxActor
from spade_rl.executor.ray_slots import LOST, RemoteEnv, Slot, describe, kill_actor, lost_result, route
from spade_rl.sandbox import CallResult, SandboxConfig, Status

log = logging.getLogger(__name__)

POOL_STATS = ("spawned", "killed", "timeouts", "crashes", "calls")


_ACTOR = ray.remote(SandboxActor)  # the class is sent to the nodes by reference (importable there)


class RayExecutor:
    """Validation and rollout stepping on ``config.num_actors`` Ray actors, each with a sandbox pool
    configured by ``sandbox``. Not thread-safe: one caller at a time."""

    kind = "ray"

    def __init__(self, config: ExecutorConfig, sandbox: SandboxConfig | None = None):
        self.config = config
        self.sandbox = sandbox or SandboxConfig()
        self._slots: list[Slot] = []
        self._indices = itertools.count()
        self._counters: Counter[str] = Counter()
        self._owns_ray = False
        self._started = False
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> RayExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Join the cluster (unless this process already has) and start every actor; raises
        ``ExecutorError`` when they cannot all be placed within ``start_timeout_s``, and
        ``SandboxUnavailable`` when a node lacks a required sandbox layer."""
        if self._started:
            return
        if self._closed:
            raise ExecutorError("the Ray executor is closed")
        cfg = self.config
        if not ray.is_initialized():
            if cfg.address == "local":  # a Ray of our own: it sends no usage statistics out
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            try:
                ray.init(address=cfg.address, log_to_driver=False, logging_level=logging.WARNING)
            except ConnectionError as exc:
                raise ExecutorError(
                    f"cannot join a Ray cluster at executor.address={cfg.address!r}: {exc}. Start one "
                    "with `ray start --head` (then `ray start --address=HEAD:PORT` on each node), or "
                    "use address 'local' to run Ray on this machine only"
                ) from None
            self._owns_ray = True
        self._started = True
        self._slots = [self._new_slot() for _ in range(cfg.num_actors)]
        starting = {slot.ready_ref: slot for slot in self._slots}
        ready, _ = ray.wait(list(starting), num_returns=len(starting), timeout=cfg.start_timeout_s)
        try:
            for ref in ready:
                self._settle(starting[ref])
        except BaseException:
            self.close()
            raise
        up = [slot for slot in self._slots if slot.ready]
        if len(up) < cfg.num_actors:
            problems = "; ".join(sorted({s.death for s in self._slots if s.death})) or "not placed in time"
            resources = ray.cluster_resources()
            free = ray.available_resources()
            self.close()
            raise ExecutorError(
                f"{len(up)} of {cfg.num_actors} Ray sandbox actors started within {cfg.start_timeout_s} s "
                f"({problems}); each reserves {cfg.cpus_per_actor} CPU(s), and the cluster has "
                f"{resources.get('CPU', 0):g} CPU(s), {free.get('CPU', 0):g} free. Lower executor.num_actors "
                "or executor.cpus_per_actor, add nodes, or raise executor.start_timeout_s"
            )
        log.info("Ray executor: %d actors on %d node(s)", len(up), len({slot.node_id for slot in up}))

    def close(self) -> None:
        """Stop every actor (their pools kill their sandbox workers) and leave Ray if this executor
        joined it."""
        if self._closed:
            return
        self._closed = True
        alive = [slot for slot in self._slots if slot.alive]
        stops = {slot.actor.stop.remote(): slot for slot in alive if slot.ready}
        if stops:
            done, _ = ray.wait(list(stops), num_returns=len(stops), timeout=10)
            for ref in done:
                try:
                    stops[ref].stats = ray.get(ref)
                except LOST:
                    pass
        for slot in alive:
            slot.alive = False
            slot.death = slot.death or "closed"
            kill_actor(slot.actor)
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False

    @property
    def stats(self) -> dict[str, int]:
        """The actors' pool counters added up (lost actors keep their last), and the executor's own:
        ``actors_started``, ``actors_lost``, ``envs_lost`` (open environments lost with an actor),
        ``retries`` (validations and openings run again elsewhere)."""
        total: Counter[str] = Counter({name: 0 for name in POOL_STATS})
        for slot in self._slots:
            total.update(slot.stats)
        for name in ("actors_started", "actors_lost", "envs_lost", "retries"):
            total[name] = self._counters[name]
        return dict(total)

    def actors(self) -> list[dict]:
        """Every actor this executor started, as last seen: index, node, pid, state, open
        environments, validations in flight. Only reads (safe to call while another thread waits)."""
        return [
            {
                "index": s.index,
                "node_id": s.node_id,
                "pid": s.pid,
                "state": "ready" if s.ready and s.alive else "starting" if s.alive else "lost",
                "death": s.death,
                "open_envs": s.live,
                "validations_in_flight": s.busy,
                "sandbox_calls": s.stats.get("calls", 0),
            }
            for s in self._slots
        ]

    def doctor(self) -> list[dict]:
        """``spade_rl.sandbox.doctor``'s layer table and self-check, run inside every live actor."""
        live = self._await_live()
        results = self._gather([(slot, slot.actor.doctor.remote(), 120.0) for slot in live])
        return [value if value is not None else {"error": why} for value, why in results]

    # --- validation -----------------------------------------------------------------------------------
    def validate_many(
        self, requests: Sequence[ValidationRequest], settings: ValidationSettings
    ) -> list[ValidationReport]:
        """The validation battery on every (source, hint), one per free actor at a time; reports in order."""
        remote_settings = replace(settings, judge=None) if settings.judge is not None else settings
        budget = (
            settings.total_timeout_s
            + (settings.max_turns + 4) * settings.call_timeout_s
            + self.sandbox.start_timeout_s
            + self.config.actor_timeout_s
        )
        reports: list[ValidationReport | None] = [None] * len(requests)
        losses = [0] * len(requests)
        queue = list(range(len(requests)))
        running: dict[Any, tuple[int, Slot, float]] = {}  # ref -> (request, actor, deadline)
        try:
            while queue or running:
                free = [slot for slot in self._live() if not slot.busy]
                if queue and not free and not running:
                    free = self._await_live()
                while queue and free:
                    index, slot = queue.pop(0), free.pop(0)
                    source, hint = requests[index]
                    ref = slot.actor.validate.remote(source, hint, remote_settings)
                    running[ref] = (index, slot, time.monotonic() + budget)
                    slot.busy += 1
                if not running:
                    continue
                wait = max(0.0, min(d for *_, d in running.values()) - time.monotonic())
                done, _ = ray.wait(list(running), num_returns=1, timeout=wait)
                now = time.monotonic()
                expired = [
                    ref for ref, (*_, deadline) in running.items() if ref not in done and deadline <= now
                ]
                for ref in [*done, *expired]:
                    index, slot, _ = running.pop(ref)
                    slot.busy -= 1
                    if ref in done:
                        try:
                            reports[index], slot.stats = ray.get(ref)
                            continue
                        except LOST as exc:
                            why = self._lose(slot, describe(exc))
                    else:
                        why = self._lose(slot, f"it did not answer within {budget:.0f} s")
                    losses[index] += 1
                    if losses[index] > self.config.retries:
                        reports[index] = ValidationReport(
                            valid=False,
                            reason="worker_lost",
                            message=f"the Ray actors validating it were lost {losses[index]} times "
                            f"(last: {why})",
                        )
                    else:
                        self._counters["retries"] += 1
                        queue.insert(0, index)
                        log.info("validation %d was on a lost Ray actor; running it again elsewhere", index)
        finally:
            for _, slot, _ in running.values():  # left by an error of ours: the actors are not busy
                slot.busy -= 1
        for report, (source, hint) in zip(reports, requests, strict=True):
            apply_judge(report, source, hint, settings)
        return reports  # type: ignore[return-value]

    # --- rollouts ----------------------------------------------------------------------------------------
    def open_many(
        self,
        requests: list[tuple[str, dict | None]],
        timeout_s: float | None = None,
        fresh_worker: bool = False,
    ) -> list[CallResult]:
        """Open an instance of each (source, kwargs) on the least-loaded actors; ``value`` is a
        ``RemoteEnv`` bound to its actor for life. Openings lost with an actor are retried elsewhere."""
        timeout = timeout_s or self.sandbox.load_timeout_s
        results: list[CallResult | None] = [None] * len(requests)
        losses = [0] * len(requests)
        todo = list(range(len(requests)))
        while todo:
            live = self._await_live()
            placed: dict[int, list[int]] = {}
            slots = {slot.index: slot for slot in live}
            for index, slot in zip(todo, route([requests[i][0] for i in todo], live), strict=True):
                placed.setdefault(slot.index, []).append(index)
            jobs = [
                (
                    slots[k],
                    slots[k].actor.open_many.remote([requests[i] for i in idx], timeout, fresh_worker),
                    2 * timeout * len(idx) + self.sandbox.start_timeout_s + self.config.actor_timeout_s,
                )
                for k, idx in placed.items()
            ]
            todo = []
            for (slot, _, _), indices, (value, why) in zip(
                jobs, placed.values(), self._gather(jobs), strict=True
            ):
                if value is None:
                    for index in indices:
                        losses[index] += 1
                        if losses[index] > self.config.retries:
                            results[index] = lost_result(slot, why, "opening this environment")
                        else:
                            self._counters["retries"] += 1
                            todo.append(index)
                    continue
                opened, slot.stats = value
                for index, result in zip(indices, opened, strict=True):
                    if result.ok:
                        key, class_name = result.value
                        slot.live += 1
                        result = replace(result, value=RemoteEnv(self, slot, key, class_name))
                    results[index] = result
        return results  # type: ignore[return-value]

    def call_many(
        self, calls: list[tuple[RemoteEnv, str, dict]], timeout_s: float | None = None
    ) -> list[CallResult]:
        """Run ``(env, op, args)`` calls: one batch per actor, all actors at once. Calls on an
        environment whose actor was lost answer ``worker_lost`` (its state is gone)."""
        timeout = timeout_s or self.sandbox.call_timeout_s
        results: list[CallResult | None] = [None] * len(calls)
        by_slot: dict[int, tuple[Slot, list[int]]] = {}
        for index, (env, _, _) in enumerate(calls):
            if env.closed:
                results[index] = CallResult(
                    Status.EXCEPTION, reason="closed", error="the environment is closed"
                )
            elif not env._slot.alive:
                results[index] = lost_result(env._slot, env._slot.death, "this episode")
            else:
                by_slot.setdefault(env._slot.index, (env._slot, []))[1].append(index)
        jobs = [
            (
                slot,
                slot.actor.call_many.remote(
                    [(calls[i][0].instance, calls[i][1], calls[i][2]) for i in idx], timeout
                ),
                timeout * len(idx) + self.config.actor_timeout_s,
            )
            for slot, idx in by_slot.values()
        ]
        for (slot, indices), (value, why) in zip(by_slot.values(), self._gather(jobs), strict=True):
            if value is None:
                for index in indices:
                    results[index] = lost_result(slot, why, "this episode")
                continue
            answers, slot.stats = value
            for index, result in zip(indices, answers, strict=True):
                results[index] = result
        return results  # type: ignore[return-value]

    def close_env(self, env: RemoteEnv) -> CallResult:
        """Close an instance; the actor is told without waiting for its answer (calls from this
        driver to one actor run in the order they were sent)."""
        if env.closed:
            return CallResult(Status.OK, reason="ok")
        env.closed = True
        slot = env._slot
        if slot.alive:
            slot.live -= 1
            slot.actor.close_many.remote([env.instance])
        return CallResult(Status.OK, reason="ok")

    # --- actors -------------------------------------------------------------------------------------------
    def _new_slot(self) -> Slot:
        options: dict[str, Any] = {
            "num_cpus": self.config.cpus_per_actor,
            "max_restarts": 0,  # a restarted actor would have lost its episodes: replaced explicitly
            "max_task_retries": 0,
        }
        if self.config.spread:
            options["scheduling_strategy"] = "SPREAD"
        actor = _ACTOR.options(**options).remote(self.sandbox)
        self._counters["actors_started"] += 1
        return Slot(next(self._indices), actor, actor.ready.remote())

    def _settle(self, slot: Slot) -> None:
        """Read a started actor's ready() answer; a missing sandbox layer raises here."""
        try:
            info = ray.get(slot.ready_ref)
        except LOST as exc:
            slot.alive, slot.death = False, describe(exc)
            kill_actor(slot.actor)
            log.warning("Ray %s failed to start: %s", slot.name, slot.death)
            return
        slot.ready, slot.node_id, slot.pid = True, info["node_id"], info["pid"]

    def _poll(self) -> None:
        """Settle the actors that finished starting since the last look (replacements)."""
        starting = {slot.ready_ref: slot for slot in self._slots if slot.alive and not slot.ready}
        if starting:
            done, _ = ray.wait(list(starting), num_returns=len(starting), timeout=0)
            for ref in done:
                self._settle(starting[ref])

    def _live(self) -> list[Slot]:
        self._poll()
        return [slot for slot in self._slots if slot.alive and slot.ready]

    def _await_live(self) -> list[Slot]:
        """The live actors; when none is left, wait for a replacement to start, or give up."""
        if not self._started or self._closed:
            raise ExecutorError("the Ray executor is not running: call start() first (and not after close())")
        live = self._live()
        if live:
            return live
        starting = [slot.ready_ref for slot in self._slots if slot.alive and not slot.ready]
        if starting:
            ray.wait(starting, num_returns=1, timeout=self.config.start_timeout_s)
            live = self._live()
            if live:
                return live
        deaths = "; ".join(f"{s.name}: {s.death}" for s in self._slots if s.death)
        raise ExecutorError(
            f"no Ray sandbox actor is left and none could be started within "
            f"{self.config.start_timeout_s} s ({deaths}); the cluster has "
            f"{ray.available_resources().get('CPU', 0):g} free CPU(s)"
        )

    def _lose(self, slot: Slot, why: str) -> str:
        """Mark an actor lost (with everything open on it) and ask for a replacement."""
        if not slot.alive:
            return slot.death
        slot.alive, slot.death = False, why
        self._counters["actors_lost"] += 1
        self._counters["envs_lost"] += slot.live
        log.warning("Ray %s lost (%s); %d open environment(s) lost with it", slot.name, why, slot.live)
        kill_actor(slot.actor)
        if slot.ready and not self._closed:
            self._slots.append(self._new_slot())
        return why

    def _gather(self, jobs: list[tuple[Slot, Any, float]]) -> list[tuple[Any, str]]:
        """Wait for each (actor, ref, budget in seconds): (value, "") or (None, why the actor was lost)."""
        start = time.monotonic()
        deadline = {ref: start + budget for _, ref, budget in jobs}
        pending = {ref: slot for slot, ref, _ in jobs}
        outcome: dict[Any, tuple[Any, str]] = {}
        while pending:
            wait = max(0.0, min(deadline[ref] for ref in pending) - time.monotonic())
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=wait)
            for ref in done:
                slot = pending.pop(ref)
                try:
                    outcome[ref] = (ray.get(ref), "")
                except LOST as exc:
                    outcome[ref] = (None, self._lose(slot, describe(exc)))
            now = time.monotonic()
            for ref in [ref for ref in pending if deadline[ref] <= now]:
                slot = pending.pop(ref)
                why = f"it did not answer within {deadline[ref] - start:.0f} s"
                outcome[ref] = (None, self._lose(slot, why))
        return [outcome[ref] for _, ref, _ in jobs]
