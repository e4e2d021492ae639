"""Benchmark of ``spade-rl envs serve`` under a trainer's load, against the same episodes played
directly on sandboxes, measured in one run.

    python bench/serve_load.py [--episodes 400] [--threads 32] [--max-sessions 16] [--json]

Starts ``spade-rl envs serve guess maze --max-sessions N`` on a free loopback port and plays
``--episodes`` episodes of guess and maze over HTTP as a trainer does (issue 57, item 6): each episode
a ``/reset`` with its own ``episode_id``, then its ``/step``s (each seed's winning moves, from the
environment's own ``solution()``), from ``--threads`` threads. Two loads, each on a fresh server:

1. ``fits``: as many threads as sessions; no request should be refused;
2. ``oversubscribed``: ``--threads`` threads (by default twice the sessions, as in the issue); a
   refused reset (503, the server full) is counted and retried after ``--retry-s`` (the server's
   ``Retry-After`` says 1 s; a trainer that waits less only asks more often), and an episode refused
   for ``--give-up-s`` in a row is given up.

The baseline is the same episodes played in this process on ``--max-sessions`` one-worker sandboxes
from as many threads, through the same ``SandboxedEpisode`` the server drives, with no HTTP. For each
load it prints episodes per second and its ratio to the baseline, the refusals (503), other errors,
the episodes given up, the peak memory of the server and its workers (the sum of their RSS, sampled
every 0.1 s) and the most workers seen, and the server's processes left 1 s after SIGTERM (0 expected).
Figures depend on the machine and its load; compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from spade_rl.envs import reference
from spade_rl.envs.sources import reference_entry
from spade_rl.interop.gym_episode import SandboxedEpisode
from spade_rl.sandbox import Sandbox, SandboxConfig

NAMES = ("guess", "maze")
SEEDS = range(8)


def solutions() -> dict[tuple[str, int], list[str]]:
    """The winning moves of each environment at each seed, from one sandbox of our own."""
    found = {}
    with Sandbox(SandboxConfig(pool_size=1)) as sandbox:
        for name in NAMES:
            env = sandbox.open(reference.source(name)).value
            for seed in SEEDS:
                env.reset(seed=seed)
                moves = env.solution().value
                found[name, seed] = [moves] if isinstance(moves, str) else moves
            env.close()
    return found


def plan(episodes: int) -> list[tuple[str, int]]:
    """Episode ``i`` plays ``NAMES[i % 2]`` at seed ``(i // 2) % len(SEEDS)``."""
    return [(NAMES[i % 2], SEEDS[(i // 2) % len(SEEDS)]) for i in range(episodes)]


def run_threads(count: int, work, jobs: list) -> float:
    """``work(job)`` for every job from ``count`` threads; the seconds it took."""
    lock, queue = threading.Lock(), list(reversed(jobs))

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop()
            work(job)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


# --- the baseline: the same episodes on sandboxes in this process -----------------------------------
def direct(episodes: int, sessions: int, moves: dict) -> dict:
    sandboxes = [Sandbox(SandboxConfig(pool_size=1, max_workers=1)) for _ in range(sessions)]
    # free sandboxes with the environment each last played: one that has it loaded is taken first, as
    # the server does (a worker is bound to one source)
    free, lock, wins = [("", sandbox) for sandbox in sandboxes], threading.Lock(), []

    def play(job: tuple[int, str, int]) -> None:
        _, name, seed = job
        with lock:
            index = next((i for i, (last, _) in enumerate(free) if last == name), 0)
            sandbox = free.pop(index)[1]
        try:
            episode = SandboxedEpisode(sandbox, reference_entry(name))
            episode.reset(seed)
            for move in moves[name, seed]:
                outcome = episode.step(move)
            episode.close()
            wins.append(outcome.reward == 1.0)
        finally:
            with lock:
                free.append((name, sandbox))

    try:
        jobs = [(i, name, seed) for i, (name, seed) in enumerate(plan(episodes))]
        seconds = run_threads(sessions, play, jobs)
    finally:
        for sandbox in sandboxes:
            sandbox.close()
    return {
        "episodes": len(wins),
        "won": sum(wins),
        "seconds": seconds,
        "episodes_per_s": len(wins) / seconds,
    }


# --- the server ----------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tree(pid: int) -> list[tuple[int, int]]:
    """``pid``'s live descendants and their parents: its sandbox workers (its children) and what a
    worker's start forks for a moment; without zombies and the copies of the server that a worker's
    start forks before it execs."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
            started = b"sandbox.worker" in (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if state != "Z" and started:
            parents.setdefault(int(ppid), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for child in parents.get(parent, []):
            found.append((child, parent))
            todo.append(child)
    return found


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Server:
    """A running ``spade-rl envs serve guess maze``, its memory sampled until stopped."""

    def __init__(self, sessions: int):
        self.base = f"http://127.0.0.1:{free_port()}"
        port = self.base.rsplit(":", 1)[1]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spade_rl",
                "envs",
                "serve",
                *NAMES,
                "--port",
                port,
                "--max-sessions",
                f"{sessions}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(self.base + "/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                raise SystemExit("the server did not start")
            time.sleep(0.1)
        self.peak_kib, self.peak_workers, self._stop = 0, 0, threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            processes = tree(self.proc.pid)
            workers = sum(parent == self.proc.pid for _, parent in processes)
            self.peak_workers = max(self.peak_workers, workers)
            self.peak_kib = max(self.peak_kib, sum(rss_kib(p) for p in [self.proc.pid, *dict(processes)]))

    def stop(self) -> int:
        """SIGTERM; the server's processes still alive 1 s after it exited."""
        self._stop.set()
        self._sampler.join()
        processes = [pid for pid, _ in tree(self.proc.pid)]
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        time.sleep(1.0)
        return sum(Path(f"/proc/{pid}").exists() for pid in processes)


def over_http(
    episodes: int, threads: int, sessions: int, moves: dict, retry_s: float, give_up_s: float
) -> dict:
    server = Server(sessions)
    counts = {"won": 0, "refused_503": 0, "other_errors": 0, "given_up": 0}
    lock = threading.Lock()

    def count(key: str) -> None:
        with lock:
            counts[key] += 1

    def play(job: tuple[int, str, int]) -> None:
        index, name, seed = job
        url, episode_id = f"{server.base}/envs/{name}", f"e{index}"
        refused_since = time.monotonic()
        while True:
            answer = requests.post(url + "/reset", json={"seed": seed, "episode_id": episode_id}, timeout=60)
            if answer.status_code != 503:
                break
            count("refused_503")
            if time.monotonic() - refused_since > give_up_s:
                count("given_up")
                return
            time.sleep(retry_s)
        for move in moves[name, seed]:
            if not answer.ok:
                count("other_errors")
                return
            answer = requests.post(
                url + "/step", json={"action": {"message": move}, "episode_id": episode_id}, timeout=60
            )
        if answer.ok and answer.json()["reward"] == 1.0:
            count("won")
        else:
            count("other_errors")

    try:
        jobs = [(i, name, seed) for i, (name, seed) in enumerate(plan(episodes))]
        seconds = run_threads(threads, play, jobs)
    finally:
        left = server.stop()
    return {
        **counts,
        "threads": threads,
        "seconds": seconds,
        "episodes_per_s": counts["won"] / seconds,
        "peak_memory_mib": server.peak_kib / 1024,
        "peak_workers": server.peak_workers,
        "processes_left_after_stop": left,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400, help="episodes per load")
    parser.add_argument("--max-sessions", type=int, default=16, help="the server's --max-sessions")
    parser.add_argument(
        "--threads", type=int, default=None, help="oversubscribed threads (default 2x sessions)"
    )
    parser.add_argument("--retry-s", type=float, default=0.1, help="wait after a 503 before retrying")
    parser.add_argument(
        "--give-up-s", type=float, default=30.0, help="give an episode up after refusals this long"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    sessions, threads = args.max_sessions, args.threads or 2 * args.max_sessions

    moves = solutions()
    results = {
        "episodes": args.episodes,
        "max_sessions": sessions,
        "direct": direct(args.episodes, sessions, moves),
    }
    for load, count in (("fits", sessions), ("oversubscribed", threads)):
        results[load] = over_http(args.episodes, count, sessions, moves, args.retry_s, args.give_up_s)
        results[load]["vs_direct"] = results[load]["episodes_per_s"] / results["direct"]["episodes_per_s"]

    if args.json:
        print(json.dumps(results, indent=2))
        return
    base = results["direct"]
    print(f"{args.episodes} episodes of guess and maze, --max-sessions {sessions}")
    print(f"direct (no HTTP, {sessions} threads): {base['episodes_per_s']:.1f} episodes/s, {base['won']} won")
    header = ("load", "threads", "episodes/s", "vs direct", "won", "503s", "errors", "given up", "peak MiB",
              "workers", "left")  # fmt: skip
    print("".join(f"{h:>11}" for h in header))
    for load in ("fits", "oversubscribed"):
        r = results[load]
        row = (load, r["threads"], f"{r['episodes_per_s']:.1f}", f"{r['vs_direct']:.2f}x", r["won"],
               r["refused_503"], r["other_errors"], r["given_up"], f"{r['peak_memory_mib']:.0f}",
               r["peak_workers"], r["processes_left_after_stop"])  # fmt: skip
        print("".join(f"{v!s:>11}" for v in row))


if __name__ == "__main__":
    main()
