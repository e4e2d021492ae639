"""Run evaluation suites on a policy: the library call behind ``spade-rl eval`` and in-loop evaluation.

    with Sandbox(SandboxConfig()) as sandbox:
        ctx = EvalContext(limit=20, seed=0, sampling=GREEDY, sandbox=sandbox,
                          options={"envs": {"episodes": 4}})
        result = run_eval(policy, ["reasoning_gym", "envs"], ctx, model="smollm2-135m")
    result.write("eval.json")
    result.suites["envs"].accuracy

The policy and the sandbox are the caller's (already loaded, kept open): the self-play loop
evaluates its current weights this way. Every suite is built (and its options checked) before any
runs, so a bad option fails at once rather than after an hour of generation.
:func:`build_available_suites` builds every registered suite whose packages are installed and says which
it skipped (``spade-rl eval`` without ``--suite``); a suite named in :func:`build_suites` must be
installed.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spade_rl import __version__
from spade_rl.evaluate.base import SUITES, EvalContext, Suite, SuiteResult, SuiteUnavailable, get_suite
from spade_rl.evaluate.results import EvalResult
from spade_rl.evaluate.sampled import run_suite
from spade_rl.policy import Policy, SamplingSettings

if TYPE_CHECKING:
    from spade_rl.evaluate.config import EvalConfig
    from spade_rl.sandbox import Sandbox

log = logging.getLogger(__name__)


def build_suites(names: Sequence[str | Suite], options: dict) -> list[Suite]:
    """The suites, built with ``options[name]``; raises ``ValueError`` for unknown suites or options,
    options given for a suite that is not run, and a suite named twice."""
    if not names:
        raise ValueError("no suite to run; name at least one")
    wanted = [n if isinstance(n, str) else n.name for n in names]
    twice = sorted({n for n in wanted if wanted.count(n) > 1})
    if twice:
        raise ValueError(f"suite(s) named more than once: {', '.join(twice)}")
    stray = sorted(set(options) - set(wanted))
    if stray:
        raise ValueError(
            f"options given for suite(s) {stray}, which are not run (running: {', '.join(wanted)})"
        )
    suites = []
    for entry in names:
        if isinstance(entry, Suite):
            suites.append(entry)
            continue
        suite_options = options.get(entry, {})
        if not isinstance(suite_options, dict):
            raise ValueError(f"options of suite {entry!r} must be a dict, got {type(suite_options).__name__}")
        suites.append(get_suite(entry, **suite_options))
    return suites


def build_available_suites(options: dict) -> tuple[list[Suite], dict[str, str]]:
    """Every registered suite whose packages are installed, built with ``options[name]``, and the
    skipped ones: name -> why (:class:`SuiteUnavailable`'s message, which says what to install).
    Raises ``ValueError`` for bad options, options given for an unknown suite or for one that is
    skipped, and when every suite is skipped."""
    unknown = sorted(set(options) - set(SUITES))
    if unknown:
        raise ValueError(f"options given for unknown suite(s) {unknown}; known suites: {', '.join(SUITES)}")
    built: list[Suite] = []
    skipped: dict[str, str] = {}
    for name in SUITES:
        suite_options = options.get(name, {})
        if not isinstance(suite_options, dict):
            raise ValueError(f"options of suite {name!r} must be a dict, got {type(suite_options).__name__}")
        try:
            built.append(get_suite(name, **suite_options))
        except SuiteUnavailable as exc:
            skipped[name] = str(exc)
    given = [name for name in skipped if name in options]
    if given:
        reasons = "; ".join(skipped[name] for name in given)
        raise ValueError(
            f"options given for suite(s) {given}, which cannot run: {reasons}. Install what is missing, "
            "or leave those options out"
        )
    if not built:
        raise ValueError("no suite can run, every one lacks a package: " + "; ".join(skipped.values()))
    return built, skipped


def run_eval(
    policy: Policy,
    suites: Sequence[str | Suite],
    ctx: EvalContext,
    *,
    model: str = "",
    backend: str = "",
    on_suite: Callable[[str, SuiteResult | None], None] | None = None,
) -> EvalResult:
    """Run ``suites`` (registry names, or suites already built) on ``policy``; ``on_suite(name, None)``
    is called as a suite starts and ``on_suite(name, result)`` when it ends. With ``ctx.samples`` > 1
    every suite is sampled (:func:`spade_rl.evaluate.sampled.run_suite`); the result's ``sampling`` is
    then that of the items' own results (greedy with ``ctx.greedy``) and ``samples`` that of the samples."""
    built = build_suites(suites, ctx.options)
    started = time.perf_counter()
    primary, samples = ctx.sampling, None
    if ctx.samples > 1:
        samples = {**_settings(ctx.sampling), "n": ctx.samples, "greedy": ctx.greedy}
        if ctx.greedy:
            primary = replace(ctx.sampling, temperature=0.0)
    result = EvalResult(
        model=model or type(policy).__name__,
        backend=backend or _backend_of(policy),
        seed=ctx.seed,
        limit=ctx.limit,
        sampling=_settings(primary),
        samples=samples,
        spade_rl_version=__version__,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        host=host_info(),
    )
    for suite in built:
        if on_suite is not None:
            on_suite(suite.name, None)
        log.info("evaluating suite %s", suite.name)
        suite_result = run_suite(suite, policy, ctx)
        result.suites[suite.name] = suite_result
        log.info("suite %s: %s in %.0f s", suite.name, suite_result.summary(), suite_result.seconds)
        if on_suite is not None:
            on_suite(suite.name, suite_result)
    result.seconds = time.perf_counter() - started
    return result


def evaluate_with_config(
    policy: Policy, sandbox: Sandbox, config: EvalConfig, *, model: str = "", backend: str = ""
) -> EvalResult:
    """``config``'s suites (the ``[eval]`` table) on ``policy``, untrusted code in ``sandbox``: greedy at
    ``config.max_new_tokens``, or ``config.samples`` samples per item at ``config.temperature``."""
    return run_eval(policy, list(config.suites), config.context(sandbox), model=model, backend=backend)


def _settings(settings: SamplingSettings) -> dict:
    """The settings as a result file holds them (tuples as lists), so that a result read back equals it."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(settings).items()}


def _backend_of(policy: Policy) -> str:
    name = type(policy).__name__
    return {
        "TransformersPolicy": "transformers",
        "OpenAIPolicy": "openai",
        "VLLMPolicy": "vllm",
        "FakePolicy": "fake",
    }.get(name, name)


def host_info() -> dict:
    """What ran the evaluation: Python, the platform, CPUs, and torch with its device when loaded."""
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count() or 0,
    }
    torch = sys.modules.get("torch")  # never imported here just to describe the host
    if torch is not None:
        info["torch"] = getattr(torch, "__version__", "?")
        try:
            if torch.cuda.is_available():
                info["device"] = torch.cuda.get_device_name(0)
        except Exception as exc:  # noqa: BLE001 - a description of the host must not fail an evaluation
            log.debug("no CUDA device name: %s", exc)
    return info
