"""Run the tests that touch the core's ranged libraries at the lowest versions pyproject.toml accepts.

The core depends on ranges (``>=`` a lower bound, ``<`` the next major) of transformers and accelerate (the
lowest transformers vLLM accepts), and of the libraries users often have already: openai, typer, rich, gguf
and pyseccomp (since issue 57, so that spade-rl installs beside verifiers and its users' pins). CI's own
environment has the dev extra's versions (the newest the extras allow together). This makes a second
environment cheaply and runs the learner's, the policy's, the warm-up's and the command line's tests in it:

1. a virtual environment with ``--system-site-packages`` (torch and every other package come from the
   running interpreter's environment, spade-rl's editable install included);
2. ``pip install <library>==<lower bound> ...`` into it, the bounds read from pyproject.toml's
   ``[project] dependencies`` (what pip also needs for them, e.g. an older huggingface-hub or tokenizers,
   goes into the venv too: a few MB of wheels from the package index);
3. pytest over ``TESTS`` with the venv's interpreter and a fresh model cache (``SPADE_RL_CACHE``: the
   default model and tokenizer are converted from GGUF by these versions); TRL's tests too where the
   installed TRL's own requirements accept those versions.

    python3 tools/check_lower_bounds.py                      # exit status: pytest's (1 when a test fails)
    python3 tools/check_lower_bounds.py --venv /tmp/lb       # keep the venv there, reuse it next time
    python3 tools/check_lower_bounds.py -- -x -k learner     # arguments after -- go to pytest

CI runs it after the suite (.ci/run); tests/test_lower_bounds.py checks the bounds it reads and the step.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import venv
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("transformers", "accelerate", "openai", "typer", "rich", "gguf", "pyseccomp")
# The parts of the suite that touch those libraries: the policy (the transformers backend's generation,
# scoring, caches, model loading from a folder and from GGUF with gguf; the OpenAI-compatible backends with
# openai), the learner and its loss, the warm-up, end-to-end runs of the self-play loop through the real
# sandbox (tiny model, in process and as `python -m spade_rl run` killed and resumed, seccomp's filter
# with pyseccomp), the overfitting check, and the command line (typer and rich).
TESTS = (
    "tests/policy",
    "tests/train",
    "tests/designer/test_warmup*.py",
    "tests/loop/test_selfplay.py",
    "tests/loop/test_overfit.py",  # the update alone drives a game to winning
    "tests/cli",
)
# Where TRL accepts the bounds: the learner against TRL's GRPOTrainer, and GRPOTrainer on spade-rl's games.
TRL_TESTS = ("tests/interop/test_trl_oracle.py", "tests/interop/test_trl_archive.py")


def selected_tests(patterns: tuple[str, ...] = TESTS) -> list[str]:
    """The files and folders ``patterns`` name (a pattern names every path it matches), in their order."""
    paths = []
    for pattern in patterns:
        found = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
        if not found:
            raise SystemExit(f"{pattern} names no test under {ROOT}: update TESTS in {Path(__file__).name}")
        paths += found
    return paths


def lower_bounds(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """``{library: version}``: the ``>=`` bound of each of ``LIBRARIES`` in the core's dependencies."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    requirements = {Requirement(line).name: Requirement(line) for line in dependencies}
    bounds = {}
    for name in LIBRARIES:
        if name not in requirements:
            raise SystemExit(f"{pyproject}: the core does not depend on {name} ({sorted(requirements)})")
        lowest = [s.version for s in requirements[name].specifier if s.operator == ">="]
        if len(lowest) != 1:
            raise SystemExit(
                f"{pyproject}: {requirements[name]} has no single '>=' lower bound; "
                "the check installs exactly that version"
            )
        bounds[name] = lowest[0]
    return bounds


def trl_accepts(bounds: dict[str, str]) -> tuple[bool, str]:
    """Whether the installed TRL's own requirements allow ``bounds`` (and why not)."""
    try:
        requires = importlib.metadata.requires("trl") or []
        version = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return False, "TRL is not installed"
    for line in requires:
        requirement = Requirement(line)
        if requirement.marker is None and requirement.name in bounds:
            if not requirement.specifier.contains(Version(bounds[requirement.name]), prereleases=True):
                return False, f"trl {version} requires {requirement}"
    return True, f"trl {version} accepts them"


def make_venv(path: Path, bounds: dict[str, str]) -> Path:
    """The venv at ``path`` (made when absent) with ``bounds`` installed; its interpreter."""
    python = path / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(path)
        path.chmod(0o755)  # the sandbox's workers drop root and read the interpreter's folders
    pins = [f"{name}=={version}" for name, version in bounds.items()]
    # The venv has no pip of its own: the environment's pip, run by the venv's interpreter, installs there.
    # pip's report of the other packages' unmet requirements (bfcl-eval's, installed with --no-deps) is
    # left out; what the venv holds instead of the environment's packages is printed below.
    run([str(python), "-m", "pip", "install", "--quiet", "--no-warn-conflicts", *pins])
    return python


def own_packages(path: Path) -> list[str]:
    """The distributions installed in the venv itself (``name-version``), which shadow the environment's."""
    found = path.glob("lib/python*/site-packages/*.dist-info")
    return sorted(d.name.removesuffix(".dist-info") for d in found)


def installed(python: Path) -> dict[str, str]:
    """What ``python`` imports: the libraries' versions and where spade_rl comes from."""
    code = (
        "import json, importlib.metadata as m, spade_rl\n"
        f"found = {{n: m.version(n) for n in {LIBRARIES!r}}}\n"
        "found['spade_rl'] = spade_rl.__file__\n"
        "print(json.dumps(found))"
    )
    done = subprocess.run([str(python), "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kwargs)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, help="make (or reuse) the venv here and keep it")
    parser.add_argument("pytest_args", nargs="*", help="after --: more arguments for pytest")
    args = parser.parse_args(argv)
    bounds = lower_bounds()
    tests = selected_tests()
    accepts, why = trl_accepts(bounds)
    if accepts:
        tests += selected_tests(TRL_TESTS)
    print(f"lower bounds: {bounds}; TRL's tests {'run' if accepts else 'are left out'} ({why})", flush=True)

    started = time.monotonic()
    where = args.venv or Path(tempfile.mkdtemp(prefix="spade-lower-bounds-"))
    try:
        python = make_venv(where.resolve(), bounds)
        found = installed(python)
        if not Path(found["spade_rl"]).resolve().is_relative_to(ROOT / "src"):
            run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(ROOT)])
            found = installed(python)
        wrong = {name: found[name] for name in LIBRARIES if Version(found[name]) != Version(bounds[name])}
        if wrong:
            print(f"the venv has {wrong}, not the lower bounds {bounds}", file=sys.stderr)
            return 1
        print(
            f"venv ready in {time.monotonic() - started:.0f} s; it holds {own_packages(where.resolve())}; "
            f"spade_rl from {found['spade_rl']}",
            flush=True,
        )
        tested = time.monotonic()
        command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, *args.pytest_args]
        print("+", " ".join(command), flush=True)
        # A model cache of its own: the default model and its tokenizer converted from GGUF by these
        # versions, not read from what the newest ones converted for the suite before.
        with tempfile.TemporaryDirectory(prefix="spade-lower-bounds-cache-") as cache:
            done = subprocess.run(command, cwd=ROOT, env={**os.environ, "SPADE_RL_CACHE": cache})
        print(
            f"tests at {bounds}: exit {done.returncode} after {time.monotonic() - tested:.0f} s "
            f"({time.monotonic() - started:.0f} s in all)",
            flush=True,
        )
        return done.returncode
    finally:
        if args.venv is None:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
