"""Attack: open /proc/self/mem for writing in ``reset`` (a way to patch code past any guard, and a
door to the rest of /proc). Stopped by Landlock (no /proc)."""


class MemEnv:
    def reset(self, seed=None):
        with open("/proc/self/mem", "r+b") as mem:
            mem.seek(0)
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
