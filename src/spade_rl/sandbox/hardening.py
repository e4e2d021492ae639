"""The layers a worker applies to itself, in order, before it reads any environment code.

1. ``rlimits``: address space, CPU seconds, file size 0, open files, no core files, no processes.
2. ``uid``: a worker started as root drops every group and to an unprivileged uid/gid (root ignores
   ``RLIMIT_NPROC`` and file permissions). An ordinary user has nothing to drop: "not needed".
   After the drop the parent-death signal is set, so that a worker never outlives its pool.
3. ``landlock``: read-only access to the interpreter and the package, nothing else (no writes, no
   ``/proc``, no ``/etc``), no TCP, no signals outside the sandbox (see ``landlock.py``).
4. ``seccomp``: the system-call allow-list of ``seccomp_filter.py``.

Each function returns a ``LayerReport`` instead of raising: the worker sends all reports to the
pool, which refuses to use a worker that lacks a required layer (fail closed).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import sysconfig
from dataclasses import asdict, dataclass

from spade_rl.sandbox import landlock, seccomp_filter

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class LayerReport:
    name: str
    active: bool
    detail: str
    not_needed: bool = False  # the layer does not apply here (uid drop for an ordinary user)

    @property
    def satisfied(self) -> bool:
        return self.active or self.not_needed

    def to_json(self) -> dict:
        return asdict(self)


def apply_rlimits(memory_bytes: int, cpu_seconds: int, open_files: int) -> LayerReport:
    try:
        limits = {
            "AS": (resource.RLIMIT_AS, memory_bytes),
            "CPU": (resource.RLIMIT_CPU, cpu_seconds),
            "FSIZE": (resource.RLIMIT_FSIZE, 0),
            "NOFILE": (resource.RLIMIT_NOFILE, open_files),
            "CORE": (resource.RLIMIT_CORE, 0),
            "NPROC": (resource.RLIMIT_NPROC, 0),
        }
        for which, value in limits.values():
            _, hard = resource.getrlimit(which)
            new_hard = value if hard == resource.RLIM_INFINITY else min(value, hard)
            if which == resource.RLIMIT_CPU and hard == resource.RLIM_INFINITY:
                # SIGXCPU at the soft limit; SIGKILL a few seconds later if the code ignores it.
                new_hard = value + 5
            resource.setrlimit(which, (min(value, new_hard), new_hard))
    except (OSError, ValueError) as exc:
        return LayerReport("rlimits", False, f"setrlimit failed: {exc}")
    detail = f"AS={memory_bytes >> 20}MiB CPU={cpu_seconds}s FSIZE=0 NOFILE={open_files} CORE=0 NPROC=0"
    return LayerReport("rlimits", True, detail)


def drop_privileges(uid: int, gid: int, parent_pid: int | None) -> LayerReport:
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() != 0:
        report = LayerReport("uid", False, f"not needed: running as uid {os.geteuid()}", not_needed=True)
    else:
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError as exc:
            return LayerReport("uid", False, f"could not drop root to uid {uid}: {exc}")
        if 0 in os.getresuid() or 0 in os.getresgid():
            return LayerReport("uid", False, "still holding uid or gid 0 after the drop")
        report = LayerReport("uid", True, f"root dropped to uid {uid} gid {gid}, no groups")
    # Set after the uid change, which clears it. If the pool is already gone, stop now. (Inside
    # bubblewrap's pid namespace the parent is bwrap, which has --die-with-parent: parent_pid None.)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(0)
    return report


def read_only_paths() -> list[str]:
    """What the interpreter may still read: its installation, the package, system libraries."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_path(key))
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the spade_rl package
    paths.update(("/usr/lib", "/usr/lib64", "/lib", "/lib64"))
    return sorted(p for p in paths if p and os.path.exists(p))


def apply_landlock(paths: list[str]) -> LayerReport:
    status = landlock.probe()
    if not status.available:
        return LayerReport("landlock", False, status.detail)
    try:
        features = landlock.restrict_self(paths, status.abi)
    except OSError as exc:
        return LayerReport("landlock", False, str(exc))
    return LayerReport("landlock", True, f"ABI {status.abi}: read-only interpreter; {', '.join(features)}")


def apply_seccomp(availability: tuple[bool, str]) -> LayerReport:
    ok, why = availability
    if not ok:
        return LayerReport("seccomp", False, why)
    try:
        allowed = seccomp_filter.install()
    except (OSError, RuntimeError) as exc:
        return LayerReport("seccomp", False, f"could not load the filter: {exc}")
    return LayerReport(
        "seccomp",
        True,
        f"filter loaded ({seccomp_filter.MODE}): {len(allowed)} system calls allowed, some only with "
        "given arguments; every other one fails with EPERM",
    )


def harden(settings: dict) -> list[LayerReport]:
    """Apply every layer whose mode is not ``off``, in order; return one report per layer."""
    modes = settings["layers"]
    skipped = "off in the configuration"
    # Load libseccomp first: finding the library may start ldconfig, which the limits below forbid.
    seccomp_availability = seccomp_filter.available() if modes["seccomp"] != "off" else (False, skipped)
    # Likewise work out what stays readable while the interpreter can still read its own files.
    paths = read_only_paths()
    reports = []
    if modes["rlimits"] != "off":
        reports.append(
            apply_rlimits(settings["memory_bytes"], settings["cpu_seconds"], settings["open_files"])
        )
    else:
        reports.append(LayerReport("rlimits", False, skipped))
    if modes["uid"] != "off":
        reports.append(drop_privileges(settings["uid"], settings["gid"], settings["parent_pid"]))
    else:
        reports.append(LayerReport("uid", False, skipped))
    reports.append(
        apply_landlock(paths) if modes["landlock"] != "off" else LayerReport("landlock", False, skipped)
    )
    reports.append(
        apply_seccomp(seccomp_availability)
        if modes["seccomp"] != "off"
        else LayerReport("seccomp", False, skipped)
    )
    return reports
