"""``spade-rl envs serve`` end to end: the command as a user runs it, on 127.0.0.1 and a free port, driven
by OpenEnv's own client (openenv-core's ``GenericEnvClient`` over its WebSocket session protocol) and by
plain HTTP. A reference game is played to a win with its ``solution()`` moves (computed in a sandbox of
the test's own); then the refusals (unknown environment, bad action, steps out of order, capacity, idle
sessions), hostile environments ending their episode with an error instead of breaking the server, and
the clean shutdown on SIGTERM (every sandbox worker of the server gone)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
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
