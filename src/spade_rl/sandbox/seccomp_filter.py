"""The seccomp filter a worker installs on itself before it reads any environment code.

The filter allows every system call except the ones below, which fail with ``EPERM`` (``ENOSYS`` for
``clone3``, so that the C library falls back to ``clone``, which is denied). Failing instead of
killing lets hostile code see an error and lets the validator report what happened. System calls
of a foreign architecture (i386 ``int 0x80``, x32) kill the process.

Denied:
- every ``socket`` (the worker talks over pipes it already holds);
- new processes and threads: ``fork``, ``vfork``, ``clone``, ``clone3``; ``execve``, ``execveat``;
- signals to any process but itself (``kill``/``tkill``/``tgkill``/``rt_*sigqueueinfo`` with another
  pid; ``pidfd_*``);
- ``ptrace``, ``process_vm_readv/writev``, ``kcmp``;
- namespaces and mounts: ``unshare``, ``setns``, ``mount`` and its new API, ``pivot_root``,
  ``chroot``;
- ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``, key management;
- ``setsid``, ``setpgid`` (a worker cannot leave its process group, which is how it gets killed);
- ``setrlimit`` and ``prlimit64`` with a new limit; uid/gid/capability changes;
- asynchronous-I/O signal ownership (``fcntl`` F_SETOWN/F_SETSIG/F_SETOWN_EX, ``ioctl`` FIOSETOWN/
  SIOCSPGRP), which would let the kernel signal another process on the worker's behalf;
- administration: modules, kexec, reboot, swap, clock and host name changes, ``mknod``,
  ``personality``, ``syslog``, file handles, quotas.
"""

from __future__ import annotations

import errno
import os

_DENY_EPERM = (
    "fork",
    "vfork",
    "clone",
    "execve",
    "execveat",
    "pidfd_open",
    "pidfd_send_signal",
    "pidfd_getfd",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "setsid",
    "setpgid",
    "setrlimit",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "capset",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "quotactl",
    "open_by_handle_at",
    "name_to_handle_at",
    "mknod",
    "mknodat",
    "personality",
    "syslog",
    "iopl",
    "ioperm",
    "vhangup",
    "uselib",
    "socket",
)

_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902

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
    """Install the filter on the calling process (irreversible). Returns the names it denies.

    Sets ``no_new_privs`` (libseccomp does it by default), which an unprivileged process needs.
    """
    import pyseccomp as sc

    pid = os.getpid()
    flt = sc.SyscallFilter(sc.ALLOW)
    denied: list[str] = []

    def rule(action: int, name: str, *args: object) -> None:
        try:
            flt.add_rule(action, name, *args)
        except (OSError, RuntimeError, ValueError):
            return  # this architecture has no such system call
        denied.append(name)

    for name in _DENY_EPERM:
        rule(sc.ERRNO(errno.EPERM), name)
    rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for name in _SELF_ONLY:
        rule(sc.ERRNO(errno.EPERM), name, sc.Arg(0, sc.NE, pid))
    # prlimit64(pid, resource, new_limit, old_limit): reading limits is fine, setting is not.
    rule(sc.ERRNO(errno.EPERM), "prlimit64", sc.Arg(2, sc.NE, 0))
    # Signals without kill(): fcntl F_SETOWN/F_SETSIG/F_SETOWN_EX with O_ASYNC makes the kernel send
    # a chosen signal to another process when a descriptor becomes ready; ioctl FIOSETOWN and
    # SIOCSPGRP are the same through ioctl.
    for command in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX):
        rule(sc.ERRNO(errno.EPERM), "fcntl", sc.Arg(1, sc.EQ, command))
    for request in (_FIOSETOWN, _SIOCSPGRP):
        rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.EQ, request))
    flt.load()
    return denied
