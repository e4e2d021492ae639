"""Held-out evaluation: suites (Reasoning Gym, BFCL, HumanEval, held-out environments), result files, compare.

    spade-rl eval --suite reasoning_gym --suite envs --limit 20 --out before.json
    spade-rl eval --compare before.json after.json

    from spade_rl.evaluate import EvalContext, run_eval
    ctx = EvalContext(limit=20, seed=0, sampling=GREEDY, sandbox=sandbox)
    result = run_eval(policy, ["reasoning_gym", "envs"], ctx)

The interface every suite implements is in :mod:`spade_rl.evaluate.base`; suites are imported lazily
(their dependencies are optional), the runner in :mod:`spade_rl.evaluate.runner`, result files and
comparisons in :mod:`spade_rl.evaluate.results`.
"""

from spade_rl.evaluate.base import (
    GREEDY,
    SUITES,
    EvalContext,
    ItemResult,
    Suite,
    SuiteResult,
    SuiteUnavailable,
    extract_answer,
    get_suite,
    wilson_interval,
)

__all__ = [
    "GREEDY",
    "SUITES",
    "EvalContext",
    "ItemResult",
    "Suite",
    "SuiteResult",
    "SuiteUnavailable",
    "extract_answer",
    "get_suite",
    "wilson_interval",
]
