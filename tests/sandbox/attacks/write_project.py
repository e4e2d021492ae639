"""Attack: write a file into the project checkout (the path the test passes) in ``step``. Stopped by
Landlock (the package is read-only, the rest of the checkout is not even readable)."""


class WriteProjectEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-project"):
        self.target = target

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        with open(self.target, "w") as f:
            f.write("import os  # planted by an environment\n")
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
