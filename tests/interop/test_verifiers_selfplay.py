"""SPADE's round as a verifiers v1 multi-agent environment (issue 57), end to end through verifiers' own
runner (``vf.load_environment``, ``env.serving()``, ``env.run_episode``) and both of its clients, against
the loopback vLLM stand-in on 127.0.0.1, with the real sandbox: a scripted model whose designer writes a
valid game (every seat's reward checked against spade-rl's reward code on the same plays, replayed), and
real models (the tiny random one; the default model, slow) whose traces must carry token ids, masks and
log-probs for every seat."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers.v1", reason="the verifiers extra: pip install -e '.[verifiers]'")

from fixture_envs import PARITY, SCRIPTED, designer_output  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "environments" / "spade_selfplay"
GAMES_PROMPT = "You are playing a text game"
KEY = "SPADE_RL_TEST_KEY"
ROUND = [
    *SCRIPTED,
    "loop.plays_per_env=3",
    "loop.hint_plays_per_env=2",
    "rollout.max_turns=2",
    "sandbox.call_timeout_s=2",
    "design.validation.call_timeout_s=2",
]


@pytest.fixture
def selfplay(monkeypatch: pytest.MonkeyPatch):
    """The environment package importable as verifiers' loader imports it (the id's module)."""
    monkeypatch.syspath_prepend(str(PACKAGE))
    monkeypatch.setenv(KEY, "loopback")
    for name in [m for m in sys.modules if m == "spade_selfplay"]:
        del sys.modules[name]
    import spade_selfplay

    return spade_selfplay


def scripted_answer(chat: list[dict]) -> str:
    """The designer writes the parity game; an agent says one character (wins half the seeds)."""
    text = chat[-1]["content"]
    return "x" if GAMES_PROMPT in text else designer_output(PARITY)


def train_client(server, tokenizer_dir: Path):
    from renderers import DefaultRendererConfig

    return vf.TrainClientConfig(
        base_url=server.base_url,
        api_key_var=KEY,
        renderer=DefaultRendererConfig(),
        renderer_model_name=str(tokenizer_dir),
    )


def run_round(config: dict, client, max_tokens: int, tasks: int = 1):
    """``tasks`` episodes of the environment ``config`` describes, through verifiers' runner."""
    resolved = vf.resolve_env_config({"taskset": {"id": "spade-selfplay"}, **config})
    env = vf.load_environment(resolved)
    ctx = vf.ModelContext(
        model="fake-vllm", client=client, sampling=vf.SamplingConfig(temperature=1.0, max_tokens=max_tokens)
    )

    async def go():
        async with env.serving():
            return [await env.run_episode(task, ctx) for task in list(env.taskset.take(tasks))]

    return resolved, asyncio.run(go())


def by_seat(episode) -> dict[str, list]:
    seats: dict[str, list] = {}
    for trace in episode.traces:
        seats.setdefault(trace.agent.name, []).append(trace)
    return seats


def assert_tokens(trace) -> None:
    """The train client's trajectory: token ids, a mask on what was sampled, one log-prob per masked token."""
    sampled = [node for node in trace.nodes if node.sampled]
    assert sampled, trace.agent.name
    for node in sampled:
        assert node.token_ids and any(node.mask), trace.agent.name
        assert len(node.mask) == len(node.token_ids)
        assert len(node.logprobs) == sum(node.mask)


def test_a_round_pays_every_seat_what_spade_rls_reward_code_gives_the_same_plays(selfplay, tmp_path):
    from spade_rl.loop.config import load_config
    from spade_rl.policy import FakePolicy
    from spade_rl.policy.models import default_tokenizer, resolve_model
    from spade_rl.rewards import designer_terms, paid_reward, regret_bound
    from spade_rl.rollout import EpisodeSpec, play_episode
    from spade_rl.sandbox import Sandbox
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    tokenizer = default_tokenizer()
    policy = FakePolicy(scripted_answer, tokenizer=tokenizer)
    run_dir = tmp_path / "run"
    with FakeVLLMServer(policy) as server:
        config, [episode] = run_round(
            {"overrides": ROUND, "run_dir": str(run_dir)},
            train_client(server, resolve_model(None, tokenizer_only=True)),
            max_tokens=2048,
        )
    assert isinstance(config, selfplay.SpadeSelfPlayConfig)
    assert episode.ok, episode.errors
    seats = by_seat(episode)
    assert [len(seats.get(s, [])) for s in ("proposer", "solver", "hinted")] == [1, 3, 2]
    assert not seats["hinted"][0].agent.trainable and seats["solver"][0].agent.trainable
    for traces in seats.values():
        for trace in traces:
            assert_tokens(trace)

    # Each play's return is what the game gives its actions, replayed in the sandbox
    run = load_config(None, ROUND)
    [design] = seats["proposer"]
    info = design.info["spade"]
    assert info["valid"], info
    returns: dict[bool, list[float]] = {False: [], True: []}
    won: list[bool] = []
    with Sandbox() as sandbox:
        for trace in seats["solver"] + seats["hinted"]:
            played = trace.info["spade"]
            actions = iter([m.content for m in trace.assistant_messages])
            spec = EpisodeSpec(
                PARITY, seed=played["seed"], hint="Count the characters.", use_hint=played["use_hint"]
            )
            replay = play_episode(sandbox, spec, run.rollout, lambda episode, actions=actions: next(actions))
            assert trace.rewards["return"].score == pytest.approx(replay.return_)
            returns[played["use_hint"]].append(replay.return_)
            if not played["use_hint"]:
                won.append(replay.won)
    # The designer's reward: the loop's terms over the same plays (regret at its lower confidence bound)
    config_rewards = run.rewards
    wins = sum(won) / len(won)
    regret = regret_bound(returns[True], returns[False], config_rewards.regret_confidence)
    expected = paid_reward(designer_terms(wins, regret, config_rewards), config_rewards, gate=True)
    assert design.rewards["designer"].score == pytest.approx(expected)
    assert design.metrics["designer/term/regret"] == pytest.approx(regret)
    assert design.metrics["designer/term/learnability"] == pytest.approx(4 * wins * (1 - wins))

    # The archive and the metrics are the loop's: spade-rl's tools read them
    from spade_rl.archive import Archive

    with Archive(run_dir / "archive.sqlite") as archive:
        record = archive.get(info["env_id"])
        assert record.valid and record.origin == "designer"
        [stats] = [h.stats for h in archive.stats_history(info["env_id"])]
        assert (stats.episodes_nohint, stats.episodes_hint) == (3, 2)
    [line] = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert line["designer/proposed"] == 1 and line["designer/reward_mean"] == pytest.approx(expected)
    # the loop's gaming gauge ran on the round: the design, won or not, revalidated with every gate on
    assert line["designer/won_designs"] == float(any(won)) and line["designer/gaming_refused"] == 0


HINT_PROMPT = "You write short hints"


def two_call_answer(chat: list[dict]) -> str:
    """The two-call mode: the design without a hint, then the hint in a call of its own."""
    text = chat[-1]["content"]
    if GAMES_PROMPT in text:
        return "x"
    if HINT_PROMPT in text:
        return "<hint>Count the characters of your answer.</hint>"
    return f"```python\n{PARITY}```"


def test_the_calls_that_never_train_go_to_a_seat_that_never_trains(selfplay, tmp_path):
    """design.hint_mode = 'separate': the hint is written on seat designer_side (untrainable, no reward);
    only the design's trace is the designer's, as only the design trains in the loop."""
    from spade_rl.policy import FakePolicy
    from spade_rl.policy.models import default_tokenizer, resolve_model
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    policy = FakePolicy(two_call_answer, tokenizer=default_tokenizer())
    with FakeVLLMServer(policy) as server:
        _, [episode] = run_round(
            {"overrides": [*ROUND, "design.hint_mode='separate'"], "run_dir": str(tmp_path / "run"), "n": 2},
            train_client(server, resolve_model(None, tokenizer_only=True)),
            max_tokens=2048,
        )
    assert episode.ok, episode.errors
    seats = by_seat(episode)
    [design], [side] = seats["proposer"], seats["designer_side"]
    assert design.agent.trainable and not side.agent.trainable
    assert side.info["spade"]["purpose"] == "designer_side" and not side.rewards
    assert design.info["spade"]["valid"] and "designer" in design.rewards
    assert len(seats["solver"]) == 2 and len(seats["hinted"]) == 2  # n plays without the hint
    assert any(HINT_PROMPT in str(n.message.content) for n in side.nodes)


def test_an_invalid_design_earns_the_loops_penalty_and_plays_nothing(selfplay, tmp_path):
    """A real tiny model (random weights) through the eval client (/v1/chat/completions): its design does
    not parse or validate, its trace gets the loop's penalty for that reason, no agent seat plays."""
    from spade_rl.loop.config import load_config
    from spade_rl.policy.models import tiny_random_model
    from spade_rl.policy.transformers_backend import TransformersPolicy
    from spade_rl.rewards import invalid_design_reward
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    model, tokenizer = tiny_random_model()
    with FakeVLLMServer(TransformersPolicy(model, tokenizer)) as server:
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY)
        _, [episode] = run_round(
            {"overrides": ROUND, "run_dir": str(tmp_path / "run")}, client, max_tokens=24
        )
        assert server.chats, "the eval client calls /v1/chat/completions"
    assert episode.ok, episode.errors
    [design] = by_seat(episode)["proposer"]
    assert set(by_seat(episode)) == {"proposer"}
    info = design.info["spade"]
    assert not info["valid"]
    run = load_config(None, ROUND)
    assert design.rewards["designer"].score == pytest.approx(
        invalid_design_reward(info["reason"], run.rewards)
    )


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        ([], None),  # the environment's default overrides clear the CPU profile's forced opening
        (["loop.plays_per_env=2"], "rollout.action_prefix"),  # a list given replaces the default whole
        (["rollout.action_prefix={}", "rollout.action_stop={}", "rewards.delay=2"], "rewards.delay"),
        (
            ["rollout.action_prefix={}", "rollout.action_stop={}", "rollout.thinking='off'"],
            "rollout.thinking",
        ),
        (["rollout.action_prefix={}", "rollout.action_stop={}", "executor.kind='ray'"], "executor.kind"),
    ],
)
def test_settings_a_seat_cannot_honour_are_refused_with_the_key(selfplay, tmp_path, overrides, refused):
    config = {"run_dir": str(tmp_path / "run"), **({"overrides": overrides} if overrides else {})}
    resolved = vf.resolve_env_config({"taskset": {"id": "spade-selfplay"}, **config})
    if refused is None:
        env = vf.load_environment(resolved)
        assert env.round.plays == {
            False: env.round.run.loop.plays_per_env,
            True: env.round.run.loop.hint_plays,
        }
        return
    with pytest.raises(Exception, match=refused.replace(".", r"\.")):
        vf.load_environment(resolved)


def test_prime_rls_config_check_accepts_the_environment(monkeypatch, tmp_path):
    """prime-rl's hierarchical_grpo accepts an environment whose config is an instance of
    proposer_solver.ProposerSolverEnvConfig (prime-rl: packages/prime-rl-configs/src/prime_rl/configs/
    algorithm.py, validate_env). Where that package is installed the config subclasses it; here a stand-in
    with its fields (verifiers' environments/proposer_solver/proposer_solver/taskset.py) is installed."""
    import importlib

    package = tmp_path / "proposer_solver"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import verifiers.v1 as vf\nfrom pydantic import Field\n\n"
        "class ProposerSolverEnvConfig(vf.EnvConfig):\n"
        "    proposer: vf.AgentConfig = vf.AgentConfig()\n"
        "    solver: vf.AgentConfig = vf.AgentConfig()\n"
        "    n: int = Field(4, ge=1)\n"
        "    train_proposer: bool = True\n"
        "    train_solver: bool = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(PACKAGE))
    import spade_rl.interop.verifiers.selfplay as selfplay_module

    try:
        reloaded = importlib.reload(selfplay_module)
        from proposer_solver import ProposerSolverEnvConfig

        assert reloaded.HIERARCHICAL
        config = reloaded.SpadeSelfPlayConfig(run_dir=str(tmp_path / "run"))
        assert isinstance(config, ProposerSolverEnvConfig)
        assert config.train_proposer and config.train_solver and config.n is None
        assert config.proposer.runtime.type == "subprocess"
    finally:
        monkeypatch.delitem(sys.modules, "proposer_solver", raising=False)
        monkeypatch.undo()
        importlib.reload(selfplay_module)


@pytest.mark.slow
def test_the_default_model_plays_a_round_with_token_level_traces_for_every_seat(selfplay, tmp_path):
    """SmolLM2-135M (the default model) behind the loopback server, verifiers' train client: every seat's
    trace carries token ids, masks and log-probs, and the designer's trace its reward. Its designs are
    mostly invalid at this size (then only the designer's seat has a trace); the agent seats' traces are
    checked wherever a design was valid, and the scripted test checks them always."""
    from spade_rl.policy.models import load_pretrained, resolve_model
    from spade_rl.policy.transformers_backend import TransformersPolicy
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    model, tokenizer = load_pretrained(None)
    with FakeVLLMServer(TransformersPolicy(model, tokenizer)) as server:
        _, episodes = run_round(
            {
                "overrides": [
                    "rollout.action_prefix={}",
                    "rollout.action_stop={}",
                    "loop.plays_per_env=2",
                    "loop.hint_plays_per_env=2",
                    "rollout.max_turns=2",
                ],
                "run_dir": str(tmp_path / "run"),
            },
            train_client(server, resolve_model(None)),
            max_tokens=200,
            tasks=2,
        )
        assert server.generated, "the train client calls /inference/v1/generate"
    for episode in episodes:
        assert episode.ok, episode.errors
        for traces in by_seat(episode).values():
            for trace in traces:
                assert_tokens(trace)
        [design] = by_seat(episode)["proposer"]
        assert "designer" in design.rewards


def test_vf_eval_runs_a_round_from_a_toml_file(selfplay, tmp_path):
    """verifiers' own command line (``vf-eval @ FILE``) with the train client, offline, on the package;
    its traces.jsonl holds the designer's reward and each play's return, with token ids."""
    import os
    import subprocess

    from spade_rl.policy import FakePolicy
    from spade_rl.policy.models import default_tokenizer, resolve_model
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    vf_eval = Path(sys.executable).with_name("vf-eval")
    if not vf_eval.exists():
        pytest.skip(f"no vf-eval beside {sys.executable}")
    policy = FakePolicy(scripted_answer, tokenizer=default_tokenizer())
    run_dir, out = tmp_path / "run", tmp_path / "out"
    with FakeVLLMServer(policy) as server:
        eval_file = tmp_path / "eval.toml"
        eval_file.write_text(
            f'model = "fake-vllm"\npush = false\n\n[client]\ntype = "train"\nbase_url = "{server.base_url}"\n'
            f'api_key_var = "{KEY}"\nrenderer_model_name = "{resolve_model(None, tokenizer_only=True)}"\n\n'
            '[client.renderer]\nname = "default"\n\n[sampling]\nmax_tokens = 2048\n\n[select]\nlimit = 1\n\n'
            f'[env]\nrun_dir = "{run_dir}"\noverrides = {json.dumps(ROUND)}\n\n'
            '[env.taskset]\nid = "spade-selfplay"\n'
        )
        path = os.pathsep.join([str(PACKAGE), os.environ.get("PYTHONPATH", "")])
        done = subprocess.run(
            [str(vf_eval), "@", str(eval_file), "--no-rich", "-o", str(out), "--run.name", "round"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": path},
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [traces] = list(out.rglob("traces.jsonl"))
    [episode] = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]
    rewards = {}
    for trace in episode["traces"]:
        rewards.setdefault(trace["agent"]["name"], []).append(trace["rewards"])
    assert "designer" in rewards["proposer"][0]
    assert len(rewards["solver"]) == 3 and all("return" in r for r in rewards["solver"])
    # The run folder is the loop's: spade-rl's own commands read it
    for command in (["envs", "list", "--archive", str(run_dir)], ["report", str(run_dir)]):
        done = subprocess.run([sys.executable, "-m", "spade_rl", *command], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
    assert (run_dir / "report" / "index.html").is_file()


ROUND_SCRIPT = """
import asyncio, json, sys
import verifiers.v1 as vf
config = vf.resolve_env_config(json.loads(sys.argv[1]))
env = vf.load_environment(config)
client = vf.EvalClientConfig(base_url=sys.argv[2], api_key_var=sys.argv[3])
ctx = vf.ModelContext(model="fake-vllm", client=client, sampling=vf.SamplingConfig(max_tokens=2048))
async def go():
    async with env.serving():
        return [await env.run_episode(task, ctx) for task in list(env.taskset.take(1))]
[episode] = asyncio.run(go())
loaded = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"ok": episode.ok, "seats": sorted(t.agent.name for t in episode.traces), "loaded": loaded}))
"""


def test_the_environment_runs_without_torch_or_transformers(selfplay, tmp_path):
    """The environment side (design phase, sandbox, archive, rewards, seats) never imports torch,
    transformers or accelerate: it can live in a trainer's environment (prime-rl pins its own torch and
    transformers==5.6.2) with spade-rl installed without its dependencies (docs/scaling.md, On prime-rl)."""
    import os
    import subprocess

    from spade_rl.policy import FakePolicy
    from spade_rl.policy.models import default_tokenizer
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    config = {"taskset": {"id": "spade-selfplay"}, "overrides": ROUND, "run_dir": str(tmp_path / "run")}
    path = os.pathsep.join([str(PACKAGE), os.environ.get("PYTHONPATH", "")])
    with FakeVLLMServer(FakePolicy(scripted_answer, tokenizer=default_tokenizer())) as server:
        done = subprocess.run(
            [sys.executable, "-c", ROUND_SCRIPT, json.dumps(config), server.base_url, KEY],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": path},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["seats"].count("solver") == 3
    assert not {"torch", "transformers", "accelerate", "peft", "trl"} & set(result["loaded"])


@pytest.mark.parametrize(
    ("overrides", "untrained"),
    [
        (["design.invalid='retry'", "design.retries=1", "design.retries_grounded=1"], "no reward"),
        (
            ["rewards.invalid_penalty=-0.5", "rewards.progress_bonus=0", "rewards.mask_negative=true"],
            "negative (mask_negative)",
        ),
    ],
)
def test_what_the_loop_gives_no_gradient_does_not_train(selfplay, tmp_path, overrides, untrained):
    """design.invalid = 'retry': a slot that failed every try has no reward in the loop; with
    rewards.mask_negative a negative reward is masked there. Their traces here are not trainable."""
    from spade_rl.policy.models import tiny_random_model
    from spade_rl.policy.transformers_backend import TransformersPolicy
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    model, tokenizer = tiny_random_model()
    with FakeVLLMServer(TransformersPolicy(model, tokenizer)) as server:
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY)
        config = {"overrides": [*ROUND, *overrides], "run_dir": str(tmp_path / "run")}
        _, [episode] = run_round(config, client, max_tokens=24)
    assert episode.ok, episode.errors
    designs = by_seat(episode)["proposer"]
    assert len(designs) == (2 if untrained == "no reward" else 1)  # one retry
    for trace in designs:
        assert not trace.agent.trainable and trace.info["spade"]["untrained"] == untrained
    if untrained == "no reward":
        assert all("designer" not in trace.rewards for trace in designs)
    else:
        assert designs[0].rewards["designer"].score == pytest.approx(-0.5)


class FakeSegment:
    def __init__(self, reply: str, terminated: bool = False):
        self.last_reply, self.terminated = reply, terminated


class FakeTrace:
    def __init__(self):
        self.ok, self.stop_condition, self.last_error, self.info = True, None, None, {}


class FakeInteraction:
    """A seat's interaction: replies in turn; ``fail`` ends the exchange as a failed harness does."""

    def __init__(self, replies: list[str], fail: bool):
        self.trace, self.replies, self.fail, self.turns = FakeTrace(), list(replies), fail, 0

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    async def turn(self, message: str):
        self.turns += 1
        if self.fail:
            self.trace.ok, self.trace.stop_condition = False, "harness_error"
            return FakeSegment("", terminated=True)
        return FakeSegment(self.replies.pop(0))


class FakeSeat:
    def __init__(self, replies=("x", "xx"), fail: bool = False):
        self.opened: list[FakeInteraction] = []
        self.replies, self.fail = list(replies), fail

    def interaction(self, task):
        self.opened.append(FakeInteraction(self.replies, self.fail))
        return self.opened[-1]


RAISES_AT_RESET = PARITY.replace("self.seed = 0 if seed is None else seed", "raise RuntimeError('no')")


def play(seat, source: str):
    import concurrent.futures

    from spade_rl.interop.verifiers.seats import play_on_seat
    from spade_rl.loop.config import load_config
    from spade_rl.rollout import EpisodeSpec
    from spade_rl.sandbox import Sandbox

    rollout = load_config(None, ROUND, learner=False).rollout
    with Sandbox() as sandbox, concurrent.futures.ThreadPoolExecutor(4) as threads:
        spec = EpisodeSpec(source, seed=1)
        return asyncio.run(play_on_seat(seat, spec, sandbox, rollout, threads, env_id=7))


def test_an_environment_that_fails_at_reset_opens_no_conversation():
    """No seat trace with zero turns (prime-rl would drop the whole episode): the play ends as the loop's
    does, an environment failure that counts in the statistics, and the seat is never asked."""
    assert RAISES_AT_RESET != PARITY
    seat = FakeSeat()
    episode, trace = play(seat, RAISES_AT_RESET)
    assert trace is None and seat.opened == []
    assert episode.stop_reason == "env_error" and "reset" in episode.error and episode.return_ == 0.0


def test_a_failed_seat_call_fails_the_episode_instead_of_counting_as_a_play():
    from spade_rl.interop.verifiers.seats import SeatFailed

    with pytest.raises(SeatFailed, match="harness_error"):
        play(FakeSeat(fail=True), PARITY)
    episode, trace = play(FakeSeat(["x", "x"]), PARITY)  # the same game, a seat that answers: a play
    assert trace.info["spade"]["turns"] == len(episode.turns) >= 1


def test_one_environment_server_per_run_folder(selfplay, tmp_path):
    """A second server on one run folder is refused (two would write one archive and reward state)."""
    config = vf.resolve_env_config(
        {"taskset": {"id": "spade-selfplay"}, "overrides": ROUND, "run_dir": str(tmp_path / "run")}
    )

    async def go():
        first, second = vf.load_environment(config), vf.load_environment(config)
        async with first.serving():
            with pytest.raises(Exception, match="in use by another spade-selfplay"):
                async with second.serving():
                    pass
        third = vf.load_environment(config)
        async with third.serving():  # free again once the first has stopped
            pass
        other = vf.resolve_env_config(
            {
                "taskset": {"id": "spade-selfplay"},
                "overrides": [*ROUND, "loop.plays_per_env=2"],
                "run_dir": str(tmp_path / "run"),
            }
        )
        with pytest.raises(Exception, match="holds a run of another configuration"):
            async with vf.load_environment(other).serving():
                pass

    asyncio.run(go())


def test_episodes_at_once_share_the_archive_and_the_sandbox(selfplay, tmp_path):
    """Three rounds at once (as verifiers' runner and prime-rl run them): the design phases take turns on
    the archive's thread, the plays of all of them run together on the sandbox, every episode is whole."""
    from spade_rl.archive import Archive
    from spade_rl.policy import FakePolicy
    from spade_rl.policy.models import default_tokenizer, resolve_model
    from spade_rl.testing.fake_vllm import FakeVLLMServer

    run_dir = tmp_path / "run"
    config = vf.resolve_env_config(
        {"taskset": {"id": "spade-selfplay"}, "overrides": ROUND, "run_dir": str(run_dir)}
    )
    env = vf.load_environment(config)
    with FakeVLLMServer(FakePolicy(scripted_answer, tokenizer=default_tokenizer())) as server:
        client = train_client(server, resolve_model(None, tokenizer_only=True))
        ctx = vf.ModelContext(
            model="fake-vllm", client=client, sampling=vf.SamplingConfig(temperature=1.0, max_tokens=2048)
        )

        async def go():
            async with env.serving():
                tasks = list(env.taskset.take(3))
                return await asyncio.gather(*(env.run_episode(task, ctx) for task in tasks))

        episodes = asyncio.run(go())
    assert all(e.ok for e in episodes), [e.errors for e in episodes]
    rounds = sorted(
        next(t.info["spade"]["iteration"] for t in e.traces if t.agent.name == "proposer") for e in episodes
    )
    assert rounds == [1, 2, 3]  # one archive iteration per round, none taken twice
    for episode in episodes:
        assert [len(by_seat(episode)[s]) for s in ("solver", "hinted")] == [3, 2]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["iteration"] for line in lines) == [1, 2, 3]
    with Archive(run_dir / "archive.sqlite") as archive:
        designed = [archive.get(i) for i in archive.ids() if archive.get(i).origin == "designer"]
        assert len(designed) == 1  # the three rounds wrote the same game: one environment, three proposals
        assert sorted(h.iteration for h in archive.stats_history(designed[0].env_id)) == [1, 2, 3]
