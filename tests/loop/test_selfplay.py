"""The self-play loop end to end: a tiny in-process model through the real sandbox and TRL.

The designer's answers are scripted (a tiny random model writes no valid Python), with real token
ids from the default tokenizer; the agent is the tiny model itself, and the update trains it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fixture_envs import HANGS, PARITY, SMALL, designer_output, scripted_roles
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import tiny_random_model


@pytest.mark.slow
def test_two_iterations_train_both_roles(tmp_path):
    model, tokenizer = tiny_random_model(seed=0)
    roles = scripted_roles(model, tokenizer, [designer_output(PARITY), designer_output(HANGS)] * 2)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with SelfPlay(load_config(None, SMALL), tmp_path / "run", **roles) as run:
        seen = []
        update = run.learner.step
        run.learner.step = lambda samples: (seen.append(list(samples)), update(samples))[1]
        metrics = list(run.iterations())
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert metrics[0]["designer/reasons"] == {"ok": 1, "timeout": 1}
    if sys.platform.startswith("linux"):  # each phase's largest resident size, and the process's
        for m in metrics:
            phases = [m[f"memory/{name}_peak_mib"] for name in ("design", "play", "update")]
            slack = max(16.0, 0.01 * m["memory/peak_mib"])  # the kernel's counters are approximate
            assert min(phases) > 0 and m["memory/peak_mib"] >= max(phases) - slack
            assert m["memory/peak_mib"] >= m["memory/resident_mib"] - slack > 0
    samples = [s for batch in seen for s in batch]
    for role in ("designer", "agent"):
        assert any(s.role == role and abs(s.advantage) > 0 for s in samples), role
    assert any(not (before[k] == v).all() for k, v in model.state_dict().items())
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
    assert (tmp_path / "run" / "checkpoints" / "iter-0002" / "state.json").exists()
    assert (tmp_path / "run" / "config.json").exists() and (tmp_path / "run" / "transcripts.jsonl").exists()


@pytest.mark.slow
def test_the_optimiser_state_waits_on_disk_while_the_run_designs_and_plays(tmp_path):
    """train.offload_optimizer (the CPU default): between two updates AdamW's moments are in the run
    directory, not in memory; every update and checkpoint has them back; the file goes with the run."""
    model, tokenizer = tiny_random_model(seed=0)
    roles = scripted_roles(model, tokenizer, [designer_output(PARITY), designer_output(HANGS)] * 2)
    config = load_config(None, SMALL)
    assert config.train.offload_optimizer
    parked = tmp_path / "run" / "optimizer-state.bin"
    with SelfPlay(config, tmp_path / "run", **roles) as run:
        optimizer = run.learner.optimizer
        seen = []
        play, update = run._play, run.learner.step

        def watching_play(*args):
            moments = sum(k.startswith("exp_avg") for s in optimizer.state.values() for k in s)
            seen.append(("play", parked.exists(), moments))
            return play(*args)

        def watching_update(samples):
            metrics = update(samples)
            moments = sum(k.startswith("exp_avg") for s in optimizer.state.values() for k in s)
            seen.append(("update", parked.exists(), moments))
            return metrics

        run._play, run.learner.step = watching_play, watching_update
        metrics = list(run.iterations())
        assert [m["iteration"] for m in metrics] == [1, 2]
    n = 2 * len(list(model.parameters()))
    assert seen[0] == ("play", False, 0)  # nothing to park before the first step
    assert ("update", False, n) in seen  # the update has the whole state back, and the file is gone
    assert seen[-2:] == [("play", True, 0), ("update", False, n)]  # iteration 2 played without it
    assert not parked.exists()
    state = torch.load(
        tmp_path / "run" / "checkpoints" / "iter-0002" / "updater" / "optimizer.pt", weights_only=True
    )["state"]
    assert sum(k.startswith("exp_avg") for s in state.values() for k in s) == n  # checkpointed whole


def test_bad_configs_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key loop\.iteration;.*iterations"):
        load_config(None, ["loop.iteration=2"])
    with pytest.raises(ConfigError, match="must be an integer"):
        load_config(None, ["loop.iterations='many'"])
    with pytest.raises(ConfigError, match="rows"):  # every group in one step: more than 16 rows
        load_config(None, ["loop.envs_per_iteration=7", "loop.groups_per_step=0"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[loop\niterations = 2\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    # a module validation allows but no worker preloads fails to import after hardening: refused
    with pytest.raises(ConfigError, match=r"extra_imports allows \['numpy'\].*sandbox.preload"):
        load_config(None, ['design.validation.extra_imports=["numpy"]'])


def test_derived_values_are_refused_when_set_apart_and_used_when_equal(monkeypatch):
    """design.n is loop.designs_per_iteration, prompt.setting / hint_mode are design's own: never
    rewritten behind the user's back."""
    with pytest.raises(ConfigError, match=r"design\.n \(8\) is loop\.designs_per_iteration \(4\)"):
        load_config(None, ["design.n=8"])
    assert load_config(None, ["design.n=4"]).design.n == 4  # the same value: used
    assert load_config(None, ["loop.designs_per_iteration=2"]).design_phase.n == 2  # unset: derived
    with pytest.raises(ConfigError, match=r"prompt\.setting is design\.setting \('games'\)"):
        load_config(None, ["design.prompt.setting='tool_use'"])
    with pytest.raises(ConfigError, match=r"prompt\.hint_mode is design\.hint_mode"):
        load_config(None, ["design.prompt.hint_mode='separate'"])
    config = load_config(None, ["design.hint_mode='separate'"])
    assert config.design.chat_prompt.hint_mode == "separate"
    # The hint limits: one object that the prompt states and the parser enforces.
    config = load_config(
        None, ["design.prompt.hint.max_words=12", "design.form='module'", "warmup.designs=0"]
    )
    assert config.design.prompt.hint.max_words == 12
    with pytest.raises(ConfigError, match=r"max_words must be a whole number of at least 1"):
        load_config(None, ["design.prompt.hint.max_words=0"])


def test_the_turn_limit_and_the_temperature_are_derived_from_the_rollout(tmp_path):
    config = load_config(None, ["rollout.max_turns=5", "rollout.temperature=0.8", "design.temperature=0.8"])
    assert config.design_phase.validation.max_turns == 5  # validated with the limit it is played with
    assert config.update_config.temperature == 0.8  # trained at the temperature it sampled at
    with pytest.raises(
        ConfigError, match=r"design\.validation\.max_turns \(25\) is rollout\.max_turns \(8\)"
    ):
        load_config(None, ["design.validation.max_turns=25"])  # written out, even at its default: refused
    assert load_config(None, ["design.validation.max_turns=8"]).design_phase.validation.max_turns == 8
    with pytest.raises(ConfigError, match=r"train\.temperature \(0\.7\) is rollout\.temperature \(0\.6\)"):
        load_config(None, ["train.temperature=0.7"])
    with pytest.raises(ConfigError, match=r"design\.temperature \(0\.7\) must equal rollout\.temperature"):
        load_config(None, ["design.temperature=0.7"])
    # A saved configuration holds no derived key, so that a resumed run derives them again.
    from spade_rl.loop.config import save_config

    save_config(config, tmp_path / "config.json")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "n" not in saved["design"] and "max_turns" not in saved["design"]["validation"]
    assert "temperature" not in saved["train"] and "setting" not in saved["design"]["prompt"]
    again = load_config(tmp_path / "config.json")
    assert again.design_phase.validation.max_turns == 5 and again.update_config.temperature == 0.8


def test_renamed_keys_are_read_with_a_warning_that_names_the_new_key():
    with pytest.warns(
        FutureWarning, match=r"archive\.band_low is deprecated: it is called archive\.frontier_low"
    ):
        config = load_config(None, ["archive.band_low=0.2"])
    assert config.archive.frontier_low == 0.2
    with pytest.warns(FutureWarning, match=r"rewards\.mode = 'band' is deprecated: it is 'plateau'"):
        assert load_config(None, ["rewards.mode='band'"]).rewards.mode == "plateau"
    with pytest.warns(FutureWarning, match=r"rewards\.w_band is deprecated"):
        assert load_config(None, ["rewards.w_band=0.5"]).rewards.w_plateau == 0.5
    with pytest.raises(
        ConfigError, match=r"sets both archive\.band_low \(its old name\) and archive\.frontier_low"
    ):
        load_config(None, ["archive.band_low=0.2", "archive.frontier_low=0.3"])


def test_a_config_does_not_depend_on_the_launch_until_it_is_launched(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    config = load_config(
        processes=1
    )  # told its processes, loading a configuration never reads the environment
    with pytest.raises(ConfigError, match=r"warm-up trains the model of a single process.*2 processes"):
        config.check_launch(2)
    config.check_launch(1)
    with pytest.raises(ConfigError, match=r"warm-up trains the model of a single process"):
        load_config()  # the launch of this process: WORLD_SIZE
    assert load_config(processes=1).warmup.designs == 48
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match=r"WORLD_SIZE='two' is not a number of processes"):
        load_config()


def run_dir_state(run_dir: Path) -> tuple[list[int], list[tuple[int, int]]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    with sqlite3.connect(run_dir / "archive.sqlite") as db:
        per_iteration = db.execute(
            "SELECT iteration, COUNT(*) FROM proposals WHERE iteration > 0 GROUP BY iteration"
            " ORDER BY iteration"
        ).fetchall()
    return [json.loads(line)["iteration"] for line in lines], per_iteration


@pytest.mark.slow
def test_killed_run_resumes_without_losing_or_duplicating(tmp_path):
    model, tokenizer = tiny_random_model(seed=0)
    model_dir = tmp_path / "tiny"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    run_dir = tmp_path / "run"
    args = [
        f"policy.model='{model_dir}'",
        "loop.iterations=3",
        "design.max_new_tokens=32",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, "-m", "spade_rl", "run", "--out", str(run_dir), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 600
        # Kill it in the middle of iteration 2: after iteration 1 is recorded and iteration 2 has
        # written its proposals into the archive.
        while time.monotonic() < deadline:
            if (run_dir / "metrics.jsonl").exists() and (run_dir / "archive.sqlite").exists():
                with sqlite3.connect(run_dir / "archive.sqlite") as db:
                    if db.execute("SELECT COUNT(*) FROM proposals WHERE iteration = 2").fetchone()[0]:
                        break
            assert child.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    iterations, proposals = run_dir_state(run_dir)
    assert iterations == [1] and any(i == 2 for i, _ in proposals)  # killed mid-iteration 2

    done = subprocess.run(
        [sys.executable, "-m", "spade_rl", "run", "--resume", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    iterations, proposals = run_dir_state(run_dir)
    assert iterations == [1, 2, 3]
    assert proposals == [(1, 4), (2, 4), (3, 4)]  # each iteration's designs counted once
    with sqlite3.connect(run_dir / "archive.sqlite") as db:
        hashes = [r[0] for r in db.execute("SELECT source_hash FROM environments")]
        assert len(hashes) == len(set(hashes))
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_shipped_configs_load_and_cpu_default_is_the_default():
    from spade_rl.loop.config import to_data

    root = Path(__file__).resolve().parents[2] / "configs"
    assert to_data(load_config(root / "cpu-default.toml")) == to_data(load_config())
    gpu = load_config(root / "qwen3-gpu.toml")
    assert (gpu.loop.plays_per_env, gpu.loop.designs_per_iteration, gpu.rollout.max_turns) == (16, 24, 25)


TURNS = PARITY.replace(
    'return "Say something of the right length.", {}',
    'return f"Say something of the right length within {self.max_turns} turns.", {}',
).replace("ParityEnv", "TurnsEnv")


@pytest.mark.slow
def test_played_environments_get_the_constructor_arguments_they_were_validated_with(tmp_path):
    """Validation gives max_turns (the run's turn limit) and the pool's extra arguments; every play
    of the environment, in the loop and after a resume, gets exactly those (not its defaults).
    Issue 40's agent-side options run here too: the new designs are probed (2 plays each, at distinct
    instances) before any full group, half of the groups stay on the pool, a design never won in its 2
    probe plays retires, and the line holds the curriculum and format metrics."""
    assert "max_turns=2" in TURNS  # its own default would be 2 as well: make it differ
    source = TURNS.replace("max_turns=2", "max_turns=7")
    model, tokenizer = tiny_random_model(seed=0)
    roles = scripted_roles(model, tokenizer, [designer_output(source), designer_output(PARITY)])
    overrides = [
        *SMALL,
        "loop.iterations=1",
        "pool.reference=['guess']",
        "pool.reference_kwargs={guess={high=3}}",  # won within the run's 2 turns
        "loop.probe_plays=2",
        "loop.design_group_seeds='distinct'",
        "loop.pool_share=0.5",
        "loop.retire_after_plays=2",
        "loop.format_penalty=0.1",
    ]
    with SelfPlay(load_config(None, overrides), tmp_path / "run", **roles) as run:
        (metrics,) = list(run.iterations())
        assert metrics["probe/designs"] == 2.0 and metrics["designer/new_played"] == 2
        assert metrics["pool/groups"] >= 1.0 and 0.0 <= metrics["designer/new_win_rate"] <= 1.0
        assert metrics["designer/band_fraction"] in (0.0, 0.5, 1.0)
        never_won = [
            e
            for e in run.archive.ids(valid=True, origin="designer")
            if not any(h.stats.win_rate_nohint for h in run.archive.stats_history(e))
        ]
        assert metrics["pool/retired"] == metrics["pool/retired_total"] == float(len(never_won))
        assert 0.0 <= metrics["format/guess/malformed"] <= 1.0 and "format/designed/illegal" in metrics
        designed = run.archive.ids(valid=True, origin="designer")
        (full,) = run._play(designed[:1], random.Random(0), 2)
        assert len({e.spec.seed for e in full.nohint}) == 4  # a designed game: one instance per play
        turns_id = next(i for i in run.archive.ids(valid=True) if "TurnsEnv" in run.archive.get(i).source)
        guess_id = run.archive.ids(origin="reference")[0]
        assert run.archive.get(turns_id).env_kwargs == {"max_turns": 2}
        assert run.archive.get(guess_id).env_kwargs == {"max_turns": 2, "high": 3}
        played = run._play([turns_id, guess_id], random.Random(0), 2)
    turns, guess = played
    for episode in turns.nohint + turns.hint:
        assert episode.spec.env_kwargs == {"max_turns": 2}
        assert "within 2 turns" in episode.messages[1]["content"]
    for episode in guess.nohint + guess.hint:
        assert "from 1 to 3" in episode.messages[1]["content"]
        assert "You have 2 guesses" in episode.messages[1]["content"]
