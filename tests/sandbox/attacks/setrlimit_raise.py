"""Attack: raise its own limits in ``reset``: the CPU soft limit up to the hard one (which the kernel
allows any process), then the address space to unlimited. Stopped by seccomp (``setrlimit`` and
``prlimit64`` with a new limit fail with EPERM, which ``resource`` raises as ValueError)."""

import resource


class LimitEnv:
    def reset(self, seed=None):
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
