"""The paper configurations hold the reference implementation's values: one table, each row naming the
file of spade-rl/spade that the value comes from (read there; SPADE.md, "The reference recipe in numbers")."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_rl.loop.config import load_config

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

# (key, games value, tool-use value, where the games value is read, where the tool-use value is read)
REFERENCE = [
    ("loop.iterations", 400, 400, GAMES, TOOLS),
    ("loop.designs_per_iteration", 24, 24, GAMES, TOOLS),
    ("loop.envs_per_iteration", 24, 24, GAMES, TOOLS),
    ("loop.plays_per_env", 16, 16, GAMES, TOOLS),
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
    ("train.learning_rate", 1e-6, 1e-6, GAMES, TOOLS),
    ("train.lr_scheduler_type", "constant", "constant", GAMES, TOOLS),
    ("train.weight_decay", 0.1, 0.1, GAMES, TOOLS),
    ("train.adam_beta1", 0.9, 0.9, GAMES, TOOLS),
    ("train.adam_beta2", 0.98, 0.98, GAMES, TOOLS),
    ("train.epsilon_low", 0.2, 0.2, GAMES, TOOLS),
    ("train.epsilon_high", 0.28, 0.28, GAMES, TOOLS),
    ("train.beta", 0.0, 0.005, GAMES, TOOLS),
    ("train.old_logprobs", "recompute", "recompute", GAMES, TOOLS),
    ("train.tis_cap", 2.0, 2.0, SLIME, SLIME),
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
    ("design.validation.llm_validator.enabled", False, True, GAMES, TOOLS + " (--spade-use-env-validator)"),
    ("design.validation.llm_validator.temperature", 0.3, 0.3, ARGS, ARGS),
    ("design.validation.llm_validator.max_new_tokens", 1024, 16384, "ours (the validator is off)", ARGS),
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


@pytest.mark.parametrize("mode", ["learning_potential", "solve_rate"])
def test_the_reward_ablations_run_on_the_paper_configuration(mode):
    """The reference's reward controls (ABLATIONS) are the paper configuration with one reward mode, delay
    and all (their launcher is the 30b games script, PROPOSER_DELAY 4)."""
    config = load_config(CONFIGS / "spade-paper-games.toml", [f"rewards.mode='{mode}'"], processes=1)
    assert (config.rewards.mode, config.rewards.delay) == (mode, 4), ABLATIONS
