"""Fixtures of the command-line tests: the installed command run as a user runs it (a subprocess), and
typer's in-process runner on a wide console."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from spade_rl.cli import console


@pytest.fixture
def spade():
    """``spade("envs", "list")`` runs ``python -m spade_rl envs list`` and returns the finished process."""

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "spade_rl", *args], capture_output=True, text=True, timeout=timeout
        )

    return run


@pytest.fixture
def runner(monkeypatch) -> CliRunner:
    """The command in this process, its tables as a wide terminal shows them (80 columns wraps cells)."""
    monkeypatch.setattr(console, "width", 250)
    return CliRunner()


def assert_clean_failure(result, message: str) -> None:
    """Bad input: exit status 2, the message, no traceback."""
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.fixture
def clean_failure():
    return assert_clean_failure
