"""Attack: write 1 GiB straight to file descriptors 1 and 2 with ``os.write`` (past ``print``), in
``step``, hoping they are the pipe to the host.

Stopped by the worker, which points descriptors 0-2 at /dev/null and keeps the protocol pipes on
private descriptors. A write to /dev/null succeeds silently, so the attack checks where its bytes
went and raises when fd 1 is not a pipe or a file.
"""

import os
import stat


class FdFloodEnv:
    def __init__(self, max_turns=5, megabytes=1024):
        self.megabytes = megabytes

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        chunk = b"x" * (1 << 20)
        for index in range(self.megabytes):
            os.write(1 + index % 2, chunk)
        mode = os.fstat(1).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
            raise RuntimeError(
                "fd 1 is not a pipe, socket or file (it is /dev/null): the flood reached no one"
            )
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
