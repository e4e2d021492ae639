"""Attack: read /proc/self/environ (what the worker was started with) and return it, in ``step``.
Stopped by Landlock (no /proc); the worker's environment holds nothing of the pool's anyway."""


class SelfEnvironEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        with open("/proc/self/environ", "rb") as f:
            text = f.read().decode(errors="replace").replace("\0", "\n")
        return text, 1.0, True, False, {}

    def solution(self):
        return "anything"
