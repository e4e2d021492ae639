"""Attack: patch ``json.dumps`` in the worker so that the answer to ``reset`` is a well-framed, valid
JSON document nested 50,000 arrays deep (100 kB, far under the frame cap and under the
cap on the number of values).

The pool decodes every answer in the trusted process; decoding this one exceeds the host's recursion
limit. It should be answered as ``protocol_error``; it must never raise in the host.
"""

import json


class NestedEnv:
    def __init__(self, max_turns=5, depth=50_000):
        self.depth = depth

    def reset(self, seed=None):
        real_dumps = json.dumps
        nested = "[" * self.depth + "]" * self.depth

        def forged_dumps(obj, *args, **kwargs):
            if type(obj) is dict and "id" in obj and "ok" in obj:
                return '{"ok":true,"id":%s,"value":%s,"output":""}' % (real_dumps(obj["id"]), nested)
            return real_dumps(obj, *args, **kwargs)

        json.dumps = forged_dumps
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
