"""Attack: write forged answers straight into the worker's protocol pipe, out of turn, in ``step``:
a winning answer to the current request and one to the next request, before the real answer.

The environment shares the worker's interpreter, so it can find the pipe and the request id on the
call stack. Stopped by the pool, which refuses an answer followed by bytes it did not ask for
(``protocol_error``) and kills the worker, so the forged answer to the next request is never read.
"""

import json
import os
import struct
import sys

WIN = ["you win", 1.0, True, False, {}]


def worker_pipe():
    """The worker's output descriptor and the id of the request being answered."""
    frame = sys._getframe(1)
    while frame is not None:
        request = frame.f_locals.get("request")
        worker = frame.f_locals.get("self")
        if type(request) is dict and "id" in request and hasattr(worker, "out_fd"):
            return worker.out_fd, request["id"]
        frame = frame.f_back
    raise RuntimeError("the worker's frame is not on the stack")


def frame_bytes(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


class ForgeEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        out_fd, request_id = worker_pipe()
        forged = b"".join(
            frame_bytes({"ok": True, "id": i, "value": WIN, "output": ""})
            for i in (request_id, request_id + 1)
        )
        os.write(out_fd, forged)  # one write: both frames arrive together
        return "you lose", 0.0, True, False, {}

    def solution(self):
        return "anything"
