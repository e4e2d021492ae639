"""A representative part of the attack suite, run as an unprivileged user (uid/gid 65534).

Started as root, the pool's workers drop to uid 65534, and that drop alone stops several attacks
(files of root, signals to root's processes). Run by an ordinary user, there is no uid to drop: the
``uid`` layer reports "not needed", and rlimits, Landlock and seccomp must stop everything by
themselves. This test runs ``test_attacks.py`` (a selection) under pytest as uid 65534 in a child
process and requires every selected test to pass. Run as an ordinary user, it skips: then
``test_attacks.py`` itself is the unprivileged run. Where Python or the checkout lies in a folder uid
65534 cannot enter (a 0700 /root), the child first makes itself the same read-only view of them that
the sandbox's workers make (``spade_rl.sandbox.view``), then drops to uid 65534: no ``chmod`` needed.

    python -m pytest tests/sandbox/test_unprivileged.py -q
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import spade_rl

ROOT = Path(__file__).resolve().parents[2]
UID = GID = 65534
SELECTION = (
    "test_default_layer_is_active",  # 4 layers; uid must say "not needed", the others active
    "test_write_tmp",
    "test_write_project",
    "test_read_passwd",
    "test_fork_bomb",
    "test_posix_fork",
    "test_tcp_connect",
    "test_unix_connect",
    "test_kill_parent",
    "test_kill_sibling",
    "test_sigio_kill",
    "test_ptrace_attach",
    "test_parent_environ",
    "test_proc_parent_environ",
    "test_infinite_loop",
    # the system calls an ordinary user's worker could aim at its own uid's processes and files
    "test_clear_parent_death",
    "test_interval_timer",
    "test_renice_others",
    "test_sysv_shm",
    "test_file_attributes",
    "test_inotify_watch",
    "test_half_answer_stall",
)
EXPECTED_TESTS = len(SELECTION) - 1 + 4


def unreachable(path: str) -> str:
    """Why uid 65534 (no groups) cannot reach ``path``, or '' when it can: every folder above it
    must be searchable by others, and the path itself readable."""
    path = os.path.realpath(path)
    folders = [p for p in Path(path).parents][::-1]
    for folder in folders:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            return f"{folder} is mode {stat.filemode(mode)} (run `chmod o+x {folder}`, as .ci/run does)"
    mode = os.stat(path).st_mode
    if not mode & stat.S_IROTH or (stat.S_ISDIR(mode) and not mode & stat.S_IXOTH):
        return f"{path} is mode {stat.filemode(mode)}"
    return ""


def view_possible() -> bool:
    """Whether this machine lets a child make a mount namespace (the view of ``view_and_drop``)."""
    done = subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x00020000) != 0)"],
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


def needed_paths() -> list[str]:
    return [
        sys.executable,
        sysconfig.get_path("stdlib"),
        os.path.dirname(pytest.__file__),
        os.path.dirname(spade_rl.__file__),
        str(ROOT / "tests" / "sandbox" / "test_attacks.py"),
        str(ROOT / "pyproject.toml"),
    ]


def view_paths() -> list[str]:
    from spade_rl.sandbox.hardening import read_only_paths

    return [*read_only_paths(), str(ROOT), os.path.dirname(pytest.__file__)]


def view_and_drop() -> None:
    """In the child, before its exec: a read-only view of what it reads (if a folder above is closed to
    uid 65534), then the drop to uid/gid 65534 with no groups. Exit 97 when the view cannot be made."""
    from spade_rl.sandbox.view import make_view

    report = make_view(view_paths(), UID, GID)
    if not (report.active or report.not_needed):
        os._exit(97)
    os.setgroups([])
    os.setresgid(GID, GID, GID)
    os.setresuid(UID, UID, UID)


def as_nobody(cmd: list[str], home: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": str(home),
    }
    return subprocess.run(
        cmd,
        preexec_fn=view_and_drop,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def nobody_home():
    """A scratch folder owned by uid 65534 (pytest's tmp_path sits under a folder only root enters)."""
    home = Path(tempfile.mkdtemp(prefix="spade-unprivileged-", dir="/tmp"))
    os.chown(home, UID, GID)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="not root: test_attacks.py itself is the unprivileged run")
def test_attack_suite_holds_as_uid_65534(nobody_home):
    blocked = [why for why in map(unreachable, needed_paths()) if why]
    if blocked and not view_possible():
        pytest.skip(f"uid {UID} cannot reach the interpreter or the checkout, and no view: {blocked[0]}")
    who = as_nobody(
        [
            sys.executable,
            "-c",
            "import os, pytest, spade_rl; print(os.getresuid(), os.getresgid(), os.getgroups())",
        ],
        nobody_home,
        timeout=60,
    )
    assert who.returncode == 0, who.stderr[-2000:]
    assert who.stdout.split() == ["(65534,", "65534,", "65534)", "(65534,", "65534,", "65534)", "[]"]

    report = nobody_home / "report.xml"
    done = as_nobody(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"--basetemp={nobody_home / 'basetemp'}", f"--junitxml={report}",
            *(f"tests/sandbox/test_attacks.py::{name}" for name in SELECTION),
        ],
        nobody_home,
        timeout=240,
    )  # fmt: skip
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    cases = ET.parse(report).getroot().iter("testcase")
    outcomes = {
        case.get("name"): [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        for case in cases
    }
    bad = {name: tags for name, tags in outcomes.items() if tags}
    assert not bad, f"not passed as uid {UID}: {bad}\n{done.stdout[-4000:]}"
    assert len(outcomes) == EXPECTED_TESTS, sorted(outcomes)
    assert done.returncode == 0, done.stdout[-3000:]
