"""Attack: connect to a UNIX socket (a path the test listens on) in ``reset``. Stopped by seccomp
(every ``socket`` fails with EPERM) and Landlock (no access to the path)."""

import socket


class UnixEnv:
    def __init__(self, max_turns=5, path="/tmp/spade-attack-default.sock"):
        self.path = path

    def reset(self, seed=None):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            conn.sendall(b"pwned")
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
