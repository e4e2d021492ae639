"""Landlock through ``ctypes``: restrict the calling process's own access to files, TCP and signals.

Landlock is unprivileged and stacks: once a process restricts itself it (and anything it could
start) can never regain access. What the rule set here allows:

- read (files and directories, and mapping shared libraries) beneath the given paths; nothing else
  on the filesystem: no writes, no creation or removal anywhere, no ``/proc``, no ``/tmp``;
- no TCP bind or connect (ABI 4 and later);
- no signals to processes outside the sandboxed domain and no abstract UNIX sockets outside it
  (ABI 6 and later).

File descriptors opened before ``restrict_self`` (the worker's protocol pipes) keep working.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable
from dataclasses import dataclass

# Syscall numbers are the same on every architecture that has Landlock (unified table since 5.x).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights, by the ABI that introduced them.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

_FS_ABI1 = (1 << 13) - 1
READ_ONLY = FS_READ_FILE | FS_READ_DIR


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class LandlockStatus:
    abi: int  # 0 when the kernel has no Landlock (or it is disabled)
    detail: str

    @property
    def available(self) -> bool:
        return self.abi > 0


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def probe() -> LandlockStatus:
    """The Landlock ABI version of the running kernel, without restricting anything."""
    if platform.system() != "Linux":
        return LandlockStatus(0, f"Landlock is a Linux feature; this is {platform.system()}")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    if abi < 0:
        err = ctypes.get_errno()
        why = {
            38: "the kernel was built without Landlock (ENOSYS)",
            95: "Landlock is disabled at boot (EOPNOTSUPP: add 'landlock' to the lsm= parameter)",
        }.get(err, os.strerror(err))
        return LandlockStatus(0, why)
    return LandlockStatus(int(abi), f"ABI {abi}")


def handled_fs(abi: int) -> int:
    rights = _FS_ABI1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def restrict_self(read_paths: Iterable[str], abi: int) -> list[str]:
    """Allow only reading beneath ``read_paths`` from now on; returns the features applied.

    Raises ``OSError`` when the kernel refuses; the caller treats that as "layer not active".
    """
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    fs = handled_fs(abi)
    attr = _RulesetAttr(fs, 0, 0)
    size = ctypes.sizeof(ctypes.c_uint64)  # ABI 1-3 know only handled_access_fs
    features = ["fs"]
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 2 * ctypes.sizeof(ctypes.c_uint64)
        features.append("no-tcp")
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
        features.append("scoped-signals")
    ruleset_fd = libc.syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset_fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for path in read_paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist needs no rule
            try:
                # Directories get read + list; a single file gets only read (READ_DIR on a file is EINVAL).
                is_dir = os.path.isdir(path)
                rule = _PathBeneathAttr(READ_ONLY if is_dir else FS_READ_FILE, fd)
                rc = libc.syscall(
                    ctypes.c_long(_SYS_ADD_RULE),
                    ctypes.c_int(ruleset_fd),
                    ctypes.c_int(_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                )
                if rc < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        rc = libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
        if rc < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset_fd)
    return features
