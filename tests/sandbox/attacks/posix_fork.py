"""Attack: ``import posix; posix.fork()`` in the module body, the classic way around in-process guards
that replace ``os.fork``. Stopped by seccomp (fork/clone fail with EPERM)."""

import posix

if posix.fork() == 0:
    posix._exit(0)


class PosixEnv:
    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
