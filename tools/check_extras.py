"""Ask pip's resolver whether spade-rl installs with its extras as a user installs them: the core and every
extra but ``dev`` together (``dev`` is CI's own exact pins, among them a transformers newer than vllm
accepts), beside ``torch==2.13.0``. A set that resolves together also resolves in any part, so one call
answers for each extra with the core as well. A dry run with the installed packages ignored: nothing is
installed, and the answer does not depend on this machine's environment (pip reads metadata, and
downloads a wheel only where the index serves no metadata of its own). It needs the package index.

    python3 tools/check_extras.py              # every extra but dev; exit 1 with pip's conflict report
    python3 tools/check_extras.py vllm openenv # only these

CI runs it (.ci/run); tests/test_dependencies.py checks that it names every extra.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"  # the CPU build from this machine's disk; any other version pulls a CUDA one
NOT_FOR_USERS = ("dev",)


def user_extras() -> list[str]:
    """The extras of pyproject.toml that users install (all but dev), in their order there."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return [name for name in extras if name not in NOT_FOR_USERS]


def resolve_command(extras: list[str]) -> list[str]:
    """pip's dry run of the package with ``extras``, beside torch 2.13.0."""
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        TORCH,
        "-e",
        f"{ROOT}[{','.join(extras)}]",
    ]


def main(argv: list[str]) -> int:
    known = user_extras()
    extras = argv or known
    unknown = [name for name in extras if name not in known]
    if unknown:
        print(f"unknown extra(s) {unknown}; the users' extras: {known}", file=sys.stderr)
        return 2
    command = resolve_command(extras)
    print("resolving:", " ".join(command[3:]), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if not line.startswith("WARNING: Location")]
        print("\n".join(errors[-40:]), file=sys.stderr)
        print(f"spade-rl[{','.join(extras)}] does not resolve beside {TORCH}", file=sys.stderr)
        return 1
    print(f"spade-rl[{','.join(extras)}] resolves beside {TORCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
