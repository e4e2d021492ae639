"""Rewards and advantages, against numbers computed by hand."""

from __future__ import annotations

import math
import random

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
    # 0.2, then 0.8 shared among the thirteen checks a default validation runs (design.report.PROGRESS_CHECKS)
    assert len(BATTERY_CHECKS) == 13
    assert validation_progress("reset_bad_type", ["static", "instantiates"]) == pytest.approx(
        0.2 + 0.8 * 2 / 13
    )
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
    ) == pytest.approx(0.2 + 0.8 * 7 / 13)
    shaped = DesignerRewardConfig(progress_bonus=0.1)
    assert invalid_design_reward("syntax_error", shaped) == pytest.approx(0.01)
    timeout = -0.5 + 0.1 * (0.2 + 0.8 * 2 / 13)
    assert invalid_design_reward("timeout", shaped, ["static", "instantiates"]) == pytest.approx(timeout)
    assert invalid_design_reward("syntax_error", DesignerRewardConfig()) == 0.0  # the paper's setting
    # A valid design earns the whole bonus on top of its blend: one nobody solves (0) still beats the
    # best invalid one.
    assert designer_reward(0.0, 0.0, shaped) == pytest.approx(0.1)
    assert designer_reward(0.3, 0.075, shaped) == pytest.approx(0.66)
    assert designer_reward(0.0, 0.0, shaped) > invalid_design_reward(
        "trivial_policy_wins", shaped, BATTERY_CHECKS[:-2]
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


def test_regret_bound_by_hand():
    """Two plays a side, returns 1, 1 with the hint and 0, 0 without: with one 0 and one 1 added to each
    arm, m = 3/4 and 1/4, v = 3/16 * 4 / 3 = 1/4 each, se = sqrt(2 * (1/4) / 4) = 0.3536; at 95% (z =
    1.6449) the bound is 0.5 - 0.5816 < 0: two plays a side prove nothing."""
    from spade_rl.rewards import regret_bound

    assert regret_bound([1.0, 1.0], [0.0, 0.0]) == 0.0
    # Sixteen a side, all won with the hint, none without: m = 17/18 and 1/18, v = (16 (1/18)^2 + (17/18)^2
    # + (1/18)^2) / 17 each.
    m, n = 17 / 18, 16
    v = (n * (1 - m) ** 2 + m**2 + (1 - m) ** 2) / (n + 1)
    expected = (m - (1 - m)) - 1.6448536269514722 * math.sqrt(2 * v / (n + 2))
    assert regret_bound([1.0] * n, [0.0] * n) == pytest.approx(expected)
    assert regret_bound([1.0] * n, [0.0] * n, confidence=0.0) == regret([1.0] * n, [0.0] * n) == 1.0
    # a reward range other than [0, 1]: the same bound, in its units
    assert regret_bound([2.0] * n, [-2.0] * n, reward_range=(-2.0, 2.0)) == pytest.approx(4 * expected)
    with pytest.raises(ValueError, match="regret confidence"):
        regret_bound([1.0], [0.0], confidence=1.0)


def test_a_coin_flip_is_paid_about_nothing():
    """A design won half the time with and without the hint, 8 + 8 plays: the plain regret pays its noise
    (about 0.1 on average), the bound about nothing; a hint that helps keeps most of its pay."""
    from spade_rl.rewards import regret_bound

    rng = random.Random(0)

    def plays(p: float) -> list[float]:
        return [float(rng.random() < p) for _ in range(8)]

    draws = [(plays(0.5), plays(0.5)) for _ in range(4000)]
    plain = sum(regret(w, wo) for w, wo in draws) / len(draws)
    bound = sum(regret_bound(w, wo) for w, wo in draws) / len(draws)
    assert plain > 0.08 and bound < 0.01, (plain, bound)
    helped = [(plays(1.0), plays(0.125)) for _ in range(1000)]
    assert sum(regret_bound(w, wo) for w, wo in helped) / len(helped) > 0.35


def test_regret_confidence_is_checked():
    for bad in (-0.1, 1.0, True, "high"):
        with pytest.raises(ValueError, match="regret_confidence must lie in"):
            DesignerRewardConfig(regret_confidence=bad)
    assert DesignerRewardConfig().regret_confidence == 0.95


def test_check_names_are_defined_once():
    """The battery records only names of design.report.CHECKS, and the progress ladder is its subset."""
    from spade_rl.design.report import CHECKS

    assert set(BATTERY_CHECKS) <= set(CHECKS) and len(set(CHECKS)) == len(CHECKS)
    assert [c for c in CHECKS if c in BATTERY_CHECKS] == list(BATTERY_CHECKS)  # in the battery's order
