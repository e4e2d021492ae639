"""The sandbox where Python lives out of the sandbox user's reach (pyenv or a virtual environment
under a 0700 folder, the usual container as root), without any ``chmod`` of its folders.

A worker started by root drops to uid 65534 before it reads environment code. By default it first
gives itself a read-only view of the interpreter (``spade_rl.sandbox.view``): the closed folder is
covered by a tmpfs that shows only the interpreter's paths. These tests build a virtual environment
inside a fresh 0700 folder, whose site-packages hold a module and a data file of their own and copies
of ``pyseccomp`` and ``bfcl_eval`` (and nothing of this interpreter's), beside a secret file, and run
pools with it:

- with the view, an environment imports a module that was not preloaded and reads the module's data
  file, while the secret beside the interpreter does not exist for it;
- without the view (``interpreter_view = false``), the same import fails, and the error names the
  folder uid 65534 cannot enter and the change that fixes it; preloaded, the environment runs;
- the BFCL suite's checker pool runs BFCL's AST checker there, with or without the view (without it,
  because the suite preloads its modules).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only a worker started by root drops its uid")

SRC = str(Path(__import__("spade_rl").__file__).resolve().parents[1])  # the folder holding spade_rl

PROBE = """
import json, sys
sys.path.insert(0, @SRC@)
from spade_rl.sandbox import SandboxConfig, Sandbox
from spade_rl.sandbox.config import DEFAULT_PRELOAD

SOURCE = '''
import spade_probe_module

class ProbeEnv:
    def reset(self, seed=None):
        import os
        secret = os.path.exists(spade_probe_module.SECRET)
        m = spade_probe_module
        return "value %s data %s secret %s" % (m.VALUE, m.data(), secret), {}
    def step(self, action):
        return "done", 1.0, True, False, {}
    def solution(self):
        return "x"
'''
out = {"prefix": sys.prefix}
with Sandbox(SandboxConfig(pool_size=1)) as pool:
    opened = pool.open(SOURCE)
    out["view"] = opened.value.reset(0).value[0] if opened.ok else opened.error
    out["view_report"] = pool.view
from spade_rl.sandbox.config import DEFAULT_LAYERS
from spade_rl.sandbox.doctor import bwrap_status
if bwrap_status()[0]:  # the same view, made by bubblewrap's arguments
    with Sandbox(SandboxConfig(pool_size=1, layers={**DEFAULT_LAYERS, "bwrap": "required"})) as pool:
        opened = pool.open(SOURCE)
        out["bwrap"] = opened.value.reset(0).value[0] if opened.ok else opened.error
with Sandbox(SandboxConfig(pool_size=1, interpreter_view=False)) as pool:
    opened = pool.open(SOURCE)
    out["bare"] = [opened.reason, opened.error_type, opened.error]
config = SandboxConfig(pool_size=1, interpreter_view=False, preload=(*DEFAULT_PRELOAD, "spade_probe_module"))
with Sandbox(config) as pool:
    opened = pool.open(SOURCE)
    out["preloaded"] = opened.value.reset(0).value[0] if opened.ok else opened.error
print(json.dumps(out))
"""

BFCL = """
import json, sys
sys.path.insert(0, @SRC@)
from spade_rl.evaluate._sandbox_jobs import Job, SandboxJobError, run_jobs
from spade_rl.sandbox import SandboxConfig, Sandbox
from spade_rl.sandbox.config import DEFAULT_PRELOAD

AST_SOURCE = open(@SRC@ + "/spade_rl/evaluate/_bfcl_ast_env.py").read()
# what bfcl.checker_config adds
SUITE = SandboxConfig(pool_size=1, interpreter_view=False, preload=(*DEFAULT_PRELOAD, @PRELOAD@))

case = {"functions": [{"name": "add", "description": "Add.", "parameters": {"type": "dict",
        "properties": {"a": {"type": "integer"}}, "required": ["a"]}}],
        "calls": [{"add": {"a": 1}}], "possible_answer": [{"add": {"a": [1]}}],
        "language": "python", "category": "simple_python"}
out = {}
BARE = SandboxConfig(pool_size=1, interpreter_view=False)
for name, config in (("bare", BARE), ("suite", SUITE), ("view", SandboxConfig(pool_size=1))):
    with Sandbox(config) as pool:
        try:
            [result] = run_jobs(pool, AST_SOURCE, [Job(action=json.dumps(case))], timeout_s=20)
            verdict = json.loads(result.value[0])["valid"] if result.ok else result.error
            out[name] = [result.status.value, verdict]
        except SandboxJobError as exc:
            out[name] = ["job_error", str(exc)]
import bfcl_eval
out["bfcl_eval"] = bfcl_eval.__file__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def closed_python():
    """A virtual environment in a 0700 folder of root's, with its own module and bfcl_eval."""
    folder = Path(tempfile.mkdtemp(prefix="spade-0700-", dir="/tmp"))
    folder.chmod(0o700)
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "spade_probe_module.py").write_text(
        f"import os\nVALUE = 42\nSECRET = {str(folder / 'secret.txt')!r}\n\ndef data():\n"
        "    try:\n"
        "        return open(os.path.join(os.path.dirname(__file__), 'probe_data.txt')).read().strip()\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
    )
    (Path(site) / "probe_data.txt").write_text("lazy\n")
    (folder / "secret.txt").write_text("not for the sandbox\n")
    shutil.copy(importlib.util.find_spec("pyseccomp").origin, site)
    for name in ("bfcl_eval", "mpmath"):  # mpmath: one of BFCL's simulated APIs imports it
        spec = importlib.util.find_spec(name)
        if spec is not None:
            shutil.copytree(Path(spec.origin).parent, Path(site) / name)
    yield folder, python, Path(site)
    shutil.rmtree(folder, ignore_errors=True)


def run(python: Path, script: str) -> dict:
    script = script.replace("@SRC@", repr(SRC)).replace("@PRELOAD@", repr(bfcl_preload()))
    done = subprocess.run(
        [str(python), "-I", "-c", script], capture_output=True, text=True, timeout=300, cwd="/"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def bfcl_preload() -> str:
    try:
        from spade_rl.evaluate import bfcl
    except ImportError:
        return ""
    return bfcl.PRELOAD


def test_a_module_out_of_reach_is_named_and_preloading_it_works(closed_python):
    folder, python, _ = closed_python
    out = run(python, PROBE)
    assert out["prefix"].startswith(str(folder))
    assert out["view"] == "value 42 data lazy secret False", out
    assert out.get("bwrap", out["view"]) == out["view"], out
    assert out["view_report"]["active"] and str(folder) in out["view_report"]["covered"], out
    reason, error_type, error = out["bare"]
    assert (reason, error_type) == ("load_raised", "ModuleNotFoundError"), out
    assert f"{folder} is mode drwx------" in error and f"chmod o+x {folder}" in error, error
    assert out["preloaded"] == "value 42 data PermissionError secret False", out  # data out of reach


def test_bfcl_checkers_run_from_an_interpreter_out_of_reach(closed_python):
    pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval==2026.3.23")
    folder, python, site = closed_python
    from spade_rl.evaluate import bfcl
    from spade_rl.sandbox import SandboxConfig

    assert bfcl.PRELOAD in bfcl.checker_config(SandboxConfig()).preload
    out = run(python, BFCL)
    assert out["bfcl_eval"].startswith(str(site)), out  # the copy in the 0700 folder is the one used
    assert out["bare"][0] == "job_error" and "bfcl_eval" in out["bare"][1], out
    assert f"{folder} is mode drwx------" in out["bare"][1], out  # and why, and what to change
    assert out["suite"] == ["ok", True], out
    assert out["view"] == ["ok", True], out
