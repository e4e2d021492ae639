"""The read-only view of the interpreter (``spade_rl.sandbox.view``): which folders it covers, and the
bubblewrap arguments that make it. The view made by a real worker is tested in
``test_unreachable_python.py`` (a virtual environment in a 0700 folder) and ``test_unprivileged.py``."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from spade_rl.sandbox.view import bwrap_view_args, closed_folders, make_view

UID = GID = 65534


@pytest.fixture
def tree():
    """open/ (0755) holding closed/ (0700) holding python/lib and python/share, and data.txt; in /tmp
    (pytest's own temporary folder lies in a folder closed to others)."""
    base = Path(tempfile.mkdtemp(prefix="spade-view-", dir="/tmp"))
    yield from _tree(base)
    shutil.rmtree(base, ignore_errors=True)


def _tree(tmp_path: Path):
    open_ = tmp_path / "open"
    closed = open_ / "closed"
    lib = closed / "python" / "lib"
    share = closed / "python" / "share"
    for folder in (lib, share):
        folder.mkdir(parents=True)
    (closed / "data.txt").write_text("x")
    for folder in (tmp_path, open_, closed / "python", lib, share):
        folder.chmod(0o755)
    closed.chmod(0o700)
    yield {"open": open_, "closed": closed, "lib": lib, "share": share}


def test_the_topmost_closed_folder_is_covered_and_nested_paths_merge(tree):
    lib, share = str(tree["lib"]), str(tree["share"])
    found = closed_folders([lib, share, lib + "/", str(tree["open"])], UID, GID)
    assert found == {str(tree["closed"]): [lib, share]}  # the open folder itself needs no view
    python = str(tree["closed"] / "python")
    assert closed_folders([lib, python], UID, GID) == {str(tree["closed"]): [python]}  # lib is inside


def test_nothing_is_covered_when_every_folder_above_is_open(tree):
    tree["closed"].chmod(0o755)
    assert closed_folders([str(tree["lib"])], UID, GID) == {}
    assert bwrap_view_args([str(tree["lib"])], UID, GID) == []


def test_missing_paths_and_the_owners_own_folders_are_left_alone(tree):
    assert closed_folders([str(tree["closed"] / "nope")], UID, GID) == {}
    # a folder the uid owns lets it in by its owner bits
    os.chown(tree["closed"], UID, GID) if os.geteuid() == 0 else pytest.skip("chown needs root")
    assert closed_folders([str(tree["lib"])], UID, GID) == {}


def test_bwrap_arguments_cover_the_folder_and_open_the_folders_between(tree):
    closed, lib = str(tree["closed"]), str(tree["lib"])
    args = bwrap_view_args([lib], UID, GID)
    python = str(tree["closed"] / "python")
    assert args == [
        "--perms", "0755", "--tmpfs", closed,
        "--perms", "0755", "--dir", python,
        "--ro-bind", lib, lib,
        "--remount-ro", closed,
    ]  # fmt: skip


def test_an_ordinary_user_needs_no_view(tree):
    if os.geteuid() == 0:
        pytest.skip("as root the view is made (in a worker, never in the test process)")
    report = make_view([str(tree["lib"])], UID, GID)
    assert report.not_needed and not report.active
