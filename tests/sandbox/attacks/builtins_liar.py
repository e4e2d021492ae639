"""Attack: patch ``builtins.isinstance``, ``builtins.type`` and ``json.dumps`` in the module body so
that every type check in the worker passes and anything serialises, then answer ``reset`` with bytes
and a set. Stopped by the host, which checks the decoded JSON in its own process: the values arrive
as strings and the contract check says ``reset_bad_type``."""

import builtins
import json

_real_isinstance = isinstance
_real_type = type
_real_dumps = json.dumps


def _lying_isinstance(obj, classes):
    return True


def _lying_type(*args):
    if len(args) == 1:
        return str  # "everything is a str"
    return _real_type(*args)


def _lying_dumps(obj, *args, **kwargs):
    # The encoder itself needs the truth (it dispatches on isinstance) for the lies to get out.
    builtins.isinstance = _real_isinstance
    try:
        return _real_dumps(obj, *args, default=repr, **kwargs)  # what is not JSON goes out as its repr
    finally:
        builtins.isinstance = _lying_isinstance


builtins.isinstance = _lying_isinstance
builtins.type = _lying_type
json.dumps = _lying_dumps


class LiarEnv:
    def reset(self, seed=None):
        return b"bytes, not a str", {"a", "set", "not", "a", "dict"}

    def step(self, action):
        return 1, "1.0", 1, 0, []

    def solution(self):
        return 42
