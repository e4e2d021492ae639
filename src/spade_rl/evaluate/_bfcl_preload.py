"""Imported by the BFCL suite's sandbox workers before they harden themselves (``SandboxConfig.preload``).

A worker started by root drops to an unprivileged uid before it reads any code; where the interpreter
lives out of that user's reach (pyenv or a virtual environment under a 0700 ``/root``), nothing can be
imported after the drop. The runner sources (``_bfcl_ast_env.py``, ``_bfcl_multi_turn_env.py``) and the
simulated APIs they load by name therefore find every BFCL module they need already in memory. The
stub of ``bfcl_eval.constants.model_config`` is the one the AST runner installs (the real module imports
every vendor SDK); it goes in first, so that importing the checker does not pull the SDKs.
"""

import importlib
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

from bfcl_eval.constants.enums import Language  # noqa: E402, F401
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING  # noqa: E402
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: E402, F401
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils  # noqa: E402, F401
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker  # noqa: E402, F401

UNAVAILABLE = {}  # simulated API modules that cannot be imported here (a dependency bfcl-eval lacks)
for _module in sorted(set(CLASS_FILE_PATH_MAPPING.values())):
    try:
        importlib.import_module(_module)
    except ImportError as exc:
        UNAVAILABLE[_module] = str(exc)
