"""Every command in the README and in ``docs/`` works, or at least still names what exists.

    python -m pytest -q tests/test_docs_commands.py

A fenced block whose previous non-blank line is ``<!-- runnable -->`` is run as it stands (bash, from
the repository root; only cheap commands are marked so: no model is loaded). Every other command of a
``bash`` block is parsed: ``spade-rl`` subcommands and options must exist, ``spade-rl run`` overrides
and configuration files must load (``load_config``, which checks every key and value), reference
environments, suites, files, scripts and their options, extras and pinned versions must be the
project's. ``python`` blocks must compile and their ``from spade_rl... import ...`` names must import;
``toml`` blocks must parse and, when they are run tables, load as a configuration. Relative links must
point at files that exist. A command that needs an optional package not installed here skips its block
with the line that installs it, once the rest of the block is checked.

The README's opening block is the two commands CI runs as they stand (.ci/run, through
``tools/readme_commands.py``); CI adds only what the README's Develop section says it adds.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from spade_rl.cli import app
from spade_rl.envs import reference
from spade_rl.evaluate.base import SUITES
from spade_rl.loop.config import ConfigError, RunConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"
SHELLS = ("bash", "sh", "console")
# Programs the documents may name that are not this project's: only their presence in a block is checked.
EXTERNAL = {"curl", "kill", "ray", "trl", "vllm", "ruff", "sleep", "until", "do", "done", "uv", "vf-eval"}
# What the tests need beyond the dev extra, installed with --no-deps by the README's test command.
NO_DEPS = ROOT / "requirements-no-deps.txt"
PINS = (ROOT / "pyproject.toml").read_text() + NO_DEPS.read_text()
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
OPERATORS = {"&&", "||", ";", "|", "&"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    runnable: bool

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"```(\w*)\s*", lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        text = "\n".join(lines[i + 1 : end])
        found.append(Block(path, i + 1, opening.group(1), text, before == MARKER))
        i = end + 1
    return found


ALL = [b for path in DOCS for b in blocks(path)]
SHELL_BLOCKS = [b for b in ALL if b.lang in SHELLS]


def commands(text: str) -> list[list[str]]:
    """The simple commands of a shell block: lines joined where a backslash or an open quote continues
    them, comments dropped, split at ``&&``, ``;``, ``|`` and ``&``; leading ``NAME=value`` dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            tokens = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        pending = ""
        current: list[str] = []
        for token in [*tokens, ";"]:
            if token in OPERATORS:
                while current and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", current[0]):
                    current.pop(0)
                if current:
                    out.append(current)
                current = []
            else:
                current.append(token)
    assert not pending, f"an unfinished command: {pending!r}"
    return out


# --- optional packages ---------------------------------------------------------------------------------
# How spade-rl says that an optional package is missing, with the line that installs it: a suite's
# (spade_rl.evaluate.base.get_suite) and a pool's external games (spade_rl.envs.external).
NOT_INSTALLED = (
    re.compile(r"needs the package '([\w.]+)', which is not installed: (.+)"),
    re.compile(r"games need the package ([\w.]+): (.+)"),
)


class NeedsPackage(Exception):
    """A documented command needs an optional package that is not installed here (the message: what
    installs it); the rest of its block is still checked, then the test skips."""


def needs_package(message: str) -> str | None:
    """The install line in ``message`` when it says that a package missing here is needed, else None."""
    for pattern in NOT_INSTALLED:
        found = pattern.search(message)
        if found and importlib.util.find_spec(found.group(1)) is None:
            return f"needs {found.group(1)}: {found.group(2)}"
    return None


# --- spade-rl ------------------------------------------------------------------------------------------
def resolve(args: list[str]) -> tuple[Any, list[str], str]:
    """The (click) command that ``spade-rl ARGS`` names, the rest of the arguments, and its name."""
    command = typer.main.get_command(app)  # typer's own copy of click: groups have .commands
    name = "spade-rl"
    while hasattr(command, "commands") and args and not args[0].startswith("-"):
        sub = command.commands.get(args[0])
        assert sub is not None, f"{name} has no subcommand {args[0]!r}; it has {sorted(command.commands)}"
        command, name, args = sub, f"{name} {args[0]}", args[1:]
    return command, args, name


def split_options(command: Any, args: list[str], name: str) -> tuple[dict[str, list[str]], list[str]]:
    """Options given (by their first long name) with their values, and the positional arguments; an
    option the command does not have fails the test."""
    options = {
        o: p for p in command.params if p.param_type_name == "option" for o in p.opts + p.secondary_opts
    }
    given: dict[str, list[str]] = {}
    positional: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--help":
            given["--help"] = []
        elif arg.startswith("-") and not re.fullmatch(r"-\d.*", arg):
            flag, _, inline = arg.partition("=")
            assert flag in options, f"{name} has no option {flag}; it has {sorted(options)}"
            param = options[flag]
            value = [] if param.is_flag or param.count else [inline or next(rest)]
            given.setdefault(param.opts[0], []).extend(value)
        else:
            positional.append(arg)
    return given, positional


def check_spade(args: list[str], processes: int = 1) -> None:
    command, rest, name = resolve(args)
    given, positional = split_options(command, rest, name)
    if "--help" in given:
        return
    if name == "spade-rl run" and "--resume" not in given:
        config = given.get("--config", [None])[0]
        try:
            load_config(ROOT / config if config else None, positional, processes=processes)
        except ConfigError as exc:
            needed = needs_package(str(exc))
            if needed:
                raise NeedsPackage(f"spade-rl run {' '.join(args[1:])}: {needed}") from None
            pytest.fail(f"spade-rl run {' '.join(args[1:])}: {exc}")
    if name == "spade-rl experiment":
        assert (ROOT / positional[0]).is_file(), f"no experiment file {positional[0]}"
    if name == "spade-rl eval":
        unknown = [s for s in given.get("--suite", []) if s not in SUITES]
        assert not unknown, f"unknown suites {unknown}; there are {sorted(SUITES)}"
        for option in given.get("--option", []):
            assert option.split(".", 1)[0] in SUITES, f"--option {option}: no such suite"
    if name in ("spade-rl play", "spade-rl envs show", "spade-rl envs validate", "spade-rl envs serve"):
        for env in positional:
            if "--archive" in given and env.isdigit():
                continue
            assert env in reference.NAMES or env.endswith(".py"), f"{name}: {env} is no reference environment"


# --- the other programs ----------------------------------------------------------------------------------
def check_pip(args: list[str]) -> None:
    assert args[0] == "install", f"pip {args[0]}: the documents only install"
    rest = iter(args[1:])
    for arg in rest:
        if arg in ("-r", "--requirement"):
            check_requirements(next(rest))
            continue
        extras = re.fullmatch(r"\.\[([\w,-]+)\]", arg)
        if extras:
            missing = set(extras.group(1).split(",")) - EXTRAS
            assert not missing, f"pyproject.toml has no extra {sorted(missing)}; it has {sorted(EXTRAS)}"
        elif "==" in arg:
            assert arg in PINS, f"{arg}: pyproject.toml and .ci/run pin another version (or none)"
        elif arg.startswith("/"):
            continue  # a package folder the block writes first (spade-rl envs export --format verifiers)
        elif "/" in arg:  # a package of this repository (environments/...)
            assert (ROOT / arg / "pyproject.toml").is_file(), f"pip install {arg}: no package folder there"
        else:
            assert arg.startswith("-") or arg == ".", f"pip install {arg}: install only pinned versions"


def check_requirements(path: str) -> None:
    """A requirements file the documents install: the project's, every requirement an exact pin."""
    file = ROOT / path
    assert file.is_file(), f"pip install -r {path}: no such file"
    for line in file.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        assert not line or re.fullmatch(r"[\w.-]+==[\w.]+", line), f"{path}: {line!r} is not a pinned version"


def check_script(path: str, args: list[str]) -> None:
    script = ROOT / path
    assert script.is_file(), f"no script {path}"
    text = script.read_text(encoding="utf-8")
    for arg in args:
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            assert f'"{flag}"' in text, f"{path} has no option {flag}"


def check_python(args: list[str]) -> None:
    if args[:2] == ["-m", "spade_rl"]:
        check_spade(args[2:])
    elif args[:2] == ["-m", "pytest"]:
        for arg in args[2:]:
            if arg.startswith("tests"):
                assert (ROOT / arg.split("::")[0]).exists(), f"no test path {arg}"
    elif args[0] == "-c":
        compile(args[1], "<python -c>", "exec")
    else:
        check_script(args[0], args[1:])


def check_accelerate(args: list[str]) -> None:
    assert args[0] == "launch", f"accelerate {args[0]}"
    given = dict(zip(args[1::2], args[2::2], strict=False))
    assert (ROOT / given["--config_file"]).is_file(), f"no accelerate configuration {given['--config_file']}"
    start = args.index("-m")
    assert args[start + 1] == "spade_rl", "accelerate launches -m spade_rl"
    check_spade(args[start + 2 :], processes=int(given.get("--num_processes", "8")))


def check_command(tokens: list[str]) -> None:
    program, args = tokens[0], tokens[1:]
    if program == "spade-rl":
        check_spade(args)
    elif program in ("pip", "pip3"):
        check_pip(args)
    elif program in ("python", "python3"):
        check_python(args)
    elif program == "accelerate":
        check_accelerate(args)
    elif program == "bash":
        assert (ROOT / args[0]).is_file(), f"no script {args[0]}"
    else:
        assert program in EXTERNAL, (
            f"{program}: not a command of this project; add it to EXTERNAL if it is real"
        )


# --- the tests ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=str)
def test_every_shell_command_names_what_exists(block):
    missing = []
    for tokens in commands(block.text):
        try:
            check_command(tokens)
        except NeedsPackage as exc:
            missing.append(str(exc))
    if missing:
        pytest.skip("; ".join(missing))


RUNNABLE = [b for b in ALL if b.runnable]


def test_the_cheap_commands_are_marked_runnable_in_shell_blocks():
    assert RUNNABLE, f"no block is marked {MARKER}"
    assert all(b.lang in SHELLS for b in RUNNABLE), [str(b) for b in RUNNABLE if b.lang not in SHELLS]


@pytest.mark.parametrize("block", RUNNABLE, ids=str)
def test_runnable_blocks_run(block):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-e", "-c", block.text], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{block}:\n{block.text}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "python"], ids=str)
def test_python_blocks_compile_and_import_what_exists(block):
    tree = ast.parse(block.text, filename=str(block))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spade_rl"):
            module = importlib.import_module(node.module)
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            assert not missing, f"{block}: {node.module} has no {missing}"


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "toml"], ids=str)
def test_toml_blocks_parse_and_run_tables_load(block, tmp_path):
    data = tomllib.loads(block.text)
    sections = {f.name for f in RunConfig.__dataclass_fields__.values()}
    if set(data) <= sections:
        path = tmp_path / "fragment.toml"
        path.write_text(block.text)
        try:  # a fragment of a file: read over spade-rl run's profile unless it names one
            load_config(path, [] if "profile" in data else ["profile='cpu'"])
        except ConfigError as exc:
            pytest.fail(f"{block}: {exc}")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(path):
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to missing {target}"


def test_the_parser_catches_what_it_is_for():
    """The checks fail on what a stale document would hold (so that the tests above can fail)."""
    with pytest.raises(AssertionError, match="no option --frobnicate"):
        check_command(["spade-rl", "play", "guess", "--frobnicate"])
    with pytest.raises(AssertionError, match="no subcommand 'fly'"):
        check_command(["spade-rl", "fly"])
    with pytest.raises(pytest.fail.Exception, match=r"loop\.nope"):
        check_command(["spade-rl", "run", "loop.nope=1"])
    with pytest.raises(AssertionError, match="no extra"):
        check_command(["pip", "install", "-e", ".[nope]"])
    with pytest.raises(AssertionError, match="pin another version"):
        check_command(["pip", "install", "torch==1.0"])
    with pytest.raises(AssertionError, match="no reference environment"):
        check_command(["spade-rl", "play", "chess"])
    assert commands("a 1 \\\n  2 && b '#x' # c\n# only a comment\nCUDA=1 c &\n") == [
        ["a", "1", "2"],
        ["b", "#x"],
        ["c"],
    ]


# --- CI runs the README's two commands ----------------------------------------------------------------
def readme_tool():
    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / "tools" / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CI = ROOT / ".ci" / "run"
# Every step of .ci/run outside its set-up and the function that runs a README command: the README's two
# commands, and what the README says CI adds (Develop), each named there.
CI_STEPS = [
    "apt-get update -qq",
    "apt-get install -y -qq --no-install-recommends libseccomp2 bubblewrap chromium >/dev/null",
    "python3 tools/check_extras.py",
    "readme install",
    "readme test",
    "ruff check .",
    "ruff format --check .",
    "python3 tools/check_lower_bounds.py",
]
CI_NAMED_IN_README = [
    "tools/readme_commands.py",
    "`libseccomp2`",
    "`bubblewrap`",
    "`chromium`",
    "`ruff check .`",
    "`ruff format --check .`",
    "`tools/check_extras.py`",
    "`tools/check_lower_bounds.py`",
]


def ci_steps() -> list[str]:
    """The commands of .ci/run, one a line, less comments, its set-up and the body of ``readme()``."""
    steps, inside = [], False
    for line in CI.read_text(encoding="utf-8").splitlines():
        code = line.strip()
        if code.startswith("readme() {"):
            inside = True
        elif inside:
            inside = code != "}"
        elif code and not code.startswith(("#", "set -", "cd ", "export ")):
            steps.append(code)
    return steps


def test_the_readme_opens_with_the_two_commands_that_ci_runs():
    tool = readme_tool()
    found = tool.readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    opening = next(b for b in SHELL_BLOCKS if b.path.name == "README.md")
    assert list(found.values()) == [line for line in opening.text.splitlines() if line.strip()]
    assert tool.last_command(found["install"]) == ["spade-rl", "run"]
    assert tool.last_command(found["test"])[:3] == ["python", "-m", "pytest"]
    # What the suite needs beyond the dev extra is installed by the test command itself.
    assert "pip install --no-deps -r requirements-no-deps.txt" in found["test"]
    assert tool.main(["test"]) == 0


def test_ci_runs_the_readme_commands_and_only_what_the_readme_says_it_adds():
    assert ci_steps() == CI_STEPS
    text = CI.read_text(encoding="utf-8")
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    assert not re.search(r"\bpip\b", code), "CI installs Python packages only through the README's commands"
    assert 'command=$(python3 tools/readme_commands.py "$1")' in code
    assert 'bash -o pipefail -c "$command"' in code
    develop = (ROOT / "README.md").read_text(encoding="utf-8").split("## Develop", 1)[1].split("\n## ", 1)[0]
    paragraph = " ".join(develop.split())
    missing = [name for name in CI_NAMED_IN_README if name not in paragraph]
    assert not missing, f"the README's Develop section does not say that CI runs {missing}"


def test_the_readme_tool_refuses_an_opening_block_that_is_not_the_two_commands():
    tool = readme_tool()

    def opening(*lines: str) -> str:
        return "# title\n\n```bash\n" + "\n".join(lines) + "\n```\n"

    good = ("pip install -e . && spade-rl run   # go", "pip install -e '.[dev]' && python -m pytest -q")
    assert tool.readme_commands(opening(*good)) == {"install": good[0], "test": good[1]}
    with pytest.raises(tool.ReadmeError, match="holds 1 commands"):
        tool.readme_commands(opening(good[0]))
    with pytest.raises(tool.ReadmeError, match="does not end in `spade-rl run`"):
        tool.readme_commands(opening("spade-rl run && pip install -e .", good[1]))
    with pytest.raises(tool.ReadmeError, match="does not end in `python -m pytest`"):
        tool.readme_commands(opening(good[0], "python -m pytest -q && echo done"))
    with pytest.raises(tool.ReadmeError, match="no ```bash block"):
        tool.readme_commands("# title\n")
