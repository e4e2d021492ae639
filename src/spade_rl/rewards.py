"""Rewards and advantages of both roles: small pure functions over floats.

Agent: the return of an episode is its final reward, 0 when the episode was truncated (ran out of
turns or context). Advantages are z-scores within the group of plays of one environment.

Designer: hint-based regret ``max(0, mean(R_hint) - mean(R_nohint))``; the difficulty plateau
``plateau(win)`` (1 inside ``[0.4, 0.6]``, falling linearly to 0 over 0.25 on each side); the
reference blend ``0.6 * plateau(win) + 0.4 * clip(regret / 0.15, 0, 1)``, or pure regret, or the
pure plateau. Designs that fail validation get a fixed penalty (0 when invalid, -0.5 on timeout).
Designer advantages are centred within their group (one prompt group or one skill).

A group whose rewards are all equal carries no signal for GRPO: :func:`zscore_advantages` and
:func:`centred_advantages` report it (``has_signal``) so that callers can count such groups and drop
them from the update.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DESIGNER_MODES = ("blend", "regret", "plateau")
DESIGNER_SCALES = ("none", "reference")


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def episode_return(final_reward: float, truncated: bool) -> float:
    """An episode's return: its final reward, or 0 when it was truncated."""
    return 0.0 if truncated else float(final_reward)


def regret(returns_with_hint: Sequence[float], returns_without_hint: Sequence[float]) -> float:
    """Hint-based regret ``max(0, mean(with) - mean(without))``."""
    return max(0.0, mean(returns_with_hint) - mean(returns_without_hint))


def plateau(win_rate: float, low: float = 0.4, high: float = 0.6, ramp: float = 0.25) -> float:
    """1 for a win rate inside ``[low, high]``, linear down to 0 at ``low - ramp`` and ``high + ramp``."""
    if not 0.0 <= low <= high <= 1.0 or ramp <= 0:
        raise ValueError(f"plateau needs 0 <= low <= high <= 1 and ramp > 0, got {low}, {high}, {ramp}")
    if win_rate < low:
        return max(0.0, 1.0 - (low - win_rate) / ramp)
    if win_rate > high:
        return max(0.0, 1.0 - (win_rate - high) / ramp)
    return 1.0


@dataclass(frozen=True)
class DesignerRewardConfig:
    mode: str = "blend"  # blend | regret | plateau
    w_plateau: float = 0.6
    w_regret: float = 0.4
    regret_scale: float = 0.15
    plateau_low: float = 0.4
    plateau_high: float = 0.6
    plateau_ramp: float = 0.25
    invalid_penalty: float = 0.0
    timeout_penalty: float = -0.5
    # Our extension, off in the paper's setting: an invalid design also earns
    # progress_bonus * validation_progress(...), so that a small model whose designs all fail still
    # learns to fail later (code block < parses < instantiates < ... < deterministic).
    progress_bonus: float = 0.0
    # The designer's centred advantages times a factor: "none" (1), or "reference": the reference's
    # min(N_agent / N_designer * regenerate_every, max_scale) (spade-rl/spade, spare/core/utils/rewards.py
    # compute_env_reward_scale), so that the few designer samples of an iteration weigh about as much as the
    # many agent samples over a regeneration window.
    scale: str = "none"
    max_scale: float = 50.0
    # True: a design whose reward is negative (a timeout's penalty) is left out of the designer's update
    # instead of weighing on its group's mean (the reference masks negative blends: spare/core/utils/
    # delayed_env_rewards.py, "Games with blend < 0 are masked from the proposer update").
    mask_negative: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.mask_negative, bool):
            raise ValueError(
                f"designer reward mask_negative must be true or false, got {self.mask_negative!r}"
            )
        if self.scale not in DESIGNER_SCALES:
            raise ValueError(f"designer reward scale {self.scale!r} is not one of {list(DESIGNER_SCALES)}")
        if not self.max_scale >= 1.0:
            raise ValueError(f"designer reward max_scale must be at least 1, got {self.max_scale}")
        if self.mode not in DESIGNER_MODES:
            raise ValueError(f"designer reward mode {self.mode!r} is not one of {list(DESIGNER_MODES)}")
        if self.regret_scale <= 0:
            raise ValueError(f"regret_scale must be positive, got {self.regret_scale}")
        if self.w_plateau < 0 or self.w_regret < 0 or self.progress_bonus < 0:
            raise ValueError("w_plateau, w_regret and progress_bonus must not be negative")
        plateau(0.5, self.plateau_low, self.plateau_high, self.plateau_ramp)  # validates the plateau


def designer_reward(win_rate: float, regret_value: float, config: DesignerRewardConfig) -> float:
    """The reward of a valid design from its no-hint win rate and its regret, plus the whole progress
    bonus (``progress_bonus * 1``): a valid design is never worth less than an invalid one, whatever
    the agent made of it (with the bonus on, an invalid design that got far would otherwise out-earn a
    valid one that nobody solves)."""
    on_plateau = plateau(win_rate, config.plateau_low, config.plateau_high, config.plateau_ramp)
    scaled_regret = min(1.0, max(0.0, regret_value / config.regret_scale))
    if config.mode == "regret":
        return regret_value + config.progress_bonus
    if config.mode == "plateau":
        return on_plateau + config.progress_bonus
    return config.w_plateau * on_plateau + config.w_regret * scaled_regret + config.progress_bonus


# How far a design got, by the first failure: stages before the validation battery, then the
# battery's checks in order (spade_rl.design.validate).
# ("truncated": the answer was cut off by the token limit, usually inside its code.)
PARSE_STAGES = {"no_code_block": 0.0, "truncated": 0.5, "syntax_error": 1.0}
BATTERY_CHECKS = (
    "static",
    "instantiates",
    "reset_types",
    "solution_types",
    "solution_wins",
    "malformed_actions",
    "terminates",
    "deterministic",
    "instances",
    "trivial_policies",
)


def validation_progress(reason: str, checks_passed: Sequence[str] = ()) -> float:
    """Progress in [0, 1] of a design that failed with ``reason`` after passing ``checks_passed``:
    0 without any code, 0.05 for an answer cut off by the token limit, 0.1 for code that does not parse,
    0.2 for code that parses,
    then 0.2 + 0.8 * the share of ``BATTERY_CHECKS`` passed (1.0 would be a valid design)."""
    if reason in PARSE_STAGES:
        return PARSE_STAGES[reason] / 10
    passed = sum(1 for check in set(checks_passed) if check in BATTERY_CHECKS)
    return min(1.0, 0.2 + 0.8 * passed / len(BATTERY_CHECKS))


def invalid_design_reward(
    reason: str, config: DesignerRewardConfig, checks_passed: Sequence[str] = ()
) -> float:
    """The penalty of a design that failed parsing or validation with ``reason`` (plus the optional
    progress bonus)."""
    base = config.timeout_penalty if reason in ("timeout", "validation_timeout") else config.invalid_penalty
    return base + config.progress_bonus * validation_progress(reason, checks_passed)


@dataclass(frozen=True)
class GroupAdvantages:
    advantages: tuple[float, ...]
    has_signal: bool  # False when every reward in the group is the same


def zscore_advantages(rewards: Sequence[float], eps: float = 1e-6) -> GroupAdvantages:
    """Agent advantages: ``(r - mean) / (std + eps)`` within one group (population std)."""
    m = mean(rewards)
    std = math.sqrt(math.fsum((r - m) ** 2 for r in rewards) / len(rewards))
    if std < eps:
        return GroupAdvantages(tuple(0.0 for _ in rewards), False)
    return GroupAdvantages(tuple((r - m) / (std + eps) for r in rewards), True)


def designer_scale(
    agent_samples: int, designer_samples: int, regenerate_every: int, config: DesignerRewardConfig
) -> float:
    """The factor of the designer's advantages (``config.scale``): 1, or the reference's
    ``min(agent_samples / designer_samples * regenerate_every, max_scale)`` (1 when either count is 0)."""
    if config.scale == "none" or agent_samples <= 0 or designer_samples <= 0:
        return 1.0
    return min(agent_samples / designer_samples * regenerate_every, config.max_scale)


def centred_advantages(rewards: Sequence[float], eps: float = 1e-9) -> GroupAdvantages:
    """Designer advantages: ``r - mean`` within one group."""
    m = mean(rewards)
    advantages = tuple(r - m for r in rewards)
    return GroupAdvantages(advantages, any(abs(a) > eps for a in advantages))
