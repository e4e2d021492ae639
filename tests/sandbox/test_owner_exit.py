"""No sandbox worker outlives the command that started it: ``spade-rl envs validate`` on hostile files,
ended every way a command ends (it finishes, it is sent SIGTERM, it is killed with SIGKILL), many
times, several at once.

A harness process runs the commands. It makes itself the child subreaper, so that a worker orphaned
by its command is reparented to the harness (not to the machine's init, where the workers of other
runs on the machine would be mixed in), and it sends a signal as soon as a worker of the command
appears (a worker still starting: the moment a worker used to outlive its owner, until it reached
its uid drop). Once the command is gone, every process found by the command's marker in its command
line, by the process group or session of a worker seen, among the orphans reparented to the harness
or of the worker's uid (65534 when run as root) must be dead: gone, a zombie, or with SIGKILL
pending (nothing of it runs again). Everything found is killed and reaped afterwards.

    python -m pytest tests/sandbox/test_owner_exit.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spade_rl.sandbox import SandboxConfig, doctor

ATTACKS = Path(__file__).resolve().parent / "attacks"
WORKER_UID = SandboxConfig().unprivileged_uid if os.geteuid() == 0 else os.geteuid()
HOSTILE = ("own_reason_code", "lone_surrogate")  # the two files a worker once outlived its command with
ENDS = ("normal", "sigterm", "sigkill")

HARNESS = r"""
import ctypes, json, os, signal, subprocess, sys, time

plan = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    raise SystemExit("cannot become the child subreaper")
me = os.getpid()


def table():
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{name}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
        found[int(name)] = {
            "state": fields[0].decode(), "ppid": int(fields[1]), "pgrp": int(fields[2]),
            "sid": int(fields[3]), "uid": int(status["Uid"].split()[0]),
            "kill_pending": bool(pending & (1 << (signal.SIGKILL - 1))), "cmdline": cmdline,
        }
    return found


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def survey(r, now, commands):
    # What of run r's command is left, once it has exited; every process found is killed.
    groups = r["workers"]
    suspects = {}
    for pid, p in now.items():
        why = [
            name for name, hit in (
                ("marker", r["marker"] in p["cmdline"]),
                ("process group", p["pgrp"] in groups or p["sid"] in groups),
                ("orphan", p["ppid"] == me),
                ("uid", p["uid"] == plan["worker_uid"] and pid not in initial and p["ppid"] in (me, 1)),
            ) if hit
        ]
        if why and pid != me and pid not in commands:
            suspects[pid] = {**p, "found_by": why}
    alive = {pid: p for pid, p in suspects.items() if p["state"] not in "ZX" and not p["kill_pending"]}
    for pid in suspects:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return {
        "file": os.path.basename(r["file"]), "end": r["end"], "returncode": r["proc"].returncode,
        "signalled": r.get("sent", False), "workers_seen": len(groups),
        "alive": [{k: v for k, v in p.items() if k != "cmdline"} | {"pid": pid} for pid, p in alive.items()],
    }


initial = set(table())
results = []
for batch in plan["batches"]:
    runs = []
    for run in batch:
        proc = subprocess.Popen(
            [*plan["command"], "envs", "validate", "--json", run["file"]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        runs.append({**run, "proc": proc, "marker": f'"parent_pid": {proc.pid},'.encode(), "workers": set()})
    commands = {r["proc"].pid for r in runs}
    deadline = time.monotonic() + 120
    while any("result" not in r for r in runs) and time.monotonic() < deadline:
        now = table()
        for r in runs:
            if "result" in r:
                continue
            seen = {pid for pid, p in now.items() if r["marker"] in p["cmdline"]}
            r["workers"] |= seen
            if r["proc"].poll() is not None:  # gone: look at once, before a worker could finish starting
                r["result"] = survey(r, table(), commands)
            elif seen and r["end"] != "normal" and "sent" not in r:
                r["proc"].send_signal(signal.SIGTERM if r["end"] == "sigterm" else signal.SIGKILL)
                r["sent"] = True
        time.sleep(0.002)
    for r in runs:
        r["proc"].wait(timeout=120)
        results.append(r.get("result") or survey(r, table(), commands))
    reap()
time.sleep(0.2)
reap()
print(json.dumps(results))
"""


def cli_command() -> list[str]:
    script = Path(sys.executable).with_name("spade-rl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "spade_rl"]


@pytest.mark.slow
def test_no_worker_outlives_envs_validate():
    rows = doctor.layer_table(SandboxConfig())[0]
    missing = [r.layer for r in rows if r.mode == "required" and not r.available]
    if missing:
        pytest.skip(f"spade-rl doctor: this machine lacks required sandbox layer(s) {missing}")
    files = [str(ATTACKS / f"{name}.py") for name in HOSTILE]
    # Four rounds of three commands at once (one per way of ending), each file twice per way: 12 runs.
    batches = [[{"file": files[(r + e) % 2], "end": end} for e, end in enumerate(ENDS)] for r in range(4)]
    plan = {"command": cli_command(), "worker_uid": WORKER_UID, "batches": batches}
    done = subprocess.run(
        [sys.executable, "-I", "-c", HARNESS, json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert len(results) == 12
    survivors = [r for r in results if r["alive"]]
    assert not survivors, f"sandbox processes outlived their command: {survivors}"
    for result in results:
        assert result["workers_seen"] >= 1, result  # the command got as far as starting a worker
        # SIGTERM ends the command through its with-blocks (exit_on_sigterm): status 143, not -15
        assert result["returncode"] == {"normal": 1, "sigterm": 143, "sigkill": -9}[result["end"]], result
