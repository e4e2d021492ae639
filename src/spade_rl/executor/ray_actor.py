"""What runs on the nodes for the Ray executor: one sandbox per actor, and the episodes in it.

    actor = ray.remote(SandboxActor).options(num_cpus=1).remote(SandboxConfig())
    ray.get(actor.ready.remote())                       # starts the sandbox: {"node_id", "pid", "layers"}
    results, stats = ray.get(actor.open_many.remote([(source, None)], 10.0, False))
    key, class_name = results[0].value                  # the instance, known to the driver by its key
    results, stats = ray.get(actor.call_many.remote([(key, "reset", {"seed": 0})], 5.0))

The actor process only holds the sandbox: environment code runs in the sandbox's hardened worker
processes, exactly as with the local executor (every layer applies there; ``doctor`` checks it from
inside the actor). Every answer carries the sandbox's counters, so that the driver keeps them even when
the actor is lost later. The driver side is ``spade_rl.executor.ray_executor``.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import replace

import ray

from spade_rl.design.validate import ValidationReport, ValidationSettings, validate_source
from spade_rl.sandbox import CallResult, EnvHandle, Sandbox, SandboxConfig, Status


class SandboxActor:
    """Lives in a Ray worker process: one ``Sandbox``, and the environment instances open in it,
    known to the driver by integer keys."""

    def __init__(self, config: SandboxConfig):
        self.sandbox = Sandbox(config)
        self.envs: dict[int, EnvHandle] = {}
        self.keys = itertools.count(1)

    def ready(self) -> dict:
        """Start the sandbox (raises ``SandboxUnavailable`` when a required layer is missing here)."""
        layers = self.sandbox.start()
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "layers": layers}

    def validate(self, source: str, hint: str, settings: ValidationSettings) -> tuple[ValidationReport, dict]:
        return validate_source(self.sandbox, source, settings, hint=hint), dict(self.sandbox.stats)

    def open_many(
        self, requests: list[tuple[str, dict | None]], timeout_s: float, fresh_worker: bool
    ) -> tuple[list[CallResult], dict]:
        results = []
        for result in self.sandbox.open_many(requests, timeout_s, fresh_worker):
            if result.ok:
                key = next(self.keys)
                self.envs[key] = result.value
                result = replace(result, value=(key, result.value.class_name))
            results.append(result)
        return results, dict(self.sandbox.stats)

    def call_many(
        self, calls: list[tuple[int, str, dict]], timeout_s: float
    ) -> tuple[list[CallResult], dict]:
        known = [
            (i, (self.envs[key], op, args)) for i, (key, op, args) in enumerate(calls) if key in self.envs
        ]
        results: list[CallResult] = [
            CallResult(Status.EXCEPTION, reason="closed", error="the environment is closed")
        ] * len(calls)
        for (i, _), result in zip(
            known, self.sandbox.call_many([c for _, c in known], timeout_s), strict=True
        ):
            results[i] = result
        return results, dict(self.sandbox.stats)

    def close_many(self, keys: list[int]) -> dict:
        for key in keys:
            env = self.envs.pop(key, None)
            if env is not None:
                env.close()
        return dict(self.sandbox.stats)

    def doctor(self) -> dict:
        """The sandbox's layer table and live self-check, as run inside this actor's process."""
        from spade_rl.sandbox.doctor import layer_table, self_check

        rows, error = layer_table(self.sandbox.config)
        probes = [] if error else self_check(self.sandbox.config)
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "layers": [(r.layer, r.mode, r.active, r.detail) for r in rows],
            "error": error,
            "probes": [(p.name, p.stopped, p.detail) for p in probes],
        }

    def stop(self) -> dict:
        self.envs.clear()
        self.sandbox.close()
        return dict(self.sandbox.stats)
