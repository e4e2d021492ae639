"""Attack: connect to a TCP port on the loopback interface (the test listens there) in ``reset``.
Stopped by seccomp (``socket`` fails with EPERM) and Landlock (no TCP connect)."""

import socket


class TcpEnv:
    def __init__(self, max_turns=5, host="127.0.0.1", port=9):
        self.address = (host, port)

    def reset(self, seed=None):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(self.address)
            conn.sendall(b"pwned")
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
