"""The paper configurations resolve to the reference implementation's values: one table, each row naming the
file of spade-rl/spade that the value comes from (read there; SPADE.md, "The reference recipe in numbers").
Checked on the resolved configuration, every key the files do not write included: none comes from the CPU
profile, and the update resolves as the reference trains (old log-probs, truncated importance sampling)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_rl.loop.config import load_config, resolve_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GAMES = "cmd/games/train_spade_4b.sh"
TOOLS = "cmd/tool_use/_train_spade_blend.sh"
SLIME = "slime's argument defaults (--tis-clip 2.0)"
REWARDS = "spade/core/utils/rewards.py (STEP_TIMEOUT_PENALTY)"
GENERATOR = "SPADE.md, the reference recipe: invalid designs retried up to 8 times (3 when grounded)"
MEMORY = "spade/core/env_memory.py (EnvironmentMemory)"
DELAYED = "spade/core/utils/delayed_env_rewards.py (negative blends masked)"
SCALE = "spade/core/utils/rewards.py (compute_env_reward_scale: max_scale 50)"
DELAY = (
    " (--spade-proposer-training-delay; held in spade/slime/spade_rollout.py, rewarded by "
    "spade/core/utils/delayed_env_rewards.py)"
)
LP = " (--spade-gamma1 / --spade-gamma2; spade/core/learning_potential.py)"
ARGS = "spade/slime/arguments.py (the argument's default)"
ABLATIONS = "cmd/ablations/train_{learning_potential,solve_rate}_30b.sh"
# The agent's plays per game: trajectories_per_game = ceil(global_batch_size / games), 192 / 24 = 8 (the flag
# --spade-trajectories-per-game 16 reaches only the fixed-evaluation plays in spade/slime/spade_rollout.py).
PLAYS = "spade/core/orchestrator.py (collect_trajectories) with --global-batch-size 192, 24 games"
SEEDS = "spade/core/orchestrator.py (plays reset without a seed; hint plays seeded hash(game + index))"
SAMPLE = "spade/core/orchestrator.py (collect_trajectories: random.sample of the games)"
STEP = " (--global-batch-size 192 --use-dynamic-global-batch-size: one optimiser step per rollout)"
CONTEXT = " (--spade-max-context-length 32768: a trajectory is trained whole)"
VALIDATOR = TOOLS + " (--spade-use-env-validator)"
ZERO_STD = "spade/slime/spade_rollout.py (zero-std groups counted in rollout/zero_std_group_pct, kept)"

# (key, games value, tool-use value, where the games value is read, where the tool-use value is read)
REFERENCE = [
    ("loop.iterations", 400, 400, GAMES, TOOLS),
    ("loop.designs_per_iteration", 24, 24, GAMES, TOOLS),
    ("loop.envs_per_iteration", 24, 24, GAMES, TOOLS),
    ("loop.plays_per_env", 8, 8, PLAYS, PLAYS),
    ("loop.hint_plays", 16, 16, GAMES + " (--spade-hint-plays-per-game 16)", TOOLS),
    ("loop.group_seeds", "distinct", "distinct", SEEDS, SEEDS),
    ("loop.pool_replace", False, False, SAMPLE, SAMPLE),
    ("loop.groups_per_step", 0, 0, GAMES + STEP, TOOLS + STEP),
    ("loop.drop_zero_signal_groups", False, False, ZERO_STD, ZERO_STD),
    ("loop.regenerate_every", 4, 8, GAMES, TOOLS),
    ("design.setting", "games", "tool_use", GAMES, TOOLS),
    ("design.hint_mode", "separate", "separate", GAMES, TOOLS),
    ("design.max_new_tokens", 16384, 16384, GAMES, TOOLS),
    ("design.hint_max_new_tokens", 4096, 2048, GAMES, TOOLS),
    ("design.hint_temperature", 0.3, 0.3, GAMES, TOOLS),
    ("design.invalid", "retry", "retry", GENERATOR, GENERATOR),
    ("design.retries", 8, 8, GENERATOR, GENERATOR),
    ("design.retries_grounded", 3, 3, GENERATOR, GENERATOR),
    ("design.skills_per_phase", 3, None, GAMES, TOOLS + " (no --spade-skills-per-regen: every skill)"),
    ("design.temperature", 0.6, 0.6, GAMES, TOOLS),
    ("rollout.max_turns", 25, 25, GAMES, TOOLS),
    ("rollout.max_new_tokens", 8192, 8192, GAMES, TOOLS),
    ("rollout.max_context_tokens", 32768, 32768, GAMES, TOOLS),
    ("rollout.temperature", 0.6, 0.6, GAMES, TOOLS),
    ("rewards.mode", "blend", "blend", GAMES, TOOLS),
    ("rewards.w_plateau", 0.6, 0.6, GAMES, TOOLS),
    ("rewards.w_regret", 0.4, 0.4, GAMES, TOOLS),
    ("rewards.regret_scale", 0.15, 0.15, GAMES, TOOLS),
    ("rewards.plateau_low", 0.4, 0.4, GAMES, TOOLS),
    ("rewards.plateau_high", 0.6, 0.6, GAMES, TOOLS),
    ("rewards.plateau_ramp", 0.25, 0.25, GAMES, TOOLS),
    ("rewards.timeout_penalty", -0.5, -0.5, REWARDS, REWARDS),
    ("rewards.scale", "reference", "reference", SCALE, SCALE),
    ("rewards.mask_negative", True, True, DELAYED, DELAYED),
    ("rewards.max_scale", 50.0, 50.0, SCALE, SCALE),
    ("rewards.delay", 4, 8, GAMES + DELAY, TOOLS + DELAY),
    ("rewards.lp_gamma_fast", 0.98, 0.98, GAMES + LP, TOOLS + LP),
    ("rewards.lp_gamma_slow", 0.85, 0.85, GAMES + LP, TOOLS + LP),
    ("corpus.max_words", 4500, 3000, GAMES + " (--spade-corpus-max-doc-tokens 6000)", TOOLS + " (4000)"),
    ("design.prompt.max_document_words", 4500, 3000, GAMES + " (6000 tokens)", TOOLS + " (4000 tokens)"),
    ("train.max_completion_length", 32768, 32768, GAMES + CONTEXT, TOOLS + CONTEXT),
    ("train.learning_rate", 1e-6, 1e-6, GAMES, TOOLS),
    ("train.lr_scheduler_type", "constant", "constant", GAMES, TOOLS),
    ("train.weight_decay", 0.1, 0.1, GAMES, TOOLS),
    ("train.adam_beta1", 0.9, 0.9, GAMES, TOOLS),
    ("train.adam_beta2", 0.98, 0.98, GAMES, TOOLS),
    ("train.epsilon_low", 0.2, 0.2, GAMES, TOOLS),
    ("train.epsilon_high", 0.28, 0.28, GAMES, TOOLS),
    ("train.beta", 0.0, 0.005, GAMES, TOOLS),
    ("update_config.old_logprobs", "recompute", "recompute", GAMES, TOOLS),
    ("update_config.tis_cap", 2.0, 2.0, SLIME, SLIME),
    ("warmup.designs", 0, 0, GAMES, TOOLS),
    ("archive.memory_mode", "reference", "reference", MEMORY, MEMORY),
    ("archive.memory_window", 200, 200, GAMES, TOOLS),
    ("archive.memory_negative_below", 0.1, 0.1, MEMORY, MEMORY),
    ("archive.memory_negative_above", 0.9, 0.9, MEMORY, MEMORY),
    ("archive.frontier_low", 0.15, 0.15, MEMORY, MEMORY),
    ("archive.frontier_high", 0.85, 0.85, MEMORY, MEMORY),
    ("design.prompt.max_example_chars", 2000, 2000, MEMORY, MEMORY),
    ("design.form", "module", "tool_kit", GAMES, TOOLS + " (qwen3_tool_use_game_generation: ToolUseBaseEnv)"),
    (
        "design.validation.reset_gate_seeds",
        0,
        3,
        GAMES + " (no SPADE_RESET_GATE)",
        TOOLS + " (SPADE_RESET_GATE=1; spade/core/envs/synthetic_game_env.py: seeds (0, 1, 2))",
    ),
    ("design.validation.repair_rounds", 0, 0, ARGS, ARGS),
    # On for games too (issue 56: the judge reads a key against its question, which no gate can), though
    # the reference's games script leaves it off: the one value here that is ours, not the reference's.
    (
        "design.validation.llm_validator.enabled",
        True,
        True,
        "ours (issue 56)",
        TOOLS + " (--spade-use-env-validator)",
    ),
    ("design.validation.llm_validator.temperature", 0.3, 0.3, ARGS, ARGS),
    ("design.validation.llm_validator.max_new_tokens", 16384, 16384, ARGS, ARGS),
]


def value(config, dotted: str):
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


@pytest.fixture(scope="module")
def paper():
    return {
        "games": load_config(CONFIGS / "spade-paper-games.toml", processes=1),
        "tool_use": load_config(CONFIGS / "spade-paper-tool-use.toml", processes=1),
    }


@pytest.mark.parametrize(("key", "games", "tool_use", "games_file", "tool_use_file"), REFERENCE)
def test_the_paper_configurations_hold_the_reference_values(
    paper, key, games, tool_use, games_file, tool_use_file
):
    assert value(paper["games"], key) == games, f"{key}: the reference's {games!r} ({games_file})"
    assert value(paper["tool_use"], key) == tool_use, f"{key}: the reference's {tool_use!r} ({tool_use_file})"


def test_the_gpu_experiment_runs_on_the_paper_configuration():
    text = (CONFIGS.parent / "experiments" / "qwen3-gpu.toml").read_text()
    assert 'base = "../configs/spade-paper-games.toml"' in text


@pytest.mark.parametrize("name", ["spade-paper-games.toml", "spade-paper-tool-use.toml"])
def test_no_paper_value_comes_from_the_cpu_profile(name):
    """They build on no profile: every value is the file's or its component's own default, and the defaults
    they take are those of a GPU run (no cap on a batch's cache, bfloat16 generation on a GPU)."""
    resolved = resolve_config(CONFIGS / name, processes=1)
    config = resolved.config
    assert config.profile == "none"
    assert not [key for key, source in resolved.sources.items() if source.startswith("profile")]
    transformers = config.policy.transformers
    assert (transformers.dtype, transformers.autocast, transformers.batch_tokens) == ("float32", "gpu", 0)
    assert (config.train.checkpoint_rows_longer_than, config.rewards.progress_bonus) == (0, 0.0)


@pytest.mark.parametrize("mode", ["learning_potential", "solve_rate"])
def test_the_reward_ablations_run_on_the_paper_configuration(mode):
    """The reference's reward controls (ABLATIONS) are the paper configuration with one reward mode, delay
    and all (their launcher is the 30b games script, PROPOSER_DELAY 4)."""
    config = load_config(CONFIGS / "spade-paper-games.toml", [f"rewards.mode='{mode}'"], processes=1)
    assert (config.rewards.mode, config.rewards.delay) == (mode, 4), ABLATIONS
