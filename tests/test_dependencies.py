"""What keeps the package installable beside its users' libraries: the core depends on ranges of
transformers and accelerate and not on TRL at all; nothing under src/ imports TRL outside interop/, and
nothing reads a private name of a transformers, TRL, accelerate or peft object or module. Whether the core
and every extra resolve together (vllm's requirements included) is pip's resolver's to say, with the
package index: tools/check_extras.py, which CI runs; here, that it asks for every extra."""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "spade_rl"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LIBRARIES = ("transformers", "accelerate", "trl", "peft")


def requirement(name: str, requirements: list[str]) -> str | None:
    for line in requirements:
        if re.match(rf"{name}\s*[=<>!~\[]", line) or line.strip() == name:
            return line
    return None


def test_the_core_depends_on_ranges_and_not_on_trl():
    """Every library of the core but torch is a range (a lower bound that tools/check_lower_bounds.py tests,
    an upper one below the next major), so that spade-rl installs beside what users have (issue 57:
    verifiers 0.4.0 wants openai<3, spade-rl pinned openai==3.57.0); torch is exact, as any other version
    pulls a multi-GB build."""
    core = PROJECT["dependencies"]
    for line in core:
        name = re.match(r"[A-Za-z0-9_.-]+", line).group(0)
        if name == "torch":
            assert line == "torch==2.13.0"
            continue
        assert "==" not in line and "<" in line and ">=" in line, line
    for name in ("transformers", "accelerate", "openai", "typer", "rich", "gguf", "pyseccomp"):
        assert requirement(name, core) is not None, name
    assert requirement("trl", core) is None
    assert requirement("trl", PROJECT["optional-dependencies"]["trl"]) is not None


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py"))


def test_only_interop_imports_trl():
    offenders = []
    for path in python_files(SRC):
        if path.relative_to(SRC).parts[0] == "interop":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "trl"]
    assert offenders == []


def test_no_private_name_of_the_libraries_is_read():
    """No ``from <library>... import _x``, no ``<library>._x`` module path, and no ``._x`` attribute read or
    written on a name that holds one of their objects (models, configs, trainers, accelerators, tokenizers
    are the names this code gives them)."""
    holders = re.compile(r"\b(model|config|trainer|accelerator|tokenizer|peft_model|args|state)\._[a-zA-Z]")
    offenders = []
    for path in python_files(SRC):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LIBRARIES:
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private or any(part.startswith("_") for part in node.module.split(".")):
                    offenders.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} from {node.module} import {private}"
                    )
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if holders.search(code) or re.search(rf"\b({'|'.join(LIBRARIES)})(\.\w+)*\._[a-zA-Z]", code):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def check_extras():
    spec = importlib.util.spec_from_file_location("check_extras", ROOT / "tools" / "check_extras.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_asks_the_resolver_for_the_core_with_every_extra_but_dev():
    """The resolver's question (tools/check_extras.py) names every extra of pyproject.toml but dev, beside
    torch 2.13.0, with the installed packages ignored; CI asks it before the tests."""
    tool = check_extras()
    extras = [name for name in PROJECT["optional-dependencies"] if name != "dev"]
    assert tool.user_extras() == extras and "vllm" in extras
    command = tool.resolve_command(extras)
    assert command[3:7] == ["install", "--dry-run", "--ignore-installed", "--quiet"]
    assert "torch==2.13.0" in command and command[-1] == f"{ROOT}[{','.join(extras)}]"
    assert tool.main(["no-such-extra"]) == 2
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "python3 tools/check_extras.py" in steps
    assert steps.index("python3 tools/check_extras.py") < steps.index("readme test")  # the README's tests


def test_extras_that_share_a_library_with_vllm_or_users_take_ranges():
    """vllm 0.31.0 pins fastapi (>=0.133,<0.137) and mcp (<3): an exact pin of them, or of transformers,
    in an extra makes the extras unresolvable together (measured with pip's resolver, dry run)."""
    extras = PROJECT["optional-dependencies"]
    for name in ("fastapi", "uvicorn", "websockets", "fastmcp", "requests"):
        line = requirement(name, extras["openenv"])
        assert line is not None and "==" not in line, line
    for extra, name in (("corpus", "pyarrow"), ("hf", "datasets")):  # libraries users have already
        line = requirement(name, extras[extra])
        assert line is not None and "==" not in line and "<" in line, line
    for extra, lines in extras.items():
        if extra != "dev":
            assert requirement("transformers", lines) is None, extra  # the core's range decides
