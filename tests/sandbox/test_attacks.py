"""The attack suite of the sandbox: one hostile environment per file in ``attacks/``, one test each.

Every test runs its attack through a fresh ``Sandbox`` with short deadlines and asserts both
that the attack was stopped (the typed ``CallResult``: status, reason, error type) and that the host
saw no effect: no file created, no connection received, no process of the pool left once it is
closed, no secret of the host in any returned text, and the pool still able to run a benign
environment. The workers preload the modules the attacks use (``os``, ``socket``, ``ctypes``...), so
that the OS layers, not a failed import, are what stops each attack.

Run it as root (workers drop to uid 65534) and as an ordinary user (then this suite is the
unprivileged run; ``test_unprivileged.py`` does that from root):

    python -m pytest tests/sandbox -q
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import math
import os
import platform
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spade_rl.archive.store import Archive
from spade_rl.design.validate import REASONS, ValidationSettings, validate_source
from spade_rl.envs.contract import ContractViolation, check_reset_value, check_step_value
from spade_rl.envs.loader import find_env_classes
from spade_rl.sandbox import CallResult, EnvHandle, Sandbox, SandboxConfig, Status, doctor, landlock
from spade_rl.sandbox.config import DEFAULT_LAYERS, DEFAULT_PRELOAD, LAYERS

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = Path(__file__).resolve().parent / "attacks"
ATTACK_NAMES = sorted(p.stem for p in ATTACKS.glob("*.py"))
# Attacks that change their behaviour only after validation: the loop's play-time guard stops them;
# validation (the validator's tests and the command line's) is run on the others.
PLAY_TIME_ATTACKS = sorted(
    n for n in ATTACK_NAMES if "\nPASSES_VALIDATION = True" in (ATTACKS / f"{n}.py").read_text()
)
VALIDATED_ATTACKS = [n for n in ATTACK_NAMES if n not in PLAY_TIME_ATTACKS]
# Attacks whose refusal is statistical (a constant that wins three seeds in four): validation draws its
# seeds anew each time, so the suite replays one validation, from the seed the file names; the others
# are validated from seeds drawn at random, as the loop and the command line draw them.
PINNED_SEEDS = {
    n: int(m.group(1))
    for n in VALIDATED_ATTACKS
    if (m := re.search(r"^VALIDATION_SEED = (\d+)", (ATTACKS / f"{n}.py").read_text(), re.MULTILINE))
}

# Imported by each worker before it hardens itself: after the uid drop a worker started by root
# cannot import what it has not loaded (this Python lives under /root), and a failed import must
# not be what stops an attack.
ATTACK_MODULES = (
    "os", "socket", "subprocess", "ctypes", "threading", "signal", "resource", "posix",
    "multiprocessing", "multiprocessing.popen_fork", "fcntl",
)  # fmt: skip
# Two warm workers start side by side: one takes the attack, the other proves the pool still works.
CONFIG = SandboxConfig(
    pool_size=2, call_timeout_s=1.0, load_timeout_s=2.0, preload=(*DEFAULT_PRELOAD, *ATTACK_MODULES)
)
IS_ROOT = os.geteuid() == 0
WORKER_UID = CONFIG.unprivileged_uid if IS_ROOT else os.geteuid()
WORKER_GID = CONFIG.unprivileged_gid if IS_ROOT else os.getegid()
WORKER_ENVIRONMENT = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}  # what the pool gives every worker
SECRET_NAME = "SPADE_ATTACK_SECRET"
DEFAULT_TARGETS = "/tmp/spade-attack-default*"  # where the attack files write when given no path
X86_64 = platform.machine() == "x86_64"

BENIGN = """
class EchoEnv:
    def reset(self, seed=None):
        return "echo " + str(seed), {}

    def step(self, action):
        return "you said " + action, 1.0, True, False, {}

    def solution(self):
        return "hello"
"""


# --- the host side: processes, secrets, files, listeners ---------------------------------------


@dataclasses.dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    sid: int
    uid: int
    state: str
    cmdline: bytes


def processes() -> list[Proc]:
    """Every process this user can see, read from /proc."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            status = Path(f"/proc/{entry.name}/status").read_text()
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue  # it exited meanwhile
        fields = stat[stat.rindex(b")") + 2 :].split()
        uid = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
        found.append(
            Proc(
                int(entry.name),
                ppid=int(fields[1]),
                pgrp=int(fields[2]),
                sid=int(fields[3]),
                uid=int(uid.group(1)) if uid else -1,
                state=fields[0].decode(),
                cmdline=cmdline,
            )
        )
    return found


def pool_marker(parent_pid: int) -> bytes:
    """Text in the command line of every worker of the pool run by ``parent_pid`` (and inherited by
    anything such a worker could fork)."""
    return f'"parent_pid": {parent_pid},'.encode()


def pool_processes(parent_pid: int | None = None) -> set[int]:
    marker = pool_marker(parent_pid or os.getpid())
    return {p.pid for p in processes() if marker in p.cmdline}


def leftovers(
    workers: set[int],
    parent_pid: int | None = None,
    others: frozenset[int] = frozenset(),
    existing: frozenset[int] = frozenset(),
) -> list[Proc]:
    """Processes of a closed pool that are still there: its workers, anything in their process
    groups or sessions, their children, anything carrying the marker of pools run by
    ``parent_pid`` (except ``others``: workers of that process's other pools, still open), and
    orphans of the worker's uid born since ``existing`` was taken (a daemon that left the session
    and replaced its command line would be one)."""
    marker = pool_marker(parent_pid or os.getpid())
    return [
        p
        for p in processes()
        if p.pid != os.getpid()
        and p.pid not in others
        and (
            marker in p.cmdline
            or p.pgrp in workers
            or p.sid in workers
            or p.ppid in workers
            or (existing and p.pid not in existing and p.uid == WORKER_UID and p.ppid == 1)
        )
    ]


def assert_no_leftovers(
    workers: set[int],
    parent_pid: int | None = None,
    others: frozenset[int] = frozenset(),
    existing: frozenset[int] = frozenset(),
) -> None:
    left = leftovers(workers, parent_pid, others, existing)
    for proc in left:  # clean up before failing, so that one escape does not leak into other tests
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"processes left behind by the pool: {left}"


def host_secrets() -> list[str]:
    """What no environment may ever return: the secret this test put in the environment, and every
    entry of this process's initial environment (what /proc/<ppid>/environ would show)."""
    found = [os.environ[SECRET_NAME]] if SECRET_NAME in os.environ else []
    with open("/proc/self/environ", "rb") as f:
        for entry in f.read().split(b"\0"):
            text = entry.decode(errors="replace")
            if len(text) >= 16 and text not in WORKER_ENVIRONMENT:
                found.append(text)
    return found


def returned_text(results: list[CallResult]) -> str:
    parts = []
    for result in results:
        value = "" if result.value is None or isinstance(result.value, EnvHandle) else repr(result.value)
        parts += [value, result.error, result.traceback, result.output]
    return "\n".join(parts)


def assert_no_secret(results: list[CallResult]) -> None:
    text = returned_text(results)
    leaked = [s for s in host_secrets() if s in text]
    assert not leaked, f"host secrets in what the environment returned: {[s[:40] for s in leaked]}"


def assert_pool_works(pool: Sandbox) -> None:
    opened = pool.open(BENIGN)
    assert opened.ok, f"the pool no longer runs a benign environment: {opened}"
    env = opened.value
    assert env.reset(seed=7).value == ["echo 7", {}]
    assert env.step("hi").value == ["you said hi", 1.0, True, False, {}]
    assert env.close().ok


def assert_absent(path: Path | str) -> None:
    path = Path(path)
    if path.exists():
        path.unlink()
        pytest.fail(f"the environment created {path}")


def assert_no_connection(server: socket.socket) -> None:
    try:
        conn, peer = server.accept()
    except TimeoutError:
        return
    conn.close()
    pytest.fail(f"the listener received a connection from {peer!r}")


def assert_default_targets_absent() -> None:
    found = glob.glob(DEFAULT_TARGETS)
    for path in found:
        os.unlink(path)
    assert not found, f"attack files wrote to their default targets: {found}"


@functools.cache
def doctor_rows() -> tuple[doctor.LayerRow, ...]:
    """What ``spade-rl doctor`` says of this machine's layers (default configuration)."""
    return tuple(doctor.layer_table(SandboxConfig())[0])


def missing_layers() -> str:
    """The required default layers this machine lacks."""
    rows = doctor_rows()
    return "; ".join(f"{r.layer} ({r.detail})" for r in rows if r.mode == "required" and not r.available)


def require_sandbox() -> None:
    missing = missing_layers()
    if missing:
        pytest.skip(f"spade-rl doctor: this machine lacks required sandbox layer(s) {missing}; the pool "
                    "refuses to run generated code (fail closed), so there is nothing to attack")  # fmt: skip


def attack_source(name: str) -> str:
    return (ATTACKS / f"{name}.py").read_text()


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def secret(monkeypatch):
    """A random secret in the host's environment before any pool starts."""
    value = "spade-secret-" + secrets.token_hex(16)
    monkeypatch.setenv(SECRET_NAME, value)
    return value


@pytest.fixture
def open_dir():
    """A world-writable folder in /tmp: file permissions would let the worker's uid write here, so
    only the sandbox can stop it. (pytest's tmp_path sits under a 0700 folder the worker cannot
    even traverse.)"""
    folder = Path(tempfile.mkdtemp(prefix="spade-attack-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def project_target():
    """A path inside the checkout, in a world-writable folder when this user can make one there."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=".attack-scratch-", dir=Path(__file__).parent))
    except OSError:  # an unprivileged run: the checkout is not ours, file permissions stop it too
        target = ROOT / f"spade-attack-{secrets.token_hex(4)}.py"
        yield target
        target.unlink(missing_ok=True)
        return
    folder.chmod(0o777)
    yield folder / "planted.py"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tcp_listener():
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.2)
        yield server


@pytest.fixture
def unix_listener(open_dir):
    path = open_dir / "listen.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        path.chmod(0o777)
        server.listen()
        server.settimeout(0.2)
        yield server, path


def _worker_uid_kwargs() -> dict:
    return {"user": WORKER_UID, "group": WORKER_GID, "extra_groups": []} if IS_ROOT else {}


@pytest.fixture
def sibling():
    """A sacrificial process of the worker's own uid: file permissions would let a worker signal or
    trace it, so only seccomp and Landlock protect it."""
    proc = subprocess.Popen(["sleep", "60"], **_worker_uid_kwargs())
    yield proc
    proc.kill()
    proc.wait()


REAPING_PARENT = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps its children at once
uid, gid = int(sys.argv[1]), int(sys.argv[2])
ids = {"user": uid, "group": gid, "extra_groups": []} if os.geteuid() != uid else {}
print(subprocess.Popen(["sleep", "60"], **ids).pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def reaped_sibling():
    """Like ``sibling``, but its parent ignores SIGCHLD, so that once killed its pid is gone at once
    (the sigio attack checks its own success with getpriority)."""
    helper = subprocess.Popen(
        [sys.executable, "-I", "-c", REAPING_PARENT, str(WORKER_UID), str(WORKER_GID)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    pid = int(helper.stdout.readline())
    yield pid
    # The sleeper first, while its parent still reaps it (an orphan would stay a zombie where the
    # init process does not reap), then the parent.
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(helper.pid, signal.SIGKILL)
    helper.wait()
    helper.stdout.close()


# --- the harness -------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    opened: CallResult
    calls: list[CallResult]
    workers: set[int]

    @property
    def last(self) -> CallResult:
        """The result of the call that carried the attack (``opened`` for the module body and
        ``__init__``)."""
        return self.calls[-1] if self.calls else self.opened


Play = Callable[..., list[CallResult]]


def reset(env, timeout_s: float | None = None) -> list[CallResult]:
    return [env.reset(seed=0, timeout_s=timeout_s)]


def step(env, action: str = "anything", timeout_s: float | None = None) -> list[CallResult]:
    first = env.reset(seed=0)
    assert first.ok, f"reset failed before the attack in step: {first}"
    return [first, env.step(action, timeout_s=timeout_s)]


def run_attack(
    name: str, kwargs: dict | None = None, play: Play | None = None, config: SandboxConfig = CONFIG
) -> Outcome:
    """Open attack ``name`` in a fresh pool and, unless the attack is in the module body or
    ``__init__`` (``play`` None), play it; then check the pool still works, close it, and check that
    nothing of it is left and no secret came back."""
    require_sandbox()
    source = attack_source(name)
    existing = frozenset(p.pid for p in processes())
    others = frozenset(pool_processes())  # workers of pools open before this one
    pool = Sandbox(config)
    workers: set[int] = set()
    calls: list[CallResult] = []
    try:
        pool.start()
        workers |= pool_processes() - others
        opened = pool.open(source, kwargs=kwargs)
        workers |= pool_processes() - others
        if opened.ok:
            env = opened.value
            workers.add(env.worker_pid)
            assert play is not None, f"{name}: the environment opened, yet the attack was expected there"
            calls = play(env)
            workers |= pool_processes() - others
            env.close()
        assert_pool_works(pool)
    finally:
        pool.close()
    assert_no_leftovers(workers, others=others, existing=existing)
    assert_no_secret([opened, *calls])
    return Outcome(opened, calls, workers)


def assert_raised(result: CallResult, error_type: str, reason: str = "exception") -> None:
    """The environment's own call raised ``error_type``: the attack was refused by the OS."""
    assert result.status is Status.EXCEPTION, result
    assert result.reason == reason, result
    assert result.error_type == error_type, result


def assert_killed(result: CallResult, status: Status, signal_name: str | None = None) -> None:
    assert result.status is status, result
    assert result.reason == status.value, result
    if signal_name:
        assert result.error == f"the worker was killed by {signal_name}", result


# --- the layers --------------------------------------------------------------------------------


@functools.cache
def default_layer_reports() -> dict[str, dict]:
    """The layers a worker applied, each default layer asked for as "optional" so that the worker
    answers even where one is missing (the attack tests use the defaults: every layer required)."""
    layers = {name: "optional" for name, mode in DEFAULT_LAYERS.items() if mode != "off"}
    with Sandbox(SandboxConfig(pool_size=1, layers=layers)) as pool:
        return {r["name"]: r for r in pool.layer_reports()}


@pytest.mark.parametrize("layer", [name for name in LAYERS if DEFAULT_LAYERS[name] != "off"])
def test_default_layer_is_active(layer):
    row = next(r for r in doctor_rows() if r.layer == layer)
    if not row.available:
        pytest.skip(f"spade-rl doctor: this machine lacks the {layer} layer: {row.detail}")
    report = default_layer_reports()[layer]
    if layer == "uid" and not IS_ROOT:
        assert report["not_needed"] and not report["active"], report
        assert report["detail"] == f"not needed: running as uid {os.geteuid()}"
        return
    assert report["active"] and not report["not_needed"], report
    if layer == "uid":
        uid, gid = SandboxConfig().unprivileged_uid, SandboxConfig().unprivileged_gid
        assert report["detail"] == f"root dropped to uid {uid} gid {gid}, no groups", report
    elif layer == "rlimits":
        assert "FSIZE=0" in report["detail"] and "NPROC=0" in report["detail"], report
    elif layer == "landlock":
        abi = landlock.probe().abi
        assert report["detail"].startswith(f"ABI {abi}:"), report
        if abi >= 4:
            assert "no-tcp" in report["detail"], report
        if abi >= 6:
            assert "scoped-signals" in report["detail"], report
    elif layer == "seccomp":
        assert report["detail"].startswith("filter loaded (allow-list)"), report


def test_every_attack_is_an_environment_with_its_own_test():
    assert len(ATTACK_NAMES) >= 22
    tests = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert set(ATTACK_NAMES) <= tests, f"attacks without a test: {set(ATTACK_NAMES) - tests}"
    for name in ATTACK_NAMES:
        classes = find_env_classes(attack_source(name))
        assert len(classes) == 1, f"{name}: {classes}"


# --- time and memory ---------------------------------------------------------------------------


def test_infinite_loop():
    outcome = run_attack("infinite_loop", play=step)
    assert_killed(outcome.last, Status.TIMEOUT)
    assert outcome.last.elapsed_s < CONFIG.call_timeout_s + 2


def test_ignore_signals():
    outcome = run_attack("ignore_signals", play=reset)
    assert_killed(outcome.last, Status.TIMEOUT)
    assert outcome.last.elapsed_s < CONFIG.call_timeout_s + 2


def test_memory_bomb():
    outcome = run_attack("memory_bomb")
    assert_killed(outcome.opened, Status.MEMORY)


def test_recursion():
    outcome = run_attack("recursion", play=step)
    assert_raised(outcome.last, "RecursionError")


def test_c_stack_overflow():
    outcome = run_attack("c_stack_overflow", play=reset)
    assert_killed(outcome.last, Status.CRASHED, "SIGSEGV")


def test_segfault():
    outcome = run_attack("segfault", play=reset)
    assert_killed(outcome.last, Status.CRASHED, "SIGSEGV")


# --- processes and threads ---------------------------------------------------------------------


def test_fork_bomb():
    assert_raised(run_attack("fork_bomb").opened, "PermissionError", "load_raised")


def test_posix_fork():
    assert_raised(run_attack("posix_fork").opened, "PermissionError", "load_raised")


def test_thread_bomb():
    outcome = run_attack("thread_bomb", play=reset)
    assert_raised(outcome.last, "RuntimeError")
    assert "can't start new thread" in outcome.last.error


def test_subprocess_run(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("subprocess_run", {"target": str(target)}, play=step)
    assert_raised(outcome.last, "PermissionError")
    assert_absent(target)


def test_os_system(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("os_system", {"target": str(target)}, play=reset)
    assert_raised(outcome.last, "RuntimeError")
    assert "os.system returned status" in outcome.last.error
    assert_absent(target)


def test_ctypes_system(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("ctypes_system", {"target": str(target)})
    assert_raised(outcome.opened, "RuntimeError", "init_raised")
    assert_absent(target)


def test_ctypes_fork(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("ctypes_fork", {"target": str(target)}, play=reset)
    assert_raised(outcome.last, "PermissionError")
    assert_absent(target)


def test_double_fork_daemon(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("double_fork_daemon", {"target": str(target)})
    assert_raised(outcome.opened, "PermissionError", "init_raised")
    time.sleep(0.3)  # a daemon would write every 0.1 s
    assert_absent(target)


def test_multiprocessing_process(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("multiprocessing_process", {"target": str(target)}, play=reset)
    assert_raised(outcome.last, "PermissionError")
    assert_absent(target)


def test_execv_shell(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("execv_shell", {"target": str(target)}, play=step)
    assert_raised(outcome.last, "PermissionError")
    assert_absent(target)


def test_setsid_escape():
    assert_raised(run_attack("setsid_escape").opened, "PermissionError", "init_raised")


def test_setpgid_escape():
    assert_raised(run_attack("setpgid_escape", play=reset).last, "PermissionError")


def test_setrlimit_raise():
    outcome = run_attack("setrlimit_raise", play=reset)
    assert_raised(outcome.last, "ValueError")  # how `resource` reports EPERM
    assert "not allowed" in outcome.last.error


def test_unshare_namespace():
    assert_raised(run_attack("unshare_namespace", play=step).last, "PermissionError")


def test_io_uring():
    assert_raised(run_attack("io_uring").opened, "PermissionError", "init_raised")


# --- files -------------------------------------------------------------------------------------


def test_write_tmp(open_dir):
    target = open_dir / "pwned"
    outcome = run_attack("write_tmp", {"target": str(target)})
    assert_raised(outcome.opened, "PermissionError", "init_raised")
    assert_absent(target)


def test_write_project(project_target):
    outcome = run_attack("write_project", {"target": str(project_target)}, play=step)
    assert_raised(outcome.last, "PermissionError")
    assert_absent(project_target)


def test_read_passwd():
    outcome = run_attack("read_passwd")
    assert_raised(outcome.opened, "PermissionError", "load_raised")
    assert "root:" not in returned_text([outcome.opened])


def test_proc_self_mem():
    assert_raised(run_attack("proc_self_mem", play=reset).last, "PermissionError")


# --- the host's environment --------------------------------------------------------------------


def test_parent_environ(secret):
    outcome = run_attack("parent_environ", {"secret_name": SECRET_NAME}, play=reset)
    assert_raised(outcome.last, "KeyError")
    assert secret not in returned_text([outcome.last])


def test_proc_parent_environ():
    outcome = run_attack("proc_parent_environ", play=reset)
    assert_raised(outcome.last, "PermissionError")


def test_proc_self_environ():
    assert_raised(run_attack("proc_self_environ", play=step).last, "PermissionError")


# --- network -----------------------------------------------------------------------------------


def test_tcp_connect(tcp_listener):
    port = tcp_listener.getsockname()[1]
    outcome = run_attack("tcp_connect", {"port": port}, play=reset)
    assert_raised(outcome.last, "PermissionError")
    assert_no_connection(tcp_listener)


def test_ctypes_socket(tcp_listener):
    port = tcp_listener.getsockname()[1]
    outcome = run_attack("ctypes_socket", {"port": port}, play=step)
    assert_raised(outcome.last, "PermissionError")
    assert_no_connection(tcp_listener)


def test_unix_connect(unix_listener):
    server, path = unix_listener
    outcome = run_attack("unix_connect", {"path": str(path)}, play=reset)
    assert_raised(outcome.last, "PermissionError")
    assert_no_connection(server)


@pytest.mark.skipif(not X86_64, reason="the attack's machine code is x86_64")
def test_int80_syscall():
    outcome = run_attack("int80_syscall", play=reset)
    assert outcome.last.status is Status.CRASHED, outcome.last
    # SIGSYS: seccomp killed it for using a foreign ABI. SIGSEGV: a kernel without 32-bit
    # emulation refused int 0x80 itself. Either way no system call was made.
    assert outcome.last.error in ("the worker was killed by SIGSYS", "the worker was killed by SIGSEGV")


@pytest.mark.skipif(not X86_64, reason="the x32 ABI exists only on x86_64")
def test_x32_syscall():
    outcome = run_attack("x32_syscall", play=step)
    assert_killed(outcome.last, Status.CRASHED, "SIGSYS")


# --- signals and tracing -----------------------------------------------------------------------


def kill_parent_blocked() -> CallResult:
    outcome = run_attack("kill_parent", play=reset)
    assert_raised(outcome.last, "PermissionError")
    return outcome.last


def test_kill_parent():
    kill_parent_blocked()
    os.kill(os.getpid(), 0)  # still here: the parent of every worker is this process


def test_kill_sibling(sibling):
    outcome = run_attack("kill_sibling", {"target": sibling.pid})
    assert_raised(outcome.opened, "PermissionError", "init_raised")
    assert sibling.poll() is None, "the sacrificial process was killed"


def test_kill_everyone(sibling):
    """kill(-1, SIGKILL) would kill every process the worker may signal: run it only once the
    attack on the parent has been shown to fail."""
    kill_parent_blocked()
    config = dataclasses.replace(CONFIG, pool_size=3)
    survivors: dict[str, set[int]] = {}

    def play(env):
        first = env.reset(seed=0)
        survivors["before"] = pool_processes() - {env.worker_pid}
        attack = env.step("anything")
        survivors["after"] = pool_processes()
        return [first, attack]

    outcome = run_attack("kill_everyone", play=play, config=config)
    assert_raised(outcome.last, "PermissionError")
    assert sibling.poll() is None, "the sacrificial process of the worker's uid was killed"
    assert survivors["before"], "the pool should hold a second warm worker"
    assert survivors["before"] <= survivors["after"], "other workers were killed"


def test_ptrace_attach(sibling):
    outcome = run_attack("ptrace_attach", {"target": sibling.pid}, play=reset)
    assert_raised(outcome.last, "PermissionError")
    assert sibling.poll() is None


def test_sigio_kill(reaped_sibling):
    # The attack waits 0.3 s for the signal to land: a longer deadline, so that a busy machine
    # cannot turn "blocked" into "timeout".
    outcome = run_attack("sigio_kill", {"target": reaped_sibling}, play=lambda env: reset(env, 5.0))
    # seccomp refuses F_SETOWN/F_SETSIG (PermissionError); were it allowed, Landlock's signal
    # scoping would still keep the signal from landing (the attack then raises "still alive").
    assert_raised(outcome.last, "PermissionError")
    os.kill(reaped_sibling, 0)  # raises ProcessLookupError if the signal got through


# --- output and answers ------------------------------------------------------------------------


def test_print_flood():
    outcome = run_attack("print_flood", play=lambda env: reset(env, 10.0))
    assert_raised(outcome.last, "UnsupportedOperation")  # the capture buffer has no descriptor
    assert 0 < len(outcome.last.output) <= CONFIG.max_captured_output
    assert set(outcome.last.output) <= {"x", "\n"}


def test_stdout_fd_flood():
    outcome = run_attack("stdout_fd_flood", play=lambda env: step(env, timeout_s=10.0))
    assert_raised(outcome.last, "RuntimeError")
    assert "/dev/null" in outcome.last.error
    assert outcome.last.output == ""


def test_huge_observation():
    outcome = run_attack("huge_observation", play=lambda env: step(env, timeout_s=30.0))
    assert_killed(outcome.last, Status.OUTPUT_TOO_LARGE)
    assert outcome.last.value is None


def test_non_json_set():
    outcome = run_attack("non_json_set", play=reset)
    assert_raised(outcome.last, "TypeError", "unserializable")
    assert outcome.last.value is None


def test_non_json_object():
    outcome = run_attack("non_json_object", play=step)
    assert_raised(outcome.last, "TypeError", "unserializable")


def test_circular_value():
    outcome = run_attack("circular_value", play=reset)
    assert_raised(outcome.last, "ValueError", "unserializable")


def assert_non_finite_reward_refused(name: str) -> None:
    outcome = run_attack(name, play=step)
    assert outcome.last.ok, outcome.last  # it crosses the pipe; the host's check refuses it
    assert not math.isfinite(outcome.last.value[1])
    with pytest.raises(ContractViolation) as refused:
        check_step_value(outcome.last.value)
    assert refused.value.reason == "reward_not_finite"


def test_nan_reward():
    assert_non_finite_reward_refused("nan_reward")


def test_inf_reward():
    assert_non_finite_reward_refused("inf_reward")


def test_builtins_liar():
    outcome = run_attack("builtins_liar", play=reset)
    assert outcome.last.ok, outcome.last  # the worker's checks lie; the host's do not
    observation, info = outcome.last.value
    assert type(observation) is str and type(info) is str  # what JSON made of bytes and a set
    with pytest.raises(ContractViolation) as refused:
        check_reset_value(outcome.last.value)
    assert refused.value.reason == "reset_bad_type"
    one = 1
    assert isinstance(one, int) and not isinstance(one, str) and type(one) is int  # the host is untouched


def test_pipe_forge():
    def play(env):
        results = step(env)
        return [*results, env.step("again")]

    outcome = run_attack("pipe_forge", play=play)
    forged_answer, after = outcome.calls[1], outcome.calls[2]
    assert_killed(forged_answer, Status.PROTOCOL_ERROR)
    assert "more than one answer" in forged_answer.error
    assert after.status is Status.WORKER_LOST, after  # never the forged answer to the next request


def test_nested_json():
    host_raised: list[BaseException] = []

    def play(env):
        try:
            return [env.reset(seed=0)]
        except RecursionError as exc:
            host_raised.append(exc)
            os.killpg(env.worker_pid, signal.SIGKILL)  # so that closing it does not raise again
            return []

    outcome = run_attack("nested_json", play=play)
    assert not host_raised, f"Sandbox.call raised in the host: {host_raised[0]!r}"
    assert_killed(outcome.last, Status.PROTOCOL_ERROR)


def test_output_cap_bypass():
    outcome = run_attack("output_cap_bypass", play=reset)
    assert_raised(outcome.last, "RuntimeError")
    assert len(outcome.last.output) <= CONFIG.max_captured_output, len(outcome.last.output)


def test_stall_reader():
    state: dict = {}

    def play(env):
        first = env.reset(seed=0)
        assert first.ok, first
        results: list[CallResult] = []
        caller = threading.Thread(
            target=lambda: results.append(env.step("x" * 1_000_000, timeout_s=CONFIG.call_timeout_s)),
            daemon=True,
        )
        caller.start()
        caller.join(CONFIG.call_timeout_s + 1.5)
        state["hung"] = caller.is_alive()
        if state["hung"]:  # rescue this process: a dead worker makes the blocked write fail
            os.killpg(env.worker_pid, signal.SIGKILL)
            caller.join(10)
        return [first, *results]

    outcome = run_attack("stall_reader", play=play)
    assert not state["hung"], "Sandbox.call blocked past its deadline writing the request"
    assert_killed(outcome.last, Status.TIMEOUT)


# --- values that crossed the protocol: the trusted side never raises on them ------------------


def test_huge_int_reward():
    outcome = run_attack("huge_int_reward", play=step)
    assert outcome.last.status is Status.EXCEPTION and outcome.last.reason == "unserializable", outcome.last
    assert "integers must lie within" in outcome.last.error


def test_lone_surrogate(tmp_path):
    outcome = run_attack("lone_surrogate", play=step)
    observation, info = outcome.calls[0].value
    assert observation == "Say \ufffd anything." and info == {"\ufffdkey": "\ufffd"}
    assert_raised(outcome.last, "ValueError")
    for text in (observation, *info, *info.values(), outcome.last.error, outcome.last.traceback):
        text.encode("utf-8")  # what tokenizers and SQLite need
    with Archive(tmp_path / "archive.sqlite") as archive:  # the verdict and its message are stored
        archive.add(attack_source("lone_surrogate"), valid=False, reason="step_raised",
                    message=outcome.last.error, skill="logic", setting="games", iteration=0)  # fmt: skip


def test_own_reason_code(tmp_path):
    outcome = run_attack("own_reason_code", play=reset)
    assert_raised(outcome.last, "Forged")  # an exception of the environment, not a loader verdict
    require_sandbox()
    with Sandbox(CONFIG) as pool:
        report = validate_source(pool, attack_source("own_reason_code"), VALIDATION)
    assert (report.valid, report.reason) == (False, "reset_raised"), report
    with Archive(tmp_path / "archive.sqlite") as archive:
        archive.add(attack_source("own_reason_code"), valid=report.valid, reason=report.reason,
                    message=report.message, skill="logic", setting="games", iteration=0)  # fmt: skip


def test_int_or_float():
    require_sandbox()
    with Sandbox(CONFIG) as pool:  # the types flip at random: several validations
        reports = [validate_source(pool, attack_source("int_or_float"), VALIDATION) for _ in range(4)]
    for report in reports:
        assert not report.valid and report.reason in ("nondeterministic", "instance_dependent"), report


def test_quadratic_regex():
    require_sandbox()
    source = attack_source("quadratic_regex")
    with Sandbox(CONFIG) as pool:
        run = Background(lambda: validate_source(pool, source, VALIDATION, hint="Think before you box."))
        report = run.result(timeout=60)  # linear: well under a second; the backtracking took minutes
    assert "hint_no_leak" in report.checks and report.reason == "trivial_policy_wins", report


def test_value_flood():
    import tracemalloc

    config = dataclasses.replace(CONFIG, max_message_bytes=64 << 20, call_timeout_s=20.0)
    tracemalloc.start()
    try:
        outcome = run_attack("value_flood", {"count": 16_000_000}, play=reset, config=config)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_killed(outcome.last, Status.OUTPUT_TOO_LARGE)
    assert "values exceeds the limit" in outcome.last.error
    # 48 MB of frame; decoded it would be about a gigabyte of lists in this process
    assert peak < 200 << 20, f"the host allocated {peak >> 20} MiB for one answer"


# --- validation plays as training plays --------------------------------------------------------


def attack_hint(name: str) -> str:
    """The hint an attack file declares (``HINT = "..."``), or ''."""
    found = re.search(r'^HINT = "(.*)"$', attack_source(name), re.MULTILINE)
    return found.group(1) if found else ""


def attack_validation(name: str) -> ValidationSettings:
    """``VALIDATION``, from the attack's pinned seed when it names one (``PINNED_SEEDS``)."""
    return dataclasses.replace(VALIDATION, seed=PINNED_SEEDS.get(name))


def validate_attack(name: str, hint: str = "") -> object:
    require_sandbox()
    with Sandbox(CONFIG) as pool:
        report = validate_source(pool, attack_source(name), attack_validation(name), hint=hint)
        assert_pool_works(pool)
    assert not report.valid and report.message, report
    return report


def validate_source_once(name: str, settings: ValidationSettings) -> object:
    """``validate_attack`` with other settings (a pinned seed)."""
    require_sandbox()
    with Sandbox(CONFIG) as pool:
        report = validate_source(pool, attack_source(name), settings)
        assert_pool_works(pool)
    return report


def test_seed_zero_only():
    report = validate_attack("seed_zero_only")
    assert report.reason == "solution_does_not_win" and "at seed" in report.message, report
    assert "at seed 0," not in report.message


def test_first_instance_only():
    assert validate_attack("first_instance_only").reason == "instance_dependent"


def test_rewards_anything():
    assert validate_attack("rewards_anything").reason == "malformed_action_wins"


def test_instance_counter():
    """Fair in an interpreter's first instance, every later one won whatever the agent does."""
    report = validate_attack("instance_counter")
    assert report.reason == "instance_dependent" and "malformed action" in report.message, report


def test_late_instance_counter():
    """Rigged from the 41st instance of a worker on: validation stacks as many as training does, and
    every instance plays a probe."""
    report = validate_attack("late_instance_counter")
    assert report.reason == "instance_dependent", report
    assert 41 <= int(re.search(r"instance (\d+) made", report.message).group(1)) <= 64, report


def test_reset_counter(tmp_path):
    """Honest for its first 5000 resets in an interpreter: validation passes it, and training, which
    resets a warm worker for every episode, sees it won by an empty action; the guard flags it and the
    pool never draws it again."""
    from spade_rl.archive import ArchiveConfig
    from spade_rl.loop.guard import flag_changed
    from spade_rl.loop.stages import PlayedEnv
    from spade_rl.policy import FakePolicy, default_tokenizer
    from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
    from spade_rl.stats import play_stats

    require_sandbox()
    source = attack_source("reset_counter")
    archive = Archive(tmp_path / "archive.sqlite", ArchiveConfig())
    with Sandbox(CONFIG) as pool:
        report = validate_source(pool, source, VALIDATION)
        assert report.valid, report  # what validation cannot see
        env_id = archive.add(
            source, valid=True, reason="ok", skill="math", setting="games", iteration=0
        ).env_id
        warm = pool.open(source, report.env_kwargs).value  # the worker's earlier episodes, as training's
        assert all(warm.reset(seed=n).ok for n in range(5000))
        warm.close()
        policy = FakePolicy(lambda chat: "", tokenizer=default_tokenizer())
        specs = [EpisodeSpec(source, seed=n, env_kwargs=report.env_kwargs) for n in range(8)]
        episodes = run_episodes(policy, pool, specs, RolloutConfig(max_turns=3))
    assert any(e.won for e in episodes)  # those played in the warm worker
    played = [PlayedEnv(env_id, episodes[:4], episodes[4:], play_stats(episodes[:4], episodes[4:]))]
    [flag] = flag_changed(archive, played, iteration=1)
    assert (flag.env_id, flag.reason) == (env_id, "empty_action_won"), flag
    assert archive.get(env_id).flagged["reason"] == "empty_action_won"
    assert env_id not in archive.pool_weights()
    archive.close()


def test_mostly_no():
    """The answer is "No" at about 80% of seeds: the most common answer of other seeds, as a constant."""
    report = validate_attack("mostly_no")
    assert report.reason == "answer_replay_wins" and '"\\\\boxed{No}"' in report.message, report


def test_hint_leak_later_seed():
    report = validate_attack("hint_leak_later_seed", attack_hint("hint_leak_later_seed"))
    assert report.reason == "hint_leaks_answer" and "'42'" in report.message, report


def test_short_answer_leak():
    report = validate_attack("short_answer_leak", attack_hint("short_answer_leak"))
    assert report.reason == "hint_leaks_answer" and "'7'" in report.message, report


def test_trivially_won():
    report = validate_attack("trivially_won")
    assert report.reason == "trivial_policy_wins" and "of 16 seeds" in report.message, report


def test_words_around_the_box():
    """Honest with a bare \\boxed{}, won by any number with words around it, as a model writes a turn."""
    report = validate_attack("words_around_the_box")
    assert report.reason == "trivial_policy_wins" and "in words around it" in report.message, report


def test_paced_like_play():
    """Won by anything once 50 ms have passed since the reset, as in play: the worker's clock is virtual
    and a reset that reads it is refused."""
    report = validate_attack("paced_like_play")
    assert report.reason == "nondeterministic" and "time.perf_counter" in report.message, report


def test_unprobed_instance_count():
    """Any number wins at instance 10, 26, 42, ...: counts the fixed probe list never plays."""
    from spade_rl.design.transcripts import probed_instances

    assert not {n for n in probed_instances(1, 256) if n % 16 == 10}  # the fixed list misses every one
    report = validate_attack("unprobed_instance_count")
    assert report.reason == "instance_dependent", report
    number = int(re.search(r"instance (\d+) made", report.message).group(1))
    assert number % 16 == 10, report


def test_coin_flip_key():
    """The key is 2 or 3 whatever the question says: "2" wins half the seeds."""
    report = validate_attack("coin_flip_key")
    # refused by the common-answer cap, or where "2" (or "3") won over half the seeds by the answer replay's
    assert report.reason == "answer_replay_wins", report
    assert "max_common_answer_win_rate" in report.message or "max_answer_replay_win_rate" in report.message


def test_answer_printed_last():
    """The answer is the last number of the question, after more than 16 numbers."""
    report = validate_attack("answer_printed_last")
    assert report.reason == "trivial_policy_wins" and "number 1 from the end" in report.message, report


def test_partial_credit():
    """0.9 for any number, 1 for the right one: no trivial win, a trivial mean return of 0.9."""
    report = validate_attack("partial_credit")
    assert report.reason == "trivial_policy_wins" and "max_trivial_mean_return" in report.message, report


def test_first_reset_seed():
    """Honest only where an interpreter's first reset was seed 0: the battery's seeds are drawn at random;
    pinned to 0, its worker is honest, and the trivial search, in a worker of its own, is not."""
    report = validate_attack("first_reset_seed")
    assert report.reason == "malformed_action_wins" and report.seed != 0, report
    pinned = validate_source_once("first_reset_seed", dataclasses.replace(VALIDATION, seed=0))
    assert pinned.reason == "malformed_action_wins" and "as training plays" in pinned.message, pinned


def test_solution_asked():
    """Honest only after solution() was asked for: the trivial search plays in a worker never asked."""
    report = validate_attack("solution_asked")
    assert report.reason == "malformed_action_wins" and "as training plays" in report.message, report


def test_hashed_seeds():
    """Honest at the seeds it computes from its own source, as validation drew them from seed 0: seed 0
    pinned, it passes (the attack works where the seeds can be computed); drawn at random, it is refused."""
    pinned = validate_source_once("hashed_seeds", dataclasses.replace(VALIDATION, seed=0))
    assert pinned.valid, pinned
    report = validate_attack("hashed_seeds")
    assert report.reason == "malformed_action_wins", report


def test_negative_constant():
    report = validate_attack("negative_constant")
    assert report.reason == "trivial_policy_wins" and "-42" in report.message, report


def test_negative_constant_flagged_in_play(tmp_path):
    """Had it been played, an agent that learned the constant is flagged by the guard: one answer won at
    every seed (``one_answer_won``), and the environment leaves the pool."""
    from spade_rl.archive import ArchiveConfig
    from spade_rl.loop.guard import flag_changed
    from spade_rl.loop.stages import PlayedEnv
    from spade_rl.policy import FakePolicy, default_tokenizer
    from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
    from spade_rl.stats import play_stats

    require_sandbox()
    source = attack_source("negative_constant")
    archive = Archive(tmp_path / "archive.sqlite", ArchiveConfig())
    env_id = archive.add(source, valid=True, reason="ok", skill="math", setting="games", iteration=0).env_id
    policy = FakePolicy(lambda chat: "\\boxed{-42}", tokenizer=default_tokenizer())
    specs = [EpisodeSpec(source, seed=n, env_kwargs={"max_turns": 3}) for n in range(32)]
    with Sandbox(CONFIG) as pool:
        episodes = run_episodes(policy, pool, specs, RolloutConfig(max_turns=3))
    assert all(e.won for e in episodes)
    played = [PlayedEnv(env_id, episodes[:16], episodes[16:], play_stats(episodes[:16], episodes[16:]))]
    [flag] = flag_changed(archive, played, iteration=1)
    assert (flag.env_id, flag.reason) == (env_id, "one_answer_won") and "32 of 32 seeds" in flag.message, flag
    assert env_id not in archive.pool_weights()
    archive.close()


def test_first_reset_seed_flagged_in_play(tmp_path):
    """Had it been validated the old way (its first reset at seed 0), training would pay any answer: the
    guard's probe plays validation's random policy where and as training plays, wins every episode, and
    flags it (``trivial_policy_won``), though the agent's answers differ (no ``one_answer_won``)."""
    from spade_rl.archive import ArchiveConfig
    from spade_rl.loop.guard import flag_changed
    from spade_rl.loop.probe import PROBE_EPISODES, make_probe
    from spade_rl.loop.stages import PlayedEnv
    from spade_rl.policy import FakePolicy, default_tokenizer
    from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
    from spade_rl.stats import play_stats

    require_sandbox()
    source = attack_source("first_reset_seed")
    archive = Archive(tmp_path / "archive.sqlite", ArchiveConfig())
    env_id = archive.add(
        source,
        valid=True,
        reason="ok",
        skill="math",
        setting="games",
        iteration=0,
        env_kwargs={"max_turns": 3},
    ).env_id
    guesses = iter(range(100, 1000, 7))
    policy = FakePolicy(lambda chat: f"\\boxed{{{next(guesses)}}}", tokenizer=default_tokenizer())
    specs = [EpisodeSpec(source, seed=n + 1, env_kwargs={"max_turns": 3}) for n in range(16)]
    with Sandbox(CONFIG) as pool:
        episodes = run_episodes(policy, pool, specs, RolloutConfig(max_turns=3))
        assert all(e.won for e in episodes)
        probe = make_probe(pool, archive, random.Random(0), dataclasses.replace(VALIDATION, max_turns=3), 2.0)
        assert probe(env_id) == (PROBE_EPISODES, PROBE_EPISODES)
        played = [PlayedEnv(env_id, episodes[:8], episodes[8:], play_stats(episodes[:8], episodes[8:]))]
        [flag] = flag_changed(archive, played, 1, probe, VALIDATION.max_trivial_win_rate)
    assert (flag.env_id, flag.reason) == (env_id, "trivial_policy_won"), flag
    assert env_id not in archive.pool_weights()
    archive.close()


def test_any_two_digits():
    report = validate_attack("any_two_digits")
    assert report.reason == "trivial_policy_wins", report


HONEST_WITH_MAX_TURNS = """
class ArgsEnv:
    def __init__(self, max_turns=None):
        self.cheat = max_turns is None  # honest only when the validator's max_turns is passed
        self.max_turns = max_turns or 5
    def reset(self, seed=None):
        self.turn = 0
        self.word = ("go", "run", "sit", "hop", "fly", "dig")[(seed or 0) % 6]  # not one answer at every seed
        return "Say the word of this seed.", {}
    def step(self, action):
        self.turn += 1
        won = self.cheat or action == self.word
        return ("yes" if won else "no"), float(won), won, self.turn >= self.max_turns and not won, {}
    def solution(self):
        return self.word
"""


def test_honest_only_with_max_turns():
    """Validation records the constructor arguments it used; play (loop, CLI, suites) uses them."""
    from spade_rl.design.validate import play_kwargs
    from spade_rl.policy import FakePolicy, default_tokenizer
    from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes

    require_sandbox()
    with Sandbox(CONFIG) as pool:
        report = validate_source(pool, HONEST_WITH_MAX_TURNS, VALIDATION)
        assert report.valid and report.env_kwargs == {"max_turns": VALIDATION.max_turns}, report
        kwargs = play_kwargs(HONEST_WITH_MAX_TURNS, report.env_kwargs, max_turns=3)
        policy = FakePolicy(lambda chat: "stop", tokenizer=default_tokenizer())
        [episode] = run_episodes(
            policy, pool, [EpisodeSpec(HONEST_WITH_MAX_TURNS, env_kwargs=kwargs)], RolloutConfig(max_turns=3)
        )
    assert not episode.won and episode.stop_reason == "max_turns", episode.stop_reason


# --- one environment cannot hurt the others of a batch -------------------------------------------


def test_half_answer_stall():
    require_sandbox()
    honest = [BENIGN.replace("EchoEnv", f"Echo{i}Env") for i in range(7)]  # a worker each
    with Sandbox(dataclasses.replace(CONFIG, pool_size=8)) as pool:
        opened = pool.open_many([(attack_source("half_answer_stall"), None), *[(s, None) for s in honest]])
        envs = [o.value for o in opened]
        assert all(o.ok for o in opened) and len({e.worker_pid for e in envs}) == 8, opened
        assert all(r.ok for r in pool.call_many([(e, "reset", {"seed": 0}) for e in envs]))
        results = pool.call_many([(e, "step", {"action": "hi"}) for e in envs])
        assert_killed(results[0], Status.TIMEOUT)
        for result in results[1:]:  # answered at once: neither killed nor timed out
            assert result.ok and result.value == ["you said hi", 1.0, True, False, {}], result
        assert_pool_works(pool)


def test_slow_every_step():
    from spade_rl.policy import FakePolicy, default_tokenizer
    from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes

    require_sandbox()
    policy = FakePolicy(lambda chat: "again", tokenizer=default_tokenizer())
    config = RolloutConfig(max_turns=40, call_timeout_s=1.0, episode_env_budget_s=1.0)
    with Sandbox(CONFIG) as pool:
        slow, fast = run_episodes(
            policy,
            pool,
            [EpisodeSpec(attack_source("slow_every_step"), env_kwargs={"delay": 0.3}), EpisodeSpec(BENIGN)],
            config,
        )
    assert slow.stop_reason == "env_error" and slow.error.startswith("time_budget"), slow.error
    assert 3 <= len(slow.turns) <= 5, len(slow.turns)  # about 1 s of the environment's time
    assert fast.won


def test_busy_between_calls():
    def play(env):
        first = env.reset(seed=0)
        time.sleep(1.5)  # idle, as a worker waits for the model to write the next action
        return [first, env.step("anything")]

    outcome = run_attack("busy_between_calls", play=play)
    assert outcome.calls[0].ok, outcome.calls[0]
    assert_killed(outcome.last, Status.PROTOCOL_ERROR)
    assert "of CPU between calls" in outcome.last.error, outcome.last


# --- the seccomp allow-list ----------------------------------------------------------------------

OWNER = """
import sys, time
from spade_rl.sandbox import SandboxConfig, Sandbox
from spade_rl.sandbox.config import DEFAULT_PRELOAD
pool = Sandbox(SandboxConfig(pool_size=1, preload=(*DEFAULT_PRELOAD, "ctypes")))
env = pool.open(open(sys.argv[1]).read()).value
first = env.reset(0)
print(env.worker_pid, first.value[0] if first.ok else first.reason, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie waits for its reaper: it runs nothing


def test_clear_parent_death():
    """The owner of a pool dies by SIGKILL (nothing of it runs then); its workers die with it."""
    require_sandbox()
    owner = subprocess.Popen(
        [sys.executable, "-I", "-c", OWNER, str(ATTACKS / "clear_parent_death.py")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        pid_text, observation = owner.stdout.readline().strip().split(" ", 1)
        worker = int(pid_text)
        assert observation.startswith("refused"), observation
        assert alive(worker)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 10
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        survived = alive(worker)
        if survived:
            os.kill(worker, signal.SIGKILL)
        assert not survived, "the worker outlived its owner"
    finally:
        if owner.poll() is None:
            os.killpg(owner.pid, signal.SIGKILL)
            owner.wait()
        owner.stdout.close()


def test_interval_timer():
    assert_raised(run_attack("interval_timer", play=reset).last, "itimer_error")  # signal.ItimerError


def test_renice_others(sibling):
    # as they were before the attack (a suite run under `nice` starts the sibling at its niceness, not 0)
    priority, affinity = os.getpriority(os.PRIO_PROCESS, sibling.pid), os.sched_getaffinity(sibling.pid)
    outcome = run_attack("renice_others", {"target": sibling.pid})
    assert_raised(outcome.opened, "PermissionError", "init_raised")
    assert os.getpriority(os.PRIO_PROCESS, sibling.pid) == priority
    assert os.sched_getaffinity(sibling.pid) == affinity


def shm_segments() -> set[str]:
    return {line.split()[1] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]}


def test_sysv_shm():
    before = shm_segments()
    outcome = run_attack("sysv_shm")
    left = shm_segments() - before
    for segment in left:  # clean up before failing
        subprocess.run(["ipcrm", "-m", segment], check=False)
    assert not left, f"shared memory left behind: {left}"
    assert_raised(outcome.opened, "PermissionError", "init_raised")


def test_file_attributes(open_dir):
    target = open_dir / "owned"
    target.write_text("x")
    target.chmod(0o644)
    if IS_ROOT:
        os.chown(target, WORKER_UID, WORKER_GID)
    before = target.stat()
    outcome = run_attack("file_attributes", {"target": str(target)})
    assert_raised(outcome.opened, "PermissionError", "init_raised")
    after = target.stat()
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)
    try:
        assert "user.spade" not in os.listxattr(target)
    except OSError:
        pass  # no extended attributes on this file system


def test_inotify_watch():
    assert_raised(run_attack("inotify_watch").opened, "PermissionError", "init_raised")


# --- the validator and the command line --------------------------------------------------------

VALIDATION_REASONS = REASONS - {"ok"}  # the failure codes of spade_rl.design.validate
CLI_ATTACKS = [n for n in VALIDATED_ATTACKS if n not in PINNED_SEEDS]  # validated from drawn seeds
VALIDATION = ValidationSettings(call_timeout_s=CONFIG.call_timeout_s)


@pytest.fixture(scope="module")
def validator_pool():
    require_sandbox()
    kill_parent_blocked()  # before kill_everyone runs through the validator
    assert_default_targets_absent()
    pool = Sandbox(CONFIG)
    pool.start()
    workers = pool_processes()
    yield pool
    workers |= pool_processes()
    pool.close()
    assert_no_leftovers(workers)
    assert_default_targets_absent()


@pytest.mark.parametrize("name", VALIDATED_ATTACKS)
def test_validator_rejects(name, validator_pool):
    report = validate_source(validator_pool, attack_source(name), attack_validation(name))
    assert not report.valid, report
    assert report.reason in VALIDATION_REASONS, report
    assert report.message, report
    leaked = [s for s in host_secrets() if s in report.message]
    assert not leaked, report
    assert_default_targets_absent()


def cli_command() -> list[str]:
    script = Path(sys.executable).with_name("spade-rl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "spade_rl"]


def run_cli_validate(names: list[str]) -> subprocess.CompletedProcess:
    """``spade-rl envs validate --json`` on attack files, in a child that holds a secret in its
    initial environment; checks that the host is unharmed."""
    secret = "spade-cli-secret-" + secrets.token_hex(16)
    files = [str(ATTACKS / f"{n}.py") for n in names]
    existing = frozenset(p.pid for p in processes())
    proc = subprocess.Popen(
        [*cli_command(), "envs", "validate", "--json", *files],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, SECRET_NAME: secret},
    )
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert_no_leftovers(set(), parent_pid=proc.pid, existing=existing)
    assert_default_targets_absent()
    leaked = [s for s in [secret, *host_secrets()] if s in out or s in err]
    assert not leaked, [s[:40] for s in leaked]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def assert_cli_rejects(done: subprocess.CompletedProcess, names: list[str]) -> None:
    assert done.returncode == 1, done.stderr[-2000:]
    reports = json.loads(done.stdout)
    assert [r["path"] for r in reports] == [str(ATTACKS / f"{n}.py") for n in names]
    for report in reports:
        assert report["valid"] is False, report
        assert report["reason"] in VALIDATION_REASONS, report
        assert report["message"], report


class Background:
    """Runs a function in a thread; ``result`` waits for it and re-raises what it raised."""

    def __init__(self, fn: Callable[[], object]):
        self.value: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test that waits for it
            self.error = exc

    def result(self, timeout: float) -> object:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running after {timeout} s"
        if self.error is not None:
            raise self.error
        return self.value


@pytest.fixture(scope="module", autouse=True)
def cli_in_background(request):
    """The command-line run over every attack takes a while (its own pool, default deadlines):
    start it with the module, when its test is selected, so that it overlaps the other tests."""
    if not any(item.name == "test_cli_validate_rejects_every_attack" for item in request.session.items):
        yield None
        return
    require_sandbox()
    kill_parent_blocked()  # before kill_everyone runs through the command line
    assert_default_targets_absent()
    run = Background(lambda: run_cli_validate(CLI_ATTACKS))
    yield run
    run.thread.join(300)


@pytest.mark.slow
def test_cli_validate_rejects_every_attack(cli_in_background):
    assert_cli_rejects(cli_in_background.result(timeout=300), CLI_ATTACKS)


# --- last, once the command-line run in the background is done ---------------------------------


@pytest.mark.slow
def test_ignore_signals_hits_the_cpu_limit():
    """With no call deadline in reach, RLIMIT_CPU is the backstop: SIGXCPU is ignored, so the hard
    limit (soft + 5 s) kills it with SIGKILL."""
    config = dataclasses.replace(CONFIG, cpu_seconds=1, call_timeout_s=30.0)
    outcome = run_attack("ignore_signals", play=reset, config=config)
    assert_killed(outcome.last, Status.CRASHED, "SIGKILL")
    assert outcome.last.elapsed_s < 20
