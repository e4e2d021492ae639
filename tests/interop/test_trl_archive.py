"""TRL's GRPOTrainer on a spade-rl archive (spade_rl.interop.trl): the pool, the dataset of episode
prompts, the rollout_func's rows (a scripted policy through the real sandbox), and, marked slow, two
GRPO steps of a tiny random model whose rewards are the episodes' returns."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import pytest

from fixture_envs import PARITY
from spade_rl.archive import Archive
from spade_rl.interop.trl import (
    ROW_KEYS,
    TOOL_INSTRUCTIONS,
    SandboxEnvironment,
    SandboxEnvironments,
    SandboxRollout,
    environment_return,
    episode_prompt,
    episode_row,
    load_pool,
)
from spade_rl.policy import FakePolicy
from spade_rl.rollout import Episode, EpisodeSpec, RolloutConfig

CRASHES = """
class CrashEnv:
    def reset(self, seed=None):
        raise RuntimeError("broken on purpose")
    def step(self, action):
        return "", 0.0, True, False, {}
    def solution(self):
        return ["x"]
"""

CONFIG = RolloutConfig(max_turns=2, max_new_tokens=8, max_context_tokens=512, call_timeout_s=2.0)


def _parity_won(seed: int, actions: list[str]) -> bool:
    """The parity game's rule, computed here from the transcript (not read from the environment)."""
    return any((seed + len(a)) % 2 == 0 and a.strip() != "" and "%" not in a for a in actions)


def _trainer(**args):
    """What SandboxRollout reads of a GRPOTrainer when it is given a policy: the sampling settings."""
    defaults = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0}
    return SimpleNamespace(args=SimpleNamespace(**{**defaults, **args}), use_vllm=False)


@pytest.fixture
def pool_files(tmp_path):
    """A run directory with an archive (parity, a crashing one, an invalid one) and its JSONL export."""
    run = tmp_path / "run"
    run.mkdir()
    with Archive(run / "archive.sqlite") as archive:
        ids = [
            archive.add(
                source, valid=True, reason="ok", skill="t", setting="games", iteration=1, env_kwargs=kwargs
            ).env_id
            for source, kwargs in ((PARITY, {"max_turns": 2}), (CRASHES, None))
        ]
        bad = "class BadEnv: pass"
        archive.add(bad, valid=False, reason="no_reset", skill="t", setting="games", iteration=1)
        archive.export_jsonl(tmp_path / "pool.jsonl")
    return run, tmp_path / "pool.jsonl", ids


def test_the_pool_loads_from_a_run_directory_its_archive_and_its_export(pool_files):
    run, jsonl, (parity, crash) = pool_files
    for source in (run, run / "archive.sqlite", jsonl, str(jsonl)):
        envs = load_pool(source)
        assert [e.label for e in envs] == [f"env{parity}", f"env{crash}"]  # the invalid one is left out
        assert envs[0].source == PARITY and envs[0].env_kwargs == {"max_turns": 2}
    assert [e.label for e in load_pool(jsonl, ids=[crash])] == [f"env{crash}"]
    assert [e.label for e in load_pool("reference", ids=["guess"])] == ["guess"]


def test_pool_errors_say_what_was_wrong(pool_files, tmp_path):
    _, jsonl, _ = pool_files
    with pytest.raises(ValueError, match=r"cannot load environments from .*nowhere.*neither 'reference'"):
        load_pool(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"no environment 99 in .*; its valid ids: 1, 2$") as caught:
        load_pool(jsonl, ids=[99])
    assert "option envs" not in str(caught.value)  # worded for this caller, not for spade-rl eval
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds no valid environment"):
        load_pool(tmp_path / "empty.jsonl")


def test_the_dataset_has_one_named_episode_per_environment_and_seed(pool_files, sandbox):
    envs = load_pool(pool_files[1])
    rollout = SandboxRollout(envs, sandbox, CONFIG)
    data = rollout.dataset(seeds=[3, 5])
    assert data.column_names == ["prompt", "env", "seed", "setting"]
    assert data["prompt"] == [episode_prompt(e, s) for e in envs for s in (3, 5)]
    assert data["prompt"][0] == f"{envs[0].label}/seed=3" and data["seed"] == [3, 5, 3, 5]
    assert len(rollout.dataset(4)) == 8 and rollout.dataset(4)["seed"][:4] == [0, 1, 2, 3]
    specs = rollout.episode_specs(data["prompt"])
    assert [(s.source, s.seed, s.env_kwargs, s.use_hint) for s in specs[:2]] == [
        (PARITY, 3, {"max_turns": 2}, False),
        (PARITY, 5, {"max_turns": 2}, False),
    ]
    for bad in (0, -1, True, [], [1, -2], ["1"]):
        with pytest.raises(ValueError, match="seeds must be"):
            rollout.dataset(bad)


def test_prompts_that_name_no_episode_are_refused(pool_files, sandbox):
    rollout = SandboxRollout(load_pool(pool_files[1]), sandbox, CONFIG)
    for bad in ("env999/seed=1", "Play a game.", f"{rollout.envs[0].label}/seed=x"):
        with pytest.raises(ValueError, match="does not name an episode of this pool"):
            rollout.episode_specs([bad])
    with pytest.raises(ValueError, match="got a list"):
        rollout.episode_specs([[{"role": "user", "content": "hi"}]])
    with pytest.raises(ValueError, match="at least one environment"):
        SandboxRollout([], sandbox)


def test_rows_are_the_episodes_token_for_token_with_their_returns(pool_files, sandbox, tokenizer):
    """A scripted player says "xx" every turn: it wins the even seeds at once and loses the odd ones after
    two turns. The rows hold the conversation split at the first prompt, the model's tokens masked in."""
    envs = load_pool(pool_files[1], ids=[pool_files[2][0]])
    policy = FakePolicy(lambda chat: "xx", tokenizer=tokenizer, logprob=-0.5)
    rollout = SandboxRollout(envs, sandbox, CONFIG, policy=policy)
    prompts = [p for p in rollout.dataset(seeds=[0, 1])["prompt"] for _ in range(2)]  # groups of 2
    out = rollout(prompts, _trainer(temperature=0.7))
    assert set(out) == set(ROW_KEYS) and all(len(out[k]) == 4 for k in ROW_KEYS)
    assert out["episode_return"] == [1.0, 1.0, 0.0, 0.0]
    assert out["episode_won"] == [True, True, False, False] and out["episode_turns"] == [1, 1, 2, 2]
    assert out["episode_stop_reason"] == ["terminated", "terminated", "truncated", "truncated"]
    for i, episode in enumerate(rollout.episodes):
        assert out["prompt_ids"][i] + out["completion_ids"][i] == episode.token_ids
        assert len(out["completion_ids"][i]) == len(out["env_mask"][i]) == len(out["logprobs"][i])
        model_tokens = [t for t, m in zip(out["completion_ids"][i], out["env_mask"][i], strict=True) if m]
        assert tokenizer.decode(model_tokens, skip_special_tokens=True) == "xx" * len(episode.turns)
        assert {lp for lp, m in zip(out["logprobs"][i], out["env_mask"][i], strict=True) if m} == {-0.5}
        assert "Say something of the right length." in tokenizer.decode(out["prompt_ids"][i])
        assert out["env_mask"][i][0] == 1  # the completion opens with the model's first turn
    lost = tokenizer.decode(out["completion_ids"][2])
    assert "no" in lost and tokenizer.decode(out["completion_ids"][0]).count("xx") == 1
    assert policy.calls[0][1].temperature == 0.7  # the trainer's temperature, not the rollout config's


def test_a_broken_environment_answers_a_row_that_trains_nothing(pool_files, sandbox, tokenizer):
    envs = load_pool(pool_files[1])
    rollout = SandboxRollout(envs, sandbox, CONFIG, policy=FakePolicy(lambda chat: "x", tokenizer=tokenizer))
    crash = episode_prompt(envs[1], 0)
    out = rollout([crash, crash, episode_prompt(envs[0], 1), episode_prompt(envs[0], 1)], _trainer())
    eos = tokenizer.eos_token_id
    assert out["prompt_ids"][:2] == [[eos], [eos]] and out["completion_ids"][:2] == [[eos], [eos]]
    assert out["env_mask"][:2] == [[0], [0]] and out["episode_return"][:2] == [0.0, 0.0]
    assert out["episode_stop_reason"][:2] == ["env_error", "env_error"]
    assert "broken on purpose" in out["episode_error"][0]
    assert out["episode_return"][2:] == [1.0, 1.0]  # seed 1 + len("x") is even: the others played on


def test_an_episode_cut_before_its_first_turn_keeps_its_prompt():
    spec = EpisodeSpec("class XEnv: ...", seed=0)
    episode = Episode(spec, token_ids=[5, 6, 7], mask=[0, 0, 0], logprobs=[0.0] * 3, prompt_length=3)
    episode.stop_reason = "context"
    row = episode_row(episode, eos_token_id=2)
    assert row["prompt_ids"] == [5, 6, 7] and row["completion_ids"] == [2] and row["env_mask"] == [0]
    assert row["episode_return"] == 0.0 and row["episode_stop_reason"] == "context"


def test_trl_generation_options_it_would_not_apply_are_refused(pool_files, sandbox, tokenizer):
    envs = load_pool(pool_files[1])
    rollout = SandboxRollout(envs, sandbox, CONFIG, policy=FakePolicy(lambda c: "x", tokenizer=tokenizer))
    prompt = [episode_prompt(envs[0], 0)]
    for option in ({"top_k": 50}, {"min_p": 0.1}, {"repetition_penalty": 1.2}):
        with pytest.raises(ValueError, match=f"GRPOConfig.{next(iter(option))} .* not applied"):
            rollout(prompt, _trainer(**option))
    boxed = SandboxRollout(envs, sandbox, dataclasses.replace(CONFIG, action_stop={"games": ["}"]}))
    masking = _trainer()
    masking.mask_truncated_completions = True
    with pytest.raises(ValueError, match="mask_truncated_completions would drop"):
        boxed(prompt, masking)
    assert rollout(prompt, masking)["episode_return"] == [0.0]  # no stop strings: allowed
    in_process = SandboxRollout(envs, sandbox, CONFIG)
    with pytest.raises(ValueError, match="use_vllm"):
        in_process(prompt, SimpleNamespace(use_vllm=True, args=_trainer().args))


def test_the_reward_function_returns_the_returns_and_logs_play():
    logged = {}
    rewards = environment_return(
        prompts=["a", "b"],
        completions=["", ""],
        episode_return=[1.0, 0.0],
        episode_won=[True, False],
        episode_turns=[1, 3],
        episode_stop_reason=["terminated", "env_error"],
        env=["env1", "env1"],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert rewards == [1.0, 0.0]
    with pytest.raises(ValueError, match="reads the episode_return column that SandboxRollout answers"):
        environment_return(prompts=["a"], completions=[""])  # a trainer without the rollout
    assert logged == {"env/win_rate": 0.5, "env/mean_turns": 2.0, "env/env_error_rate": 0.5}


def test_the_tool_environment_plays_one_episode_per_reset_in_the_sandbox(pool_files, sandbox):
    """environment_factory's object, driven as TRL's tool loop drives it: reset with a dataset row, then
    one act per tool call; get_reward is the episode's return."""
    envs = load_pool(pool_files[1])
    factory = SandboxEnvironments(envs, sandbox, CONFIG)
    data = factory.dataset(seeds=[0, 1])
    assert data[0]["prompt"] == [{"role": "user", "content": TOOL_INSTRUCTIONS}]
    assert (data[0]["env"], data[0]["seed"]) == (envs[0].label, 0)
    tools = {
        n for n, _ in inspect.getmembers(SandboxEnvironment, inspect.isfunction) if not n.startswith("_")
    }
    assert tools == {"reset", "act", "get_reward"}  # TRL exposes all but reset and get_reward as tools

    env = factory()
    assert env.reset(**data[0]) == "Say something of the right length."
    assert env.act("xx") == "yes\n\nThe episode is over." and env.get_reward() == 1.0
    assert env.act("xx").startswith("The episode is over") and len(env.episode.turns) == 1
    assert env.reset(**data[1]) == "Say something of the right length."  # the same instance, anew
    assert env.act("xx") == "no" and env.act("xx") == "no\n\nThe episode is over."
    assert env.get_reward() == 0.0 and env.episode.stop_reason == "truncated"
    assert env.reset(env=envs[0].label, seed=3) and env.act("x") == "yes\n\nThe episode is over."

    broken = factory()
    answer = broken.reset(env=envs[1].label, seed=0, prompt="ignored")
    assert answer.startswith("The environment failed") and "broken on purpose" in answer
    assert broken.get_reward() == 0.0 and broken.episode.stop_reason == "env_error"
    assert broken.act("x").startswith("The episode is over")
    assert factory().get_reward() == 0.0  # never reset: nothing won
    with pytest.raises(ValueError, match="does not name an episode"):
        factory().reset(env="env999", seed=0)
    with pytest.raises(ValueError, match="env column"):
        factory().reset(prompt="no env")


@pytest.mark.slow
def test_grpo_trainer_trains_a_tiny_model_on_an_exported_pool(pool_files, sandbox, tokenizer, tmp_path):
    """Two GRPOTrainer steps through the real sandbox: the rewards TRL got are the parity game's verdicts
    on what the model wrote, the trainer logged them, and the weights moved."""
    pytest.importorskip("trl")
    from trl import GRPOConfig, GRPOTrainer

    from spade_rl.policy import tiny_random_model

    envs = load_pool(pool_files[1], ids=[pool_files[2][0]])  # parity: a random model wins about half
    rollout = SandboxRollout(envs, sandbox, CONFIG, seed=1)
    played, rewarded = [], []

    def recorded_rollout(prompts, trainer):
        out = rollout(prompts, trainer)
        played.append(list(rollout.episodes))
        return out

    def env_reward(**columns):
        rewards = environment_return(**columns)
        rewarded.append(rewards)
        return rewards

    model, _ = tiny_random_model(seed=0, tokenizer=tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=8,
        num_generations=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = GRPOTrainer(
        model,
        reward_funcs=env_reward,
        args=args,
        train_dataset=rollout.dataset(seeds=range(4)),
        processing_class=tokenizer,
        rollout_func=recorded_rollout,
    )
    trainer.train()

    assert len(played) == 2 and [len(r) for r in rewarded] == [8, 8]
    for episodes, rewards in zip(played, rewarded, strict=True):
        expected = [float(_parity_won(e.spec.seed, [t.action for t in e.turns])) for e in episodes]
        assert rewards == expected
        assert all(e.stop_reason in ("terminated", "truncated") for e in episodes)
        seeds = [e.spec.seed for e in episodes]
        assert seeds[:4] == [seeds[0]] * 4 and seeds[4:] == [seeds[4]] * 4  # one seed per group
    assert 0 < sum(map(sum, rewarded)) < 16  # some wins, some losses: a learning signal
    logs = [h for h in trainer.state.log_history if "rewards/env_reward/mean" in h]
    assert [h["rewards/env_reward/mean"] for h in logs] == pytest.approx([sum(r) / 8 for r in rewarded])
    assert [h["env/win_rate"] for h in logs] == pytest.approx([sum(r) / 8 for r in rewarded])
    change = max(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before, strict=True))
    assert change > 1e-5


@pytest.mark.slow
def test_the_example_trains_on_a_jsonl_pool(pool_files, tmp_path, capsys):
    """examples/trl_grpo_archive.py end to end at tiny scale: one step of the tiny random model."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo_archive.py"
    spec = importlib.util.spec_from_file_location("trl_grpo_archive", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tmp_path / "trained"
    argv = ["--jsonl", str(pool_files[1]), "--envs", str(pool_files[2][0]), "--model", "tiny-random"]
    argv += ["--steps", "1", "--seeds", "2", "--group-size", "2", "--batch", "4", "--max-turns", "2"]
    argv += ["--max-new-tokens", "8", "--max-context", "512", "--no-boxed", "--sandbox-workers", "1"]
    assert example.main([*argv, "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 environments from" in printed and "mean episode return: first step" in printed
    assert (out / "config.json").exists()
    assert example.main(["--jsonl", str(tmp_path / "missing.jsonl")]) == 2


@pytest.mark.slow
def test_grpo_trainer_runs_the_tool_environments(pool_files, sandbox, tokenizer, tmp_path):
    """environment_factory under GRPOTrainer, with a chat template that renders tool calls (TRL's Qwen2.5
    template over the same ChatML tokens): every rollout's environment is reset in the sandbox from its
    row, and the reward TRL logs is the environments' get_reward."""
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from chat_templates import with_template
    from spade_rl.policy import tiny_random_model

    tool_tokenizer = with_template(tokenizer, qwen2_5_chat_template)
    envs = load_pool(pool_files[1], ids=[pool_files[2][0]])
    factory = SandboxEnvironments(envs, sandbox, CONFIG)
    made = []

    def counted():
        made.append(factory())
        return made[-1]

    model, _ = tiny_random_model(seed=0, tokenizer=tool_tokenizer)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=16,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = GRPOTrainer(
        model,
        args=args,
        train_dataset=factory.dataset(seeds=range(2)),
        processing_class=tool_tokenizer,
        environment_factory=counted,
    )
    trainer.train()
    played = [e for e in made if e.episode is not None]
    assert len(played) == 4 and {e.episode.spec.source for e in played} == {PARITY}
    assert sorted(e.episode.spec.seed for e in played) in ([0, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1])
    logged = [
        h["rewards/SandboxEnvironment/mean"]
        for h in trainer.state.log_history
        if "rewards/SandboxEnvironment/mean" in h
    ]
    assert logged == pytest.approx([sum(e.get_reward() for e in played) / 4])
