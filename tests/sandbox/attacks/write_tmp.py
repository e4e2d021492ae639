"""Attack: create a file under /tmp (or the path given) in ``__init__``. Stopped by Landlock (no
writes anywhere); the test uses a world-writable folder, so file permissions alone would allow it."""


class WriteTmpEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-write"):
        with open(target, "w") as f:
            f.write("pwned")

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
