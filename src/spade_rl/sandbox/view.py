"""A read-only view of the interpreter for a worker that drops root, where Python lives in a closed folder.

pyenv, conda and many container images install Python under ``/root`` (mode 0700). A worker started by
root drops to an unprivileged uid (``hardening.drop_privileges``); from then on it cannot enter
``/root``, so a module it did not import before the drop, or a data file a package reads lazily (a
Reasoning Gym word list, say), fails with ``PermissionError``. Changing the modes of the user's folders
is not ours to do, and ``preload`` cannot know every data file a package opens.

Instead, while still root, the worker gives itself a private mount namespace in which each closed
folder above what it must read (``hardening.read_only_paths``: the interpreter, its packages, the
spade_rl package) is covered by an empty read-only tmpfs (mode 0755) into which only those paths are
bound again, read-only. The rest of the closed folder (``/root/.ssh``, the user's files) does not exist
in the worker's view: isolation is stronger than before, not weaker. The worker's uid, Landlock rules
and seccomp filter are applied afterwards, as always; nothing outside the worker changes.

Under bubblewrap (the ``bwrap`` layer) the same view is made by bwrap's own arguments
(:func:`bwrap_view_args`), since a worker inside bwrap holds no capability to mount.

Making the view needs ``CAP_SYS_ADMIN`` (root on a machine or VM; not in a default Docker container). Where
the worker cannot make it, it says why and goes on without it: environments can then import only what
``sandbox.preload`` loads, and ``spade-rl doctor`` names the folder and the change that fixes it.
"""

from __future__ import annotations

import ctypes
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

_CLONE_NEWNS = 0x00020000
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18


@dataclass(frozen=True)
class ViewReport:
    """What the worker did: ``active`` (a view was made), ``not_needed`` (nothing it reads is closed to
    its uid, or it drops no uid), or neither (it could not; ``detail`` says why)."""

    active: bool
    detail: str
    not_needed: bool = False
    covered: tuple[str, ...] = ()  # the closed folders covered by a tmpfs

    def to_json(self) -> dict:
        return {**asdict(self), "covered": list(self.covered)}


def can_enter(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid`` (with group ``gid`` and no others) may search the folder ``path``."""
    st = path.stat()
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return bool((st.st_mode >> shift) & 0o1)


def closed_folders(paths: list[str], uid: int, gid: int) -> dict[str, list[str]]:
    """For the ``paths`` a worker must read: the topmost folder above each that ``uid`` cannot enter ->
    the (real, existing) paths beneath it, those inside another one of them left out. Paths every folder
    above which ``uid`` may enter are not listed (the path's own mode is its own: a view cannot change it)."""
    found: dict[str, set[str]] = {}
    for raw in paths:
        try:
            real = Path(os.path.realpath(raw))
            if not real.exists():
                continue
            for folder in reversed(real.parents):
                if not can_enter(folder, uid, gid):
                    found.setdefault(str(folder), set()).add(str(real))
                    break
        except OSError:
            continue
    return {folder: _outermost(sorted(inner)) for folder, inner in sorted(found.items())}


def _outermost(paths: list[str]) -> list[str]:
    """``paths`` (sorted) without those that lie inside another of them."""
    kept: list[str] = []
    for path in paths:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def bwrap_view_args(paths: list[str], uid: int, gid: int) -> list[str]:
    """bubblewrap arguments, placed after ``--ro-bind / /``, that make the same view: each closed folder
    a fresh tmpfs (mode 0755), the folders between it and each path made 0755, each path bound again
    read-only (bwrap reads the source in the real root, so covering the folder first does not hide it)."""
    args: list[str] = []
    for folder, inner in closed_folders(paths, uid, gid).items():
        args += ["--perms", "0755", "--tmpfs", folder]
        made: set[str] = set()
        for path in inner:
            # The folders between: made 0755 here (bwrap would make them 0700, closed to the uid).
            place = Path(folder)
            for part in Path(path).relative_to(folder).parts[:-1]:
                place = place / part
                if str(place) not in made:
                    made.add(str(place))
                    args += ["--perms", "0755", "--dir", str(place)]
            args += ["--ro-bind", path, path]
        args += ["--remount-ro", folder]
    return args


def make_view(paths: list[str], uid: int, gid: int) -> ViewReport:
    """In a worker still running as root, before it drops its uid: make the view described above for
    ``paths``. Never raises; the report says what happened."""
    if os.geteuid() != 0:
        return ViewReport(False, f"not needed: running as uid {os.geteuid()}", not_needed=True)
    closed = closed_folders(paths, uid, gid)
    if not closed:
        return ViewReport(False, f"not needed: uid {uid} can reach the interpreter", not_needed=True)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None):
        enc = [None if s is None else os.fsencode(s) for s in (source, target, fstype, data)]
        if libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {target}: {os.strerror(err)}")

    names = ", ".join(closed)
    if libc.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        return ViewReport(
            False, f"cannot make a mount namespace ({os.strerror(err)}), so {names} stays closed"
        )
    fds: list[int] = []
    try:
        mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here reaches the host's mounts
        for folder, inner in closed.items():
            held = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in inner]
            fds += [fd for _, fd in held]
            mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "mode=0755,size=64k")
            for path, fd in held:
                _mount_point(folder, path, is_dir=stat.S_ISDIR(os.fstat(fd).st_mode))
                mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
                mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
            mount(None, folder, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        cwd = os.getcwd()
        if any(cwd == f or cwd.startswith(f.rstrip("/") + "/") for f in closed):
            os.chdir("/")
    except OSError as exc:
        # The namespace is this process's own: a half-made view is dropped with it (the worker fails
        # to import what it cannot reach, as it would without the view).
        return ViewReport(False, f"could not make the view of {names}: {exc}")
    finally:
        for fd in fds:
            os.close(fd)
    shown = sum(len(inner) for inner in closed.values())
    return ViewReport(
        True,
        f"{names} closed to uid {uid}: covered by a read-only tmpfs showing only the {shown} "
        "interpreter path(s) bound again read-only",
        covered=tuple(closed),
    )


def _mount_point(folder: str, path: str, is_dir: bool) -> None:
    """Create ``path`` (and the folders between ``folder`` and it) in the fresh tmpfs, mode 0755."""
    relative = Path(path).relative_to(folder)
    place = Path(folder)
    for part in relative.parts[:-1]:
        place = place / part
        if not place.exists():
            place.mkdir()
            place.chmod(0o755)
    if is_dir:
        Path(path).mkdir(exist_ok=True)
        Path(path).chmod(0o755)
    else:
        Path(path).touch(exist_ok=True)
        Path(path).chmod(0o644)
