"""The seccomp filter a worker installs on itself before it reads any environment code.

An allow-list (default deny, as Chromium's and nsjail's filters are built): only the system calls
that the worker's Python needs to compute and to answer over the pipes it already holds are allowed,
some of them only with the arguments it needs; every other call fails with ``EPERM``, so that a
kernel with new system calls denies them too. (``clone3`` fails with ``ENOSYS``, so that the C
library falls back to ``clone``, which is denied: Python then reports "can't start new thread".)
Failing instead of killing lets hostile code see an error and lets the validator report what
happened. System calls of a foreign architecture (i386 ``int 0x80``, x32) kill the process.

The list was found by tracing workers through the reference environments, the designs, the
evaluation suites and the sandbox tests (``tools/trace_worker_syscalls.py``), then trimmed to what
a computation needs. Among what is *not* allowed, on purpose:

- new processes and threads (``fork``, ``vfork``, ``clone``, ``clone3``, ``execve``), sockets,
  pipes, ``io_uring``, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``ptrace`` and every
  namespace, mount, key, module, clock or reboot call;
- ``prctl``: the parent-death signal (the worker dies with its pool) cannot be cleared, and nothing
  else of the process's attributes changes;
- timers and alarms (``setitimer``, ``alarm``, ``timer_create``, ``timerfd_create``): a worker uses
  no CPU between calls;
- ``setpriority``, ``sched_setaffinity``, ``sched_setscheduler``, ``ioprio_set``: the scheduling of
  other processes of the same uid (the trainer, for an ordinary user);
- System V shared memory, semaphores and message queues, ``memfd_create``: nothing outlives it;
- ``chmod``, ``chown``, ``utime*``, ``*xattr``, ``inotify``/``fanotify``, ``umask``, and ``open``
  or ``openat`` with any flag that writes or creates (Landlock refuses writes too; this holds even
  where Landlock is missing);
- ``setrlimit`` and ``prlimit64`` with a new limit, uid/gid/capability changes, ``setsid``,
  ``setpgid`` (a worker cannot leave its process group, which is how it gets killed);
- signals to any process but itself, and ``fcntl``/``ioctl`` commands other than the few below
  (``F_SETOWN``/``F_SETSIG`` would let the kernel signal another process on its behalf, ``F_NOTIFY``
  would watch directories).
"""

from __future__ import annotations

import errno
import os

# Allowed with any arguments.
ALLOWED = (
    # the pipes and files it already holds
    "read", "write", "readv", "writev", "pread64", "pwrite64", "lseek", "close", "dup", "dup2", "dup3",
    "poll", "ppoll", "select", "pselect6",
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
    # reading files (opening is below: read-only flags only; Landlock limits where)
    "stat", "fstat", "lstat", "newfstatat", "statx", "access", "faccessat", "faccessat2", "readlink",
    "readlinkat", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "statfs", "fstatfs",
    # signals it handles itself (sending is below: to itself only)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
    "rt_sigsuspend", "sigaltstack", "restart_syscall",
    # what it may know of itself and of the machine
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
    "getgroups", "getpgrp", "getpgid", "getsid", "getrlimit", "getrusage", "times", "sysinfo", "uname",
    "getpriority", "sched_getaffinity", "sched_yield", "getcpu",
    # time, randomness, locks, the end
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "getrandom", "futex", "exit", "exit_group",
)  # fmt: skip

# open/openat are allowed only without these flags: no writing, creating, truncating or appending.
_O_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND  # O_TMPFILE needs a write mode
# fcntl: duplicating, close-on-exec and status flags (os.set_blocking); nothing that signals or watches.
_FCNTL = (0, 1, 2, 3, 4, 1030)  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC
# ioctl: is it a terminal (io.open asks), bytes waiting, close-on-exec, non-blocking.
_IOCTL = (0x5401, 0x541B, 0x5451, 0x5450, 0x5421)  # TCGETS, FIONREAD, FIOCLEX, FIONCLEX, FIONBIO
# Signal-sending calls whose first argument is the target pid/tgid: allowed only towards itself.
_SELF_ONLY = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")


def available() -> tuple[bool, str]:
    """Whether the seccomp layer can be built here (libseccomp present and loadable)."""
    try:
        import pyseccomp  # noqa: F401 - imported for its side effect of loading libseccomp
    except (ImportError, OSError, RuntimeError) as exc:
        return False, f"pyseccomp/libseccomp unavailable: {exc} (install the Debian package libseccomp2)"
    return True, "libseccomp via pyseccomp"


def install() -> list[str]:
    """Install the filter on the calling process (irreversible). Returns the names it allows
    (in full or with conditions) on this architecture.

    Sets ``no_new_privs`` (libseccomp does it by default), which an unprivileged process needs.
    """
    import pyseccomp as sc

    pid = os.getpid()
    flt = sc.SyscallFilter(sc.ERRNO(errno.EPERM))  # default deny
    allowed: list[str] = []

    def rule(action: int, name: str, *args: object) -> None:
        try:
            flt.add_rule(action, name, *args)
        except (OSError, RuntimeError, ValueError):
            return  # this architecture has no such system call
        if action == sc.ALLOW and name not in allowed:
            allowed.append(name)

    for name in ALLOWED:
        rule(sc.ALLOW, name)
    rule(sc.ALLOW, "openat", sc.Arg(2, sc.MASKED_EQ, _O_WRITES, 0))
    rule(sc.ALLOW, "open", sc.Arg(1, sc.MASKED_EQ, _O_WRITES, 0))
    for command in _FCNTL:
        rule(sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, command))
    for request in _IOCTL:
        rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, request))
    for name in _SELF_ONLY:
        rule(sc.ALLOW, name, sc.Arg(0, sc.EQ, pid))
    # prlimit64(pid, resource, new_limit, old_limit): reading its own limits only.
    rule(sc.ALLOW, "prlimit64", sc.Arg(0, sc.EQ, 0), sc.Arg(2, sc.EQ, 0))
    rule(sc.ALLOW, "prlimit64", sc.Arg(0, sc.EQ, pid), sc.Arg(2, sc.EQ, 0))
    rule(sc.ERRNO(errno.ENOSYS), "clone3")
    flt.load()
    return allowed


MODE = "allow-list"  # what `spade-rl doctor` shows: every call not listed here is denied
