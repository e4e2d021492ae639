"""Rewards and advantages, against numbers computed by hand."""

from __future__ import annotations

import math

import pytest

from spade_rl.rewards import (
    BATTERY_CHECKS,
    DesignerRewardConfig,
    centred_advantages,
    designer_reward,
    episode_return,
    invalid_design_reward,
    plateau,
    regret,
    zscore_advantages,
)


def test_episode_return():
    assert episode_return(1.0, truncated=False) == 1.0
    assert episode_return(0.4, truncated=False) == 0.4
    assert episode_return(1.0, truncated=True) == 0.0


def test_regret_is_floored():
    assert regret([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.25)
    assert regret([0, 0], [1, 1]) == 0.0
    with pytest.raises(ValueError):
        regret([], [1])


@pytest.mark.parametrize(
    ("win", "expected"),
    [(0.5, 1.0), (0.4, 1.0), (0.6, 1.0), (0.3, 0.6), (0.15, 0.0), (0.0, 0.0), (0.7, 0.6), (0.85, 0.0),
     (1.0, 0.0), (0.2, 0.2)],
)  # fmt: skip
def test_plateau(win, expected):
    assert plateau(win) == pytest.approx(expected)


def test_designer_reward_blend_and_modes():
    config = DesignerRewardConfig()
    # win 0.3 -> plateau 0.6; regret 0.075 -> 0.5 of scale: 0.6*0.6 + 0.4*0.5 = 0.56
    assert designer_reward(0.3, 0.075, config) == pytest.approx(0.56)
    # regret above scale is clipped to 1: 0.6*1 + 0.4*1 = 1
    assert designer_reward(0.5, 0.5, config) == pytest.approx(1.0)
    assert designer_reward(1.0, 0.0, config) == 0.0
    assert designer_reward(0.3, 0.075, DesignerRewardConfig(mode="regret")) == pytest.approx(0.075)
    assert designer_reward(0.3, 0.075, DesignerRewardConfig(mode="plateau")) == pytest.approx(0.6)


def test_penalties():
    config = DesignerRewardConfig()
    assert invalid_design_reward("syntax_error", config) == 0.0
    assert invalid_design_reward("timeout", config) == -0.5
    assert invalid_design_reward("validation_timeout", config) == -0.5


def test_zscore_advantages():
    # rewards 1, 0, 0, 1: mean 0.5, population std 0.5 -> +-1
    group = zscore_advantages([1.0, 0.0, 0.0, 1.0])
    assert group.has_signal
    assert group.advantages == pytest.approx((1.0, -1.0, -1.0, 1.0), abs=1e-5)
    # 1, 0, 0, 0: mean 0.25, std sqrt(0.1875) = 0.4330 -> 1.7321, -0.5774
    assert zscore_advantages([1, 0, 0, 0]).advantages == pytest.approx(
        (1.7321, -0.5774, -0.5774, -0.5774), abs=1e-4
    )
    flat = zscore_advantages([0.5, 0.5, 0.5])
    assert not flat.has_signal and flat.advantages == (0.0, 0.0, 0.0)


def test_centred_advantages():
    group = centred_advantages([0.56, 0.0, -0.5, 0.2])
    assert group.advantages == pytest.approx((0.495, -0.065, -0.565, 0.135))
    assert math.fsum(group.advantages) == pytest.approx(0.0)
    assert not centred_advantages([0.0, 0.0]).has_signal


def test_config_errors():
    with pytest.raises(ValueError, match="blend"):
        DesignerRewardConfig(mode="max")
    with pytest.raises(ValueError, match="plateau"):
        DesignerRewardConfig(plateau_low=0.7, plateau_high=0.6)


def test_validation_progress_and_bonus():
    from spade_rl.rewards import validation_progress

    assert validation_progress("no_code_block") == 0.0
    assert validation_progress("truncated") == 0.05
    assert validation_progress("syntax_error") == 0.1
    assert validation_progress("no_env_class") == 0.2
    # 0.2, then 0.8 shared among the ten battery checks
    assert validation_progress("reset_bad_type", ["static", "instantiates"]) == pytest.approx(0.36)
    assert validation_progress(
        "nondeterministic",
        [
            "static",
            "instantiates",
            "reset_types",
            "solution_types",
            "solution_wins",
            "malformed_actions",
            "terminates",
        ],
    ) == pytest.approx(0.76)
    shaped = DesignerRewardConfig(progress_bonus=0.1)
    assert invalid_design_reward("syntax_error", shaped) == pytest.approx(0.01)
    assert invalid_design_reward("timeout", shaped, ["static", "instantiates"]) == pytest.approx(-0.464)
    assert invalid_design_reward("syntax_error", DesignerRewardConfig()) == 0.0  # the paper's setting
    # A valid design earns the whole bonus on top of its blend: one nobody solves (0) still beats the
    # best invalid one (0.1 * 0.92).
    assert designer_reward(0.0, 0.0, shaped) == pytest.approx(0.1)
    assert designer_reward(0.3, 0.075, shaped) == pytest.approx(0.66)
    assert designer_reward(0.0, 0.0, shaped) > invalid_design_reward(
        "trivial_policy_wins", shaped, BATTERY_CHECKS[:9]
    )
    assert designer_reward(0.3, 0.075, DesignerRewardConfig(mode="plateau")) == pytest.approx(0.6)  # no bonus


def test_designer_scale_is_the_references_when_asked():
    from spade_rl.rewards import designer_scale

    reference = DesignerRewardConfig(scale="reference")
    assert designer_scale(96, 4, 4, DesignerRewardConfig()) == 1.0  # "none"
    assert designer_scale(12, 4, 1, reference) == 3.0  # 12 / 4 * 1
    assert designer_scale(96, 24, 4, reference) == 16.0  # 96 / 24 * 4
    assert designer_scale(384, 24, 4, reference) == 50.0  # 64, capped at max_scale
    assert designer_scale(384, 24, 4, DesignerRewardConfig(scale="reference", max_scale=80.0)) == 64.0
    assert designer_scale(0, 4, 4, reference) == 1.0 and designer_scale(12, 0, 4, reference) == 1.0
    with pytest.raises(ValueError, match="scale 'big' is not one of"):
        DesignerRewardConfig(scale="big")
    with pytest.raises(ValueError, match="max_scale must be at least 1"):
        DesignerRewardConfig(scale="reference", max_scale=0.5)
