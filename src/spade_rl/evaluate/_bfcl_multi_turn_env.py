"""BFCL's simulated APIs and multi-turn checker as a sandbox runner. Never imported in the caller.

    entry = {"id": "multi_turn_base_0", "initial_config": {...}, "involved_classes": ["GorillaFileSystem"]}
    execute = {"op": "execute", "history": [[["cd", {"folder": "a"}]]], "calls": [["ls", {}]], "max_chars": 9}
    check = {"op": "check", "turns": [[[["cd", {"folder": "document"}]]], ...], "ground_truth": [[...], ...]}
    run_jobs(sandbox, MULTI_TURN_SOURCE, [Job(json.dumps(execute), {"entry": entry})], timeout_s=10)

``spade_rl.evaluate.bfcl`` reads this file as text and the sandbox loads it in a worker (see
``_sandbox_jobs.py``). Each job is one instance: ``execute`` replays the episode's earlier steps on
fresh simulated APIs (BFCL's classes, from the entry's initial state) and returns the results of the
new calls (one string each, BFCL's text for errors, cut to ``max_chars``); ``check`` runs BFCL's
``multi_turn_checker`` on every turn's steps against the ground truth (it re-executes both itself)
and returns its verdict.

Calls are turned into the text BFCL evaluates (``name(key=repr(value), ...)``, as its
``convert_to_function_call`` does for function-calling models) only when ``name`` is one of the
entry's tools and every key an identifier; values are JSON values, so their ``repr`` is a literal.
Any other call is answered with the error BFCL gives an undefined name and is never evaluated: BFCL
evaluates the text in its checker's module, where a model could otherwise call, say,
``execute_multi_turn_func_call`` with text of its choice and rewrite the checker that then judges it.
Such calls are left out of what the checker re-executes (they change no state in BFCL either).
"""

import importlib
import inspect
import itertools
import json
import keyword

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

MAX_TEXT_CHARS = 4000
MAX_RESULT_CHARS = 8000  # each call's result sent back (to the model) is cut to this, unless asked
_SESSIONS = itertools.count()


def tool_names(involved_classes):
    """The public methods of the entry's simulated API classes: the calls BFCL maps to instances."""
    names = set()
    for class_name in involved_classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        names.update(n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_"))
    return names


def call_text(name, arguments, tools):
    """``(text to evaluate, "")`` for a well-formed call of a tool, else ``("", BFCL-style error)``."""
    if not isinstance(name, str) or name not in tools:
        return "", f"Error during execution: name '{str(name)[:200]}' is not defined"
    if not isinstance(arguments, dict):
        return "", "Error during execution: the arguments are not an object"
    for key in arguments:
        if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
            return "", f"Error during execution: invalid argument name {str(key)[:200]!r}"
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})", ""


class BfclMultiTurnEnv:
    """One episode's simulated APIs for one job; ``step`` takes an ``execute`` or ``check`` request."""

    def __init__(self, entry):
        self.entry = {
            "id": str(entry["id"]),
            "initial_config": entry["initial_config"],
            "involved_classes": list(entry["involved_classes"]),
        }
        # As BFCL derives them from the entry id.
        self.category = self.entry["id"].rsplit("_", 1)[0]
        self.long_context = "long_context" in self.category or "composite" in self.category
        # BFCL keeps its instances in the checker module's globals under names built from this one;
        # a name of our own per job keeps jobs in one worker apart (close() removes them).
        self.session = f"spade_{next(_SESSIONS)}"
        self.tools = tool_names(self.entry["involved_classes"])

    def reset(self, seed=None):
        return f"BFCL simulated APIs for {self.entry['id']}: step with a request as JSON.", {}

    def step(self, action):
        request = json.loads(action)
        if request.get("op") == "execute":
            for calls in request["history"]:
                self._execute(calls)
            limit = int(request.get("max_chars", MAX_RESULT_CHARS))
            results = [_cut(r, limit) for r in self._execute(request["calls"])]
            return json.dumps(results), 0.0, False, False, {}
        if request.get("op") == "check":
            verdict = self._check(request["turns"], request["ground_truth"])
            return json.dumps(verdict), 1.0 if verdict["valid"] else 0.0, True, False, {}
        raise ValueError(f"unknown request {request.get('op')!r}; allowed: execute, check")

    def solution(self):
        return []

    def close(self):
        prefix = self.session + "_"
        module_globals = vars(multi_turn_utils)
        for name in [n for n in module_globals if n.startswith(prefix)]:
            del module_globals[name]

    def _execute(self, calls):
        results, texts, slots = [], [], []
        for name, arguments in calls:
            text, error = call_text(name, arguments, self.tools)
            if text:
                slots.append(len(results))
                texts.append(text)
            results.append(error)
        if texts:
            executed, _ = multi_turn_utils.execute_multi_turn_func_call(
                texts,
                self.entry["initial_config"],
                self.entry["involved_classes"],
                self.session,
                self.entry["id"],
                long_context=self.long_context,
                is_evaL_run=False,
            )
            for slot, result in zip(slots, executed, strict=True):
                results[slot] = result if isinstance(result, str) else str(result)
        return results

    def _check(self, turns, ground_truth):
        decoded = []
        for steps in turns:
            kept = []
            for calls in steps:
                texts = [t for t, _ in (call_text(n, a, self.tools) for n, a in calls) if t]
                if texts:  # BFCL drops steps that decode to nothing
                    kept.append(texts)
            decoded.append(kept)
        try:
            verdict = multi_turn_checker(decoded, ground_truth, dict(self.entry), self.category, self.session)
        except Exception as exc:  # noqa: BLE001 - BFCL's checker asserts on its own state; the suite makes
            # the entry an error (checker_exception), as for any checker that raised
            verdict = {
                "valid": False,
                "error_type": "checker_exception",
                "error_message": f"the checker raised {type(exc).__name__}: {exc}",
            }
        valid = isinstance(verdict, dict) and verdict.get("valid") is True
        return {
            "valid": valid,
            "error_type": str(verdict.get("error_type", "")),
            "error_message": str(verdict.get("error_message", ""))[:MAX_TEXT_CHARS],
            "details": _text({k: v for k, v in verdict.items() if k not in ("valid", "error_type")}),
        }


def _cut(text, limit):
    return text if len(text) <= limit else text[:limit] + f"[... {len(text) - limit} characters cut]"


def _text(value):
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text[:MAX_TEXT_CHARS]
