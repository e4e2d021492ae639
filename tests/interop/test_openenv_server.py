"""``spade-rl envs serve`` end to end: the command as a user runs it, on 127.0.0.1 and a free port, driven
by OpenEnv's own client (openenv-core's ``GenericEnvClient`` over its WebSocket session protocol) and by
plain HTTP. A reference game is played to a win with its ``solution()`` moves (computed in a sandbox of
the test's own); then the refusals (unknown environment, bad action, steps out of order, capacity, idle
sessions), hostile environments ending their episode with an error instead of breaking the server, and
the clean shutdown on SIGTERM (every sandbox worker of the server gone)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")
generic_client = pytest.importorskip(  # openenv-core 0.3, OpenEnv's own client
    "openenv.core.generic_client", reason="pip install --no-deps openenv-core==0.3.0"
)

from fixture_envs import HANGS, PARITY  # noqa: E402
from spade_rl.envs import reference  # noqa: E402
from spade_rl.sandbox import Sandbox, SandboxConfig  # noqa: E402

CRASHES = PARITY.replace("self.turn += 1", "import os; os._exit(3)").replace("ParityEnv", "CrashEnv")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def workers(pid: int) -> list[int]:
    """The server's live sandbox workers: its children that run the worker (not the copy of the server
    that a worker's start forks for a moment before it execs), zombies left out."""
    found = []
    for child in children(pid):
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and b"sandbox.worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return found


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the server's sandbox workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


class Served:
    """A running ``spade-rl envs serve``: its base URL, process and output."""

    def __init__(self, tmp_path: Path, *args: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"serve-{self.port}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "spade_rl", "envs", "serve", *args, "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if requests.get(self.base + "/health", timeout=1).ok:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        self.proc.kill()
        self.proc.wait()
        raise AssertionError(f"the server did not start: {self.log.read_text()}")

    def client(self, name: str):
        return generic_client.GenericEnvClient(base_url=f"{self.base}/envs/{name}").sync()

    def active_sessions(self) -> int:
        return requests.get(self.base + "/envs", timeout=5).json()["active_sessions"]

    def wait_sessions(self, count: int) -> None:
        deadline = time.monotonic() + 10
        while self.active_sessions() != count:
            assert time.monotonic() < deadline, f"{self.active_sessions()} sessions, expected {count}"
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM, as a service manager stops it (or SIGINT, Ctrl-C): a clean shutdown with status 0,
        no worker left."""
        workers = children(self.proc.pid)
        self.proc.send_signal(sig)
        try:
            status = self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:  # never leave a server behind, even when the test fails
                self.proc.kill()
                self.proc.wait()
        assert workers, "the server's sandbox workers are its children"
        assert status == 0, self.log.read_text()
        assert "Application shutdown complete" in self.log.read_text()
        time.sleep(0.2)
        assert [w for w in workers if Path(f"/proc/{w}").exists()] == [], self.log.read_text()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "hang.py").write_text(HANGS, encoding="utf-8")
    (tmp / "crash.py").write_text(CRASHES, encoding="utf-8")
    server = Served(
        tmp, "guess", "maze", str(tmp / "hang.py"), str(tmp / "crash.py"), "--call-timeout", "0.5"
    )
    yield server
    server.stop()


def solution(name: str, seed: int) -> tuple[str, list[str]]:
    """The first observation and the winning moves of reference environment ``name`` at ``seed``,
    from a sandbox of the test's own."""
    with Sandbox(SandboxConfig(pool_size=1)) as sandbox:
        env = sandbox.open(reference.source(name)).value
        first = env.reset(seed=seed).value[0]
        moves = env.solution().value
        env.close()
    return first, [moves] if isinstance(moves, str) else moves


@pytest.mark.parametrize(("name", "seed"), [("guess", 5), ("maze", 2)])
def test_openenv_client_plays_a_reference_environment_to_a_win(served, name, seed):
    first, moves = solution(name, seed)
    with served.client(name) as env:
        result = env.reset(seed=seed)
        assert result.observation["text"] == first and result.done is False and result.reward is None
        rewards, dones = [], []
        for move in moves:
            result = env.step({"message": move})
            rewards.append(result.reward)
            dones.append(result.done)
        assert rewards == [0.0] * (len(moves) - 1) + [1.0]
        assert dones == [False] * (len(moves) - 1) + [True]
        assert result.observation["terminated"] is True and result.observation["error"] is None
        state = env.state()
        assert (state["env"], state["seed"], state["step_count"]) == (name, seed, len(moves))
        assert state["done"] is True and state["episode_return"] == 1.0
        # The same connection plays the next episode after a reset.
        assert env.reset(seed=seed).observation["text"] == first


def test_openenv_client_refusals_say_what_is_wrong(served):
    with served.client("chess") as env, pytest.raises(RuntimeError) as caught:
        env.reset()
    assert "unknown environment 'chess'; served: guess, maze, hang, crash" in str(caught.value)
    assert "FACTORY_ERROR" in str(caught.value)
    with served.client("guess") as env:
        with pytest.raises(RuntimeError, match=r"step before reset.*EXECUTION_ERROR"):
            env.step({"message": "\\boxed{50}"})
        env.reset(seed=5)
        with pytest.raises(RuntimeError, match=r"message: Field required.*VALIDATION_ERROR"):
            env.step({"msg": "\\boxed{50}"})
        with pytest.raises(RuntimeError, match=r"message: Input should be a valid string.*VALIDATION_ERROR"):
            env.step({"message": 50})
        with pytest.raises(RuntimeError, match=r"at most 65536.*VALIDATION_ERROR"):
            env.step({"message": "x" * 70000})
        with pytest.raises(RuntimeError, match=r"seed: Input should be greater than or equal to 0"):
            env.reset(seed=-1)
        # A refused message leaves the session as it was: the episode goes on and can be won.
        for move in solution("guess", 5)[1]:
            result = env.step({"message": move})
        assert result.reward == 1.0 and result.done
        with pytest.raises(RuntimeError, match=r"the episode is over.*EXECUTION_ERROR"):
            env.step({"message": "\\boxed{50}"})


@pytest.mark.parametrize(("name", "reason"), [("hang", "timeout"), ("crash", "crashed")])
def test_a_hostile_environment_ends_its_episode_and_the_next_reset_starts_afresh(served, name, reason):
    with served.client(name) as env:
        assert env.reset(seed=0).observation["text"] == "Say something of the right length."
        started = time.monotonic()
        result = env.step({"message": "odd"})
        assert time.monotonic() - started < 5  # the 0.5 s deadline, not a hang
        assert result.done is True and result.reward == 0.0
        assert result.observation["error_reason"] == reason and result.observation["truncated"] is True
        assert result.observation["error"]
        assert env.reset(seed=0).observation["error"] is None  # a new worker, a new instance
    with served.client("guess") as env:  # the server still plays the others
        assert env.reset(seed=1).done is False


def test_http_endpoints_follow_openenv_and_refuse_clearly(served):
    base = served.base
    assert requests.get(base + "/health").json() == {"status": "healthy"}
    listed = requests.get(base + "/envs").json()
    assert [e["name"] for e in listed["environments"]] == ["guess", "maze", "hang", "crash"]
    schema = requests.get(base + "/envs/guess/schema").json()
    assert schema["action"]["required"] == ["message"] and "text" in schema["observation"]["properties"]
    assert (
        requests.get(base + "/envs/guess/metadata").json()["description"] == reference.DESCRIPTIONS["guess"]
    )
    first, moves = solution("guess", 7)
    once = requests.post(base + "/envs/guess/reset", json={"seed": 7}).json()  # OpenEnv's stateless reset
    assert once["observation"]["text"] == first and once["done"] is False
    # An HTTP episode: /reset with an episode_id, then /step and /state with the same one.
    assert requests.post(base + "/envs/guess/reset", json={"seed": 7, "episode_id": "e1"}).ok
    for move in moves:
        answer = requests.post(
            base + "/envs/guess/step", json={"action": {"message": move}, "episode_id": "e1"}
        )
    assert answer.json()["reward"] == 1.0 and answer.json()["done"] is True
    state = requests.get(base + "/envs/guess/state", params={"episode_id": "e1"}).json()
    assert state["episode_id"] == "e1" and state["step_count"] == len(moves)
    refusals = [
        (requests.post(base + "/envs/chess/reset", json={}), 404, "unknown environment 'chess'"),
        (requests.post(base + "/reset", json={}), 404, "4 environments are served: use /envs/<name>/"),
        (requests.post(base + "/envs/guess/step", json={"action": {"message": "1"}}), 409, "stateless"),
        (
            requests.post(base + "/envs/guess/step", json={"action": {"message": "1"}, "episode_id": "nope"}),
            404,
            "no episode 'nope' of guess",
        ),
        (
            requests.post(base + "/envs/guess/step", json={"action": {"text": "1"}, "episode_id": "e1"}),
            422,
            "an action is {'message': <the agent's text>}",
        ),
        (requests.post(base + "/envs/guess/step", json={"action": "1"}), 422, "not a valid StepRequest"),
        (
            requests.post(base + "/envs/guess/reset", data=b"{not json", headers={"content-type": "x"}),
            422,
            "the body is not JSON",
        ),
        (requests.post(base + "/envs/guess/reset", data=b"x" * (2 << 20)), 413, "larger than"),
    ]
    for response, status, message in refusals:
        assert response.status_code == status and message in response.json()["detail"], response.text


@pytest.mark.slow
def test_sessions_are_bounded_and_idle_ones_are_closed(tmp_path):
    server = Served(tmp_path, "guess", "--max-sessions", "2", "--idle-timeout", "1")
    try:
        first, second = server.client("guess"), server.client("guess")
        first.connect().reset(seed=1)
        second.connect().reset(seed=2)
        with server.client("guess") as third, pytest.raises(RuntimeError) as caught:
            third.reset(seed=3)
        assert "maximum of 2 sessions" in str(caught.value) and "CAPACITY_REACHED" in str(caught.value)
        assert requests.post(server.base + "/reset", json={"seed": 1}).status_code == 503
        second.close()
        server.wait_sessions(1)
        with server.client("guess") as fourth:  # the freed slot is taken again
            assert fourth.reset(seed=4).done is False
        time.sleep(1.6)  # past the idle limit: the reaper closes the first session
        server.wait_sessions(0)
        with pytest.raises(RuntimeError, match=r"idle for more than 1 s.*SESSION_ERROR"):
            first.step({"message": "\\boxed{50}"})
        first.close()
    finally:
        server.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_closes_the_open_sessions_and_exits_0(tmp_path, sig):
    server = Served(tmp_path, "guess")
    with server.client("guess") as env:
        env.reset(seed=1)
        server.wait_sessions(1)
        server.stop(sig)  # asserts status 0 and no worker left
    assert "stopped: 1 session served, every one closed" in server.log.read_text()


def test_bad_serve_arguments_are_refused_before_serving(tmp_path):
    cases = [
        (["chess"], "chess is neither a file nor a named environment"),
        (["--archive", str(tmp_path)], "no archive at"),
        (["--ids", "1"], "--ids selects environments of --archive or --jsonl"),
        (["--jsonl", str(tmp_path / "none.jsonl")], "no JSONL pool at"),
    ]
    for args, message in cases:
        done = subprocess.run(
            [sys.executable, "-m", "spade_rl", "envs", "serve", *args, "--port", str(free_port())],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_an_archive_and_a_pool_are_served_with_their_recorded_arguments(tmp_path):
    from spade_rl.archive import Archive

    run = tmp_path / "run"
    run.mkdir()
    with Archive(run / "archive.sqlite") as archive:
        common = {"skill": "logic", "setting": "games", "iteration": 0}
        kept = archive.add(PARITY, valid=True, reason="ok", env_kwargs={"max_turns": 3}, **common).env_id
        archive.add(HANGS, valid=False, reason="timeout", **common)
        archive.export_jsonl(tmp_path / "pool.jsonl")
    for args in (["--archive", str(run)], ["--jsonl", str(tmp_path / "pool.jsonl"), "--ids", str(kept)]):
        server = Served(tmp_path, *args)
        try:
            listed = requests.get(server.base + "/envs").json()["environments"]
            assert [e["name"] for e in listed] == [f"env{kept}"]  # the rejected design is not served
            with server.client(f"env{kept}") as env:
                env.reset(seed=0)
                assert [env.step({"message": "odd"}).done for _ in range(3)] == [False, False, True]
                env.reset(seed=0)
                assert env.step({"message": "xx"}).reward == 1.0  # the parity game's solution at seed 0
        finally:
            server.stop()


def solutions(names: list[str], seeds: range) -> dict[tuple[str, int], list[str]]:
    """The winning moves of each reference environment at each seed, from one sandbox of the test's own."""
    found = {}
    with Sandbox(SandboxConfig(pool_size=1)) as sandbox:
        for name in names:
            env = sandbox.open(reference.source(name)).value
            for seed in seeds:
                env.reset(seed=seed)
                moves = env.solution().value
                found[name, seed] = [moves] if isinstance(moves, str) else moves
            env.close()
    return found


def play_http(base: str, name: str, seed: int, moves: list[str], episode_id: str) -> tuple[list[int], dict]:
    """One HTTP episode as a trainer plays it (reset with an episode_id, steps, the final state): the
    statuses answered and the last answer."""
    url = f"{base}/envs/{name}"
    answer = requests.post(url + "/reset", json={"seed": seed, "episode_id": episode_id}, timeout=30)
    statuses = [answer.status_code]
    for move in moves:
        if not answer.ok:
            break
        answer = requests.post(
            url + "/step", json={"action": {"message": move}, "episode_id": episode_id}, timeout=30
        )
        statuses.append(answer.status_code)
    return statuses, answer.json()


def test_finished_http_episodes_free_their_sessions_under_a_trainers_load(tmp_path):
    """Issue 57, item 6: a finished HTTP episode kept its session until the idle timeout, so a trainer
    playing more episodes than --max-sessions was refused (503) after the first few. 30 episodes of guess
    and maze from 3 threads on 3 sessions: every one is played, none refused, the finished ones' states
    stay readable, and the server never holds more workers than sessions (none after stop)."""
    sessions, threads, per_thread = 3, 3, 10
    moves = solutions(["guess", "maze"], range(4))
    server = Served(tmp_path, "guess", "maze", "--max-sessions", str(sessions))
    results: list[tuple[str, list[int], dict]] = []
    workers_seen: list[int] = []

    def trainer(t: int) -> None:
        for i in range(per_thread):
            name, seed = ("guess", "maze")[(t + i) % 2], i % 4
            episode_id = f"t{t}-e{i}"
            statuses, last = play_http(server.base, name, seed, moves[name, seed], episode_id)
            results.append((episode_id, statuses, last))
            workers_seen.append(len(workers(server.proc.pid)))

    try:
        pool = [threading.Thread(target=trainer, args=(t,)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join(timeout=120)
        assert len(results) == threads * per_thread
        refused = [(e, statuses) for e, statuses, _ in results if set(statuses) != {200}]
        assert refused == []  # before: 3 played, 27 refused with 503 (sessions held for 300 s)
        assert all(last["reward"] == 1.0 and last["done"] for _, _, last in results)
        assert max(workers_seen) <= sessions
        listed = requests.get(server.base + "/envs", timeout=5).json()
        assert (listed["active_sessions"], listed["finished_kept"]) == (0, threads * per_thread)
        # A finished episode's state is still there; its next step says what to do; a reset plays again.
        state = requests.get(server.base + "/envs/guess/state", params={"episode_id": "t0-e0"}).json()
        assert (state["episode_id"], state["done"], state["episode_return"]) == ("t0-e0", True, 1.0)
        assert state["step_count"] == len(moves["guess", 0])
        again = requests.post(
            server.base + "/envs/guess/step", json={"action": {"message": "1"}, "episode_id": "t0-e0"}
        )
        assert again.status_code == 409 and "POST /reset with this episode_id" in again.json()["detail"]
        statuses, last = play_http(server.base, "guess", 0, moves["guess", 0], "t0-e0")
        assert set(statuses) == {200} and last["reward"] == 1.0
    finally:
        server.stop()  # asserts status 0 and no sandbox worker left


def test_an_http_episode_that_fails_gives_its_session_back_and_keeps_its_state(served):
    url = served.base + "/envs/crash"
    assert requests.post(url + "/reset", json={"seed": 0, "episode_id": "c1"}).json()["done"] is False
    served.wait_sessions(1)
    answer = requests.post(url + "/step", json={"action": {"message": "odd"}, "episode_id": "c1"}).json()
    assert answer["done"] is True and answer["observation"]["error_reason"] == "crashed"
    served.wait_sessions(0)  # freed with the episode, not after the idle timeout
    state = requests.get(url + "/state", params={"episode_id": "c1"}).json()
    assert (state["done"], state["step_count"], state["episode_return"]) == (True, 1, 0.0)
    assert requests.post(url + "/reset", json={"seed": 0, "episode_id": "c1"}).json()["done"] is False
    served.wait_sessions(1)  # the same episode_id plays again, on a fresh worker


DEEP = 100_000  # far past Python's recursion limit: json.loads raises RecursionError


@pytest.mark.parametrize(
    ("route", "body", "status", "message"),
    [
        ("reset", b"[" * DEEP + b"]" * DEEP, 422, "nests deeper than 32 levels"),
        ("step", b'{"a":' * DEEP + b"1" + b"}" * DEEP, 422, "nests deeper than 32 levels"),
        (
            "step",
            b'{"episode_id": "e", "action": {"message": "1", "metadata": ' + b"[" * 40 + b"]" * 40 + b"}}",
            422,
            "nests deeper than 32 levels",
        ),
        ("reset", b"{not json", 422, "the body is not JSON"),
        ("reset", b'{"seed": "\xff"}', 422, "the body is not JSON: 'utf-8' codec can't decode"),
        ("reset", b'{"seed": ' + b"9" * 5000 + b"}", 422, "the body is not JSON: Exceeds the limit"),
        ("reset", b"[1, 2]", 422, "the body is a JSON object, got list"),
        ("step", b"null", 422, "the body is a JSON object, got null"),
        ("reset", b'"seed"', 422, "the body is a JSON object, got str"),
        ("reset", b'{"seed": true}', 422, "seed: Input should be a valid integer"),
        ("reset", b'{"seed": "3"}', 422, "seed: Input should be a valid integer"),
        ("reset", b'{"seed": 1.5}', 422, "seed: Input should be a valid integer"),
        ("reset", b'{"seed": -1}', 422, "seed: Input should be greater than or equal to 0"),
        ("reset", b'{"seed": NaN}', 422, "seed: Input should be a valid integer"),
        ("reset", b'{"episode_id": 5}', 422, "episode_id: Input should be a valid string"),
        ("reset", json.dumps({"episode_id": "x" * 300}).encode(), 422, "at most 255 characters"),
        ("step", b'{"action": "1", "episode_id": "e"}', 422, "action: Input should be a valid dictionary"),
        ("step", b'{"action": [1], "episode_id": "e"}', 422, "action: Input should be a valid dictionary"),
        ("step", b'{"action": {"message": 1}, "episode_id": "e"}', 422, "message: Input should be a valid"),
        ("step", b'{"action": {"message": "1"}, "episode_id": "e", "timeout_s": "1"}', 422, "timeout_s"),
        ("step", b'{"action": {"message": "1"}, "episode_id": "e", "timeout_s": NaN}', 422, "finite"),
        ("step", b'{"action": {"message": "1"}, "episode_id": "e", "timeout_s": 0}', 422, "greater than 0"),
        ("reset", b" " * (2 << 20), 413, "larger than 1048576 bytes"),
    ],
    # short ids: a test's id reaches the server's environment (PYTEST_CURRENT_TEST), 100 kB would not fit
    ids=lambda value: (value.decode(errors="replace") if isinstance(value, bytes) else str(value))[:24],
)
def test_malformed_bodies_are_refused_with_a_4xx_that_says_what_is_allowed(
    served, route, body, status, message
):
    answer = requests.post(f"{served.base}/envs/guess/{route}", data=body, timeout=30)
    assert answer.status_code == status, answer.text[:500]
    detail = answer.json()["detail"]
    assert message in detail, detail
    if status == 422:  # and what a request looks like
        shown = ["a ResetRequest is"] if route == "reset" else ["a StepRequest is", "an action is {'message'"]
        assert any(form in detail for form in shown), detail
    assert requests.get(served.base + "/health", timeout=5).ok


def test_malformed_websocket_messages_are_answered_and_the_session_goes_on(served):
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{served.port}/envs/guess/ws", max_size=None) as ws:
        for raw, message in [
            ("[" * DEEP + "]" * DEEP, "nests deeper than 32 levels"),
            ('{"type": "step", "data": ' + "[" * 40 + "]" * 40 + "}", "nests deeper than 32 levels"),
            ("{not json", "Invalid JSON: the message is not JSON"),
            ("[1]", "a message is a JSON object"),
            ('{"type": "reset", "data": {"seed": true}}', "seed: Input should be a valid integer"),
            ('{"type": "reset", "data": [1]}', "Input should be a valid dictionary"),
            ('{"type": ["reset"]}', "Unknown message type"),
        ]:
            ws.send(raw)
            answer = json.loads(ws.recv(timeout=30))
            assert answer["type"] == "error" and message in answer["data"]["message"], answer
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(ws.recv(timeout=30))["data"]["done"] is False
