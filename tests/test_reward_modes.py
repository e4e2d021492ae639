"""The reference's designer reward variants and its delayed window, as pure functions, with hand-computed
numbers (spade-rl/spade: spade/core/learning_potential.py, spade/core/utils/delayed_env_rewards.py)."""

import pytest

from spade_rl.rewards import (
    DESIGNER_MODES,
    DesignerRewardConfig,
    LearningPotential,
    WindowPlay,
    designer_reward,
    learnability,
    window_designer_reward,
    window_win_rate,
)

# Three iterations of one environment's no-hint play: 4 episodes at 0.25, 4 at 0.75, 8 at 0.5.
WINDOW = [WindowPlay(1, 4, 0.25, 0.25), WindowPlay(2, 4, 0.75, 0.75), WindowPlay(3, 8, 0.5, 0.5)]


def test_the_learning_potential_moves_its_averages_as_the_reference_does():
    gf, gs = 0.98, 0.85
    first = LearningPotential().updated(0.5, gf, gs)
    assert (first.mu_fast, first.mu_slow) == (0.5, 0.5)  # the first value sets both
    second = first.updated(1.0, gf, gs)
    assert second.mu_fast == pytest.approx(0.02 * 0.5 + 0.98 * 1.0)  # 0.99
    assert second.mu_slow == pytest.approx(0.15 * 0.5 + 0.85 * 1.0)  # 0.925
    assert second.baseline == pytest.approx(0.925)
    assert second.signed_potential(gf, gs) == pytest.approx((0.99 - 0.925) / (2 * 0.13))  # 0.25
    assert LearningPotential().baseline == 0.0 and LearningPotential().signed_potential(gf, gs) == 0.0


def test_learning_potential_and_solve_rate_rewards():
    lp = DesignerRewardConfig(mode="learning_potential")
    assert designer_reward(0.3, 0.075, lp, baseline=0.925) == pytest.approx(0.625)  # |0.3 - 0.925|
    assert designer_reward(0.9, 0.0, lp, baseline=0.5) == pytest.approx(0.4)
    assert designer_reward(0.3, 0.5, lp) == pytest.approx(0.3)  # no history: baseline 0
    solve = DesignerRewardConfig(mode="solve_rate")
    # The reference's blend with plateau weight 1 and regret weight 0: plateau(0.3) = 1 - 0.1 / 0.25.
    assert designer_reward(0.3, 0.075, solve) == pytest.approx(0.6)
    assert designer_reward(0.3, 0.9, solve) == pytest.approx(0.6)  # regret plays no part
    assert designer_reward(0.95, 0.0, solve) == 0.0
    assert designer_reward(0.3, 0.075, DesignerRewardConfig(mode="plateau")) == pytest.approx(0.6)


def test_the_window_pools_its_plays():
    assert window_win_rate(WINDOW) == pytest.approx((1 + 3 + 4) / 16)  # 0.5
    with pytest.raises(ValueError, match="at least one episode"):
        window_win_rate([WindowPlay(1, 0, 0.0, 0.0)])


def test_the_delayed_blend_takes_the_plateau_over_the_window_and_the_regret_at_regeneration():
    blend = DesignerRewardConfig()
    # plateau(0.5) = 1; regret measured at regeneration 0.075: 0.6 * 1 + 0.4 * 0.075 / 0.15 = 0.8
    assert window_designer_reward(WINDOW, 0.075, 0.325, blend) == pytest.approx(0.8)
    # Rewarded at once, from the first play only: plateau(0.25) = 0.4 -> 0.24 + 0.2
    assert window_designer_reward(WINDOW[:1], 0.075, 0.325, blend) == pytest.approx(0.44)
    assert window_designer_reward(WINDOW[:1], 0.075, 0.325, blend) == designer_reward(0.25, 0.075, blend)
    solve = DesignerRewardConfig(mode="solve_rate")
    assert window_designer_reward(WINDOW, 0.075, 0.325, solve) == pytest.approx(1.0)  # plateau(0.5)


def test_the_delayed_regret_subtracts_the_no_hint_return_pooled_over_the_window():
    regret = DesignerRewardConfig(mode="regret")
    # hint 0.8 at regeneration minus the pooled no-hint return (1 + 3 + 4) / 16 = 0.5
    assert window_designer_reward(WINDOW, 0.55, 0.8, regret) == pytest.approx(0.3)
    assert window_designer_reward(WINDOW, 0.55, 0.3, regret) == 0.0  # floored
    # A window of one play: that play's regret, exactly as the immediate reward has it
    assert window_designer_reward(WINDOW[:1], 0.55, 0.8, regret) == 0.55


def test_the_delayed_learning_potential_reads_the_pooled_win_rate():
    lp = DesignerRewardConfig(mode="learning_potential")
    assert window_designer_reward(WINDOW, 0.1, 0.6, lp, baseline=0.455) == pytest.approx(0.045)
    with pytest.raises(ValueError, match="at least the play of its own iteration"):
        window_designer_reward([], 0.0, 0.0, lp)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delay": -1}, r"delay must be a whole number of iterations >= 0 .*got -1"),
        ({"delay": True}, r"delay must be a whole number"),
        ({"delay": 1.5}, r"delay must be a whole number"),
        ({"lp_gamma_fast": 0.8, "lp_gamma_slow": 0.85}, r"0 < lp_gamma_slow < lp_gamma_fast <= 1"),
        ({"lp_gamma_slow": 0.0}, r"lp_gamma_slow and lp_gamma_fast"),
        ({"lp_gamma_fast": 1.5}, r"the reference's 0.85 and 0.98"),
        ({"mode": "micro_lp"}, r"'micro_lp' is not one of .*'solve_rate', 'learning_potential'"),
        ({"w_learnability": -0.1}, r"w_learnability must be a finite number >= 0, got -0.1"),
        ({"w_regret": float("inf")}, r"w_regret must be a finite number >= 0"),
        ({"mode": "learnability", "w_learnability": 0, "w_regret": 0}, r"w_learnability \+ w_regret > 0"),
    ],
)
def test_bad_reward_settings_say_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DesignerRewardConfig(**kwargs)


def test_the_modes_and_defaults():
    assert DESIGNER_MODES == (
        "blend",
        "regret",
        "plateau",
        "solve_rate",
        "learning_potential",
        "learnability",
    )
    config = DesignerRewardConfig()
    assert (config.delay, config.lp_gamma_fast, config.lp_gamma_slow) == (0, 0.98, 0.85)


def test_the_learnability_term_is_4_p_1_minus_p():
    assert learnability(0.5) == 1.0
    assert learnability(0.0) == learnability(1.0) == 0.0
    assert learnability(0.125) == pytest.approx(4 * 0.125 * 0.875)  # 0.4375
    assert learnability(0.25) == pytest.approx(0.75) == learnability(0.75)
    with pytest.raises(ValueError, match=r"a win rate lies in \[0, 1\], got 1.5"):
        learnability(1.5)


def test_one_win_in_eight_plays_earns_a_learnability_reward_where_the_plateau_gives_nothing():
    one_in_eight = 1 / 8
    blend = DesignerRewardConfig(progress_bonus=0.1)
    learn = DesignerRewardConfig(mode="learnability", progress_bonus=0.1)
    assert designer_reward(one_in_eight, 0.0, blend) == pytest.approx(0.1)  # validity only
    # 0.6 * 0.4375 + 0.4 * 0 + 0.1
    assert designer_reward(one_in_eight, 0.0, learn) == pytest.approx(0.3625)
    assert designer_reward(one_in_eight, 0.0, learn) > designer_reward(0.0, 0.0, learn) == pytest.approx(0.1)
    # with regret 0.075 (half the scale): 0.6 * 0.4375 + 0.4 * 0.5 + 0.1
    assert designer_reward(one_in_eight, 0.075, learn) == pytest.approx(0.5625)
    # the weights: learnability alone
    alone = DesignerRewardConfig(mode="learnability", w_learnability=1.0, w_regret=0.0)
    assert designer_reward(0.5, 1.0, alone) == 1.0
    assert designer_reward(0.9, 0.0, alone) == pytest.approx(0.36)


def test_the_delayed_learnability_reads_the_pooled_win_rate_and_the_regret_at_regeneration():
    learn = DesignerRewardConfig(mode="learnability", delay=2)
    # pooled win 0.5 over WINDOW: 0.6 * 1 + 0.4 * clip(0.15 / 0.15)
    assert window_designer_reward(WINDOW, 0.15, 0.9, learn) == pytest.approx(1.0)
    one = [WindowPlay(1, 8, 0.125, 0.125)]
    assert window_designer_reward(one, 0.0, 0.2, learn) == designer_reward(0.125, 0.0, learn)
