"""BFCL's AST checker as a sandbox runner: ``step`` checks one case. Never imported in the caller.

    job = Job(action=json.dumps({"functions": [...], "calls": [{"name": {...}}], "possible_answer": [...],
                                 "language": "python", "category": "simple_python"}))
    run_jobs(sandbox, AST_SOURCE, [job], timeout_s=10)  # step -> (verdict JSON, 1.0 if valid else 0.0, ...)

``spade_rl.evaluate.bfcl`` reads this file as text and the sandbox loads it in a worker (see
``_sandbox_jobs.py``): the checker compares values that came from the model (deep nesting, odd types,
anything that makes it raise or loop), so it runs where that cannot hurt the caller.

``bfcl_eval.constants.model_config`` is replaced by a stub before the checker is imported: the real
module imports every vendor SDK's handler, and the checker only asks it whether a model's function
names have dots turned into underscores (never, here: tool names reach the model unchanged).
"""

import json
import sys
import types


class _NoUnderscoreToDot:
    underscore_to_dot = False


class _AnyModel(dict):
    def __missing__(self, key):
        return _NoUnderscoreToDot()


_stub = types.ModuleType("bfcl_eval.constants.model_config")
_stub.MODEL_CONFIG_MAPPING = _AnyModel()
sys.modules.setdefault("bfcl_eval.constants.model_config", _stub)

from bfcl_eval.constants.enums import Language  # noqa: E402
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: E402

MODEL_NAME = "spade-rl"
MAX_ERROR_CHARS = 2000


class BfclAstCheckEnv:
    """One instance per check; ``step(case_json)`` returns the verdict as the observation."""

    def reset(self, seed=None):
        return "BFCL AST checker: step with one case as JSON.", {}

    def step(self, action):
        try:
            case = json.loads(action)
            verdict = ast_checker(
                case["functions"],
                case["calls"],
                case["possible_answer"],
                Language(case["language"]),
                case["category"],
                MODEL_NAME,
            )
        except Exception as exc:  # noqa: BLE001 - answered, not raised: the suite makes the item an error
            verdict = {
                "valid": False,
                "error": [f"the checker raised {type(exc).__name__}: {exc}"],
                "error_type": "checker_exception",
            }
        valid = isinstance(verdict, dict) and verdict.get("valid") is True
        summary = {
            "valid": valid,
            "error_type": str(verdict.get("error_type", "")),
            "error": _text(verdict.get("error", "")),
        }
        return json.dumps(summary), 1.0 if valid else 0.0, True, False, {}

    def solution(self):
        return []


def _text(value):
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text[:MAX_ERROR_CHARS]
