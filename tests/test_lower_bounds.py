"""What tools/check_lower_bounds.py runs, without running it (it needs the package index): the bounds it
installs are the core's ``>=`` bounds in pyproject.toml, the tests it names exist, TRL's tests join only
where TRL's own requirements allow those versions, and CI runs it after the suite."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    path = ROOT / "tools" / "check_lower_bounds.py"
    spec = importlib.util.spec_from_file_location("check_lower_bounds", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bounds_are_the_cores_lower_bounds(tool) -> None:
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = tool.lower_bounds()
    assert set(bounds) == {"transformers", "accelerate", "openai", "typer", "rich", "gguf", "pyseccomp"}
    for name, version in bounds.items():
        [line] = [line for line in core if line.startswith(name)]
        assert f">={version}," in line, line


def test_a_range_without_one_lower_bound_is_refused(tool, tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["transformers<6", "accelerate>=1.10.1,<2"]\n')
    with pytest.raises(SystemExit, match=r"transformers<6 has no single '>=' lower bound"):
        tool.lower_bounds(pyproject)
    pyproject.write_text('[project]\ndependencies = ["transformers>=5.10.4,<6"]\n')
    with pytest.raises(SystemExit, match="does not depend on accelerate"):
        tool.lower_bounds(pyproject)


def test_the_tests_it_names_exist(tool) -> None:
    paths = tool.selected_tests()
    assert "tests/policy" in paths and "tests/train" in paths and "tests/designer/test_warmup.py" in paths
    assert tool.selected_tests(tool.TRL_TESTS) == list(tool.TRL_TESTS)
    with pytest.raises(SystemExit, match=r"tests/no_such_test\.py names no test"):
        tool.selected_tests(("tests/policy", "tests/no_such_test.py"))


def test_trls_tests_join_where_trl_accepts_the_bounds(tool, monkeypatch: pytest.MonkeyPatch) -> None:
    requires = ["accelerate>=1.10.1", "transformers>=4.56.2", "transformers!=5.1.0; extra == 'deepspeed'"]
    monkeypatch.setattr(tool.importlib.metadata, "requires", lambda name: requires)
    monkeypatch.setattr(tool.importlib.metadata, "version", lambda name: "9.9")
    assert tool.trl_accepts({"transformers": "5.10.4", "accelerate": "1.10.1"}) == (
        True,
        "trl 9.9 accepts them",
    )
    requires[1] = "transformers>=5.12"
    assert tool.trl_accepts({"transformers": "5.10.4", "accelerate": "1.10.1"}) == (
        False,
        "trl 9.9 requires transformers>=5.12",
    )


def test_ci_runs_it_after_the_suite() -> None:
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert steps.index("readme test") < steps.index("python3 tools/check_lower_bounds.py")  # README's tests
