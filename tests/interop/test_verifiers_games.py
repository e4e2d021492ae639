"""Designed environments out as a verifiers taskset (issue 57): ``spade-rl envs export --format verifiers``
writes a package that installs (pip, offline, into a folder of its own) and runs under verifiers' runner
(its Python API, and ``vf-eval`` itself), each episode played in spade-rl's sandbox with the return the
game gives its actions, the hint shown as an option."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers.v1", reason="the verifiers extra: pip install -e '.[verifiers]'")

from fixture_envs import PARITY  # noqa: E402

KEY = "SPADE_RL_TEST_KEY"
HINT = "Count the characters."
KWARGS = {"max_turns": 1}
NAME = "spade-games-test"


def archive_with_games(path: Path) -> None:
    """An archive with one valid designed game (with a hint) and one invalid design."""
    from spade_rl.archive import Archive

    with Archive(path / "archive.sqlite") as archive:
        archive.add(
            PARITY,
            valid=True,
            reason="ok",
            skill="parity",
            setting="games",
            iteration=1,
            hint=HINT,
            env_kwargs=KWARGS,  # as validation used them: every play uses them
        )
        archive.add(
            "class Broken:\n    pass\n", valid=False, reason="syntax", skill="x", setting="games", iteration=1
        )


def export(out: Path, run: Path, name: str = NAME) -> subprocess.CompletedProcess:
    """``spade-rl envs export OUT --archive RUN --format verifiers --name NAME``, as a user runs it."""
    command = [sys.executable, "-m", "spade_rl", "envs", "export", str(out), "--archive", str(run)]
    command += ["--format", "verifiers", "--name", name]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The package exported from a run's archive with the command, installed with pip into a folder of
    its own (no index, no build isolation: setuptools from this environment), on the import path."""
    run = tmp_path / "run"
    run.mkdir()
    archive_with_games(run)
    out = tmp_path / "package"
    done = export(out, run)
    assert done.returncode == 0, done.stderr
    assert "1 valid environments" in done.stdout
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    pip += ["--no-index", "--target", str(target), str(out)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    module = NAME.replace("-", "_")
    assert (target / module / "envs.jsonl").is_file() and (target / module / "__init__.py").is_file()
    monkeypatch.syspath_prepend(str(target))
    monkeypatch.setenv(KEY, "loopback")
    sys.modules.pop(module, None)
    return target


def one_character(chat: list[dict]) -> str:
    return "x"


def replayed_return(trace, with_hint: bool) -> float:
    """The return of the same actions on the same game and seed, in the sandbox, without verifiers."""
    from spade_rl.loop.config import load_config
    from spade_rl.rollout import EpisodeSpec, play_episode
    from spade_rl.sandbox import Sandbox

    info = trace.info["spade"]
    actions = iter([m.content for m in trace.assistant_messages])
    rollout = load_config(None, ["rollout.action_prefix={}", "rollout.action_stop={}"]).rollout
    from spade_rl.design.validate import play_kwargs

    max_turns = load_config(None).design_phase.validation.max_turns
    with Sandbox() as sandbox:
        kwargs = play_kwargs(PARITY, KWARGS, max_turns)
        spec = EpisodeSpec(PARITY, seed=info["seed"], hint=HINT, use_hint=with_hint, env_kwargs=kwargs)
        return play_episode(sandbox, spec, rollout, lambda episode: next(actions)).return_


@pytest.mark.parametrize("with_hint", [False, True])
def test_the_exported_taskset_plays_archived_games_in_the_sandbox(installed, with_hint):
    from spade_rl.policy import FakePolicy
    from spade_rl.policy.models import default_tokenizer
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    config = vf.resolve_env_config({"taskset": {"id": NAME, "seeds": 3}, "with_hint": with_hint})
    env = vf.load_environment(config)
    tasks = list(env.taskset)
    assert [t.data.seed for t in tasks] == [0, 1, 2]  # the invalid design is not a task
    with FakeVLLMServer(FakePolicy(one_character, tokenizer=default_tokenizer())) as server:
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY)
        ctx = vf.ModelContext(model="fake-vllm", client=client, sampling=vf.SamplingConfig(max_tokens=8))

        async def go():
            async with env.serving():
                return [await env.run_episode(task, ctx) for task in tasks]

        episodes = asyncio.run(go())
        first_messages = [chat[1]["content"] for chat in server.chats if len(chat) == 2]
    assert first_messages and all((f"Hint: {HINT}" in m) == with_hint for m in first_messages)
    for task, episode in zip(tasks, episodes, strict=True):
        assert episode.ok, episode.errors
        [trace] = episode.traces
        assert trace.info["spade"]["seed"] == task.data.seed
        assert trace.info["spade"]["turns"] == 1  # the recorded constructor arguments: one turn, not two
        assert trace.rewards["return"].score == pytest.approx(replayed_return(trace, with_hint))


def test_vf_eval_runs_the_exported_taskset(installed, tmp_path):
    """verifiers' own command line on the installed package, offline (--no-push), against the loopback
    server in this process; its traces.jsonl carries each episode's return."""
    from spade_rl.policy import FakePolicy
    from spade_rl.policy.models import default_tokenizer
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    vf_eval = Path(sys.executable).with_name("vf-eval")
    if not vf_eval.exists():
        pytest.skip(f"no vf-eval beside {sys.executable}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), os.environ.get("PYTHONPATH", "")])}
    with FakeVLLMServer(FakePolicy(one_character, tokenizer=default_tokenizer())) as server:
        command = [str(vf_eval), NAME, "-m", "fake-vllm", "--client.base-url", server.base_url]
        command += ["--client.api-key-var", KEY, "--no-push", "--no-rich", "-n", "2"]
        command += ["-o", str(tmp_path / "out"), "--run.name", "export-check", "--sampling.max-tokens", "8"]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [traces] = list((tmp_path / "out").rglob("traces.jsonl"))
    episodes = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]
    assert len(episodes) == 2
    for episode in episodes:
        [trace] = episode["traces"]
        assert "return" in trace["rewards"]


def test_export_refuses_a_folder_in_use_and_a_bad_name(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    archive_with_games(run)
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    refused = [
        (used, NAME, "not an empty folder"),
        (tmp_path / "new", "Bad_Name", "package name"),
        (tmp_path / "new", "textarena", "verifiers' own tasksets"),  # its loader would load its own
        (tmp_path / "new", "json", "standard module"),
    ]
    for out, name, message in refused:
        done = export(out, run, name)
        assert done.returncode == 2 and message in done.stderr + done.stdout
        assert "Traceback" not in done.stderr
    assert (used / "keep.txt").read_text() == "mine" and not (tmp_path / "new").exists()
