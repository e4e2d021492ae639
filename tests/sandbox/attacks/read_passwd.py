"""Attack: read /etc/passwd in the module body and show it as the first observation. Stopped by
Landlock (only the interpreter's files are readable)."""

with open("/etc/passwd") as f:
    PASSWD = f.read()


class PasswdEnv:
    def reset(self, seed=None):
        return PASSWD, {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
