"""Rewards and advantages of both roles: small pure functions over floats.

Agent: the return of an episode is its final reward, 0 when the episode was truncated (ran out of
turns or context). Advantages are z-scores within the group of plays of one environment.

Designer: a valid design's reward is a table of named terms (``DESIGNER_TERMS``, :func:`designer_terms`)
weighted by the mode (:func:`designer_weights`: a term of weight 0 is logged, not paid), times a gate
(:func:`designer_reward`: a design a gate refused after validation earns the validity floor). The terms:
hint-based regret ``max(0, mean(R_hint) - mean(R_nohint))``, paid beyond its noise
(:func:`regret_bound`); the difficulty plateau
``plateau(win)`` (1 inside ``[0.4, 0.6]``, falling linearly to 0 over 0.25 on each side); the
reference blend ``0.6 * plateau(win) + 0.4 * clip(regret / 0.15, 0, 1)``, or pure regret, or the
pure plateau (``solve_rate``: the reference's name for it), or the learning potential
``|win - mu_slow(skill)|`` with :class:`LearningPotential`'s per-skill moving averages, or (ours, issue 40)
the learnability blend ``w_learnability * 4 win (1 - win) + w_regret * clip(regret / 0.15, 0, 1)``, whose
first term is not 0 for a design won once in eight plays (0.44) where the plateau is. Designs that fail
validation get a fixed penalty (0 when invalid, -0.5 on timeout). Designer advantages are centred within
their group (one prompt group or one skill). With a delay (``DesignerRewardConfig.delay``, the reference's
``--spade-proposer-training-delay``) a design is rewarded from the plays of its delay window:
:func:`window_designer_reward` (the holding of designs is ``spade_rl.designer.reward``'s).

A group whose rewards are all equal carries no signal for GRPO: :func:`zscore_advantages` and
:func:`centred_advantages` report it (``has_signal``) so that callers can count such groups and drop
them from the update.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from spade_rl.design.report import PROGRESS_CHECKS

# "solve_rate" and "learning_potential": the reference's ablations (spade/core/utils/delayed_env_rewards.py,
# cmd/ablations/train_solve_rate_30b.sh, train_learning_potential_30b.sh).
# "learnability": ours (issue 40), the blend with 4 p (1 - p) in place of the plateau.
DESIGNER_MODES = ("blend", "regret", "plateau", "solve_rate", "learning_potential", "learnability")
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


def regret_bound(
    returns_with_hint: Sequence[float],
    returns_without_hint: Sequence[float],
    confidence: float = 0.95,
    reward_range: tuple[float, float] = (0.0, 1.0),
) -> float:
    """Regret paid only beyond its noise: a lower confidence bound of ``mean(with) - mean(without)``,
    floored at 0. Each arm's returns, as shares of ``reward_range``, get one pseudo-return at each end of
    the range (Agresti and Caffo's interval for a difference of proportions, which keeps its coverage at
    K = 8 plays a side where the plain Wald interval does not, and whose standard error is never 0):

        m = (sum(r) + 1) / (n + 2),   v = (sum((r - m)^2) + m^2 + (1 - m)^2) / (n + 1)
        bound = (m_with - m_without) - z * sqrt(v_with / (n_with + 2) + v_without / (n_without + 2))

    with ``z`` the one-sided normal quantile of ``confidence``; the bound is then scaled back to the
    reward range. Measured over 20,000 draws of 8 + 8 plays (tests/test_rewards.py holds the first): a
    coin flip (p = 0.5 in both arms) is paid 0.097 on average by the plain regret and 0.003 by this; a
    hint that takes the win rate from 1/8 to 1 keeps 0.43 of its 0.875, one from 0 to 1/2 0.11 of its
    0.50. ``confidence`` 0 gives the plain :func:`regret`."""
    if not 0.0 <= confidence < 1.0:
        raise ValueError(f"regret confidence must lie in [0, 1) (0: the plain regret), got {confidence}")
    if confidence == 0.0:
        return regret(returns_with_hint, returns_without_hint)
    low, high = reward_range
    z = statistics.NormalDist().inv_cdf(confidence)

    def arm(returns: Sequence[float]) -> tuple[float, float]:
        shares = [(r - low) / (high - low) for r in returns]
        n = len(shares)
        if n == 0:
            raise ValueError("regret_bound needs returns in both arms")
        m = (math.fsum(shares) + 1.0) / (n + 2)
        v = (math.fsum((r - m) ** 2 for r in shares) + m**2 + (1.0 - m) ** 2) / (n + 1)
        return m, v / (n + 2)

    m_with, se2_with = arm(returns_with_hint)
    m_without, se2_without = arm(returns_without_hint)
    bound = (m_with - m_without) - z * math.sqrt(se2_with + se2_without)
    return max(0.0, bound) * (high - low)


def plateau(win_rate: float, low: float = 0.4, high: float = 0.6, ramp: float = 0.25) -> float:
    """1 for a win rate inside ``[low, high]``, linear down to 0 at ``low - ramp`` and ``high + ramp``."""
    if not 0.0 <= low <= high <= 1.0 or ramp <= 0:
        raise ValueError(f"plateau needs 0 <= low <= high <= 1 and ramp > 0, got {low}, {high}, {ramp}")
    if win_rate < low:
        return max(0.0, 1.0 - (low - win_rate) / ramp)
    if win_rate > high:
        return max(0.0, 1.0 - (win_rate - high) / ramp)
    return 1.0


def learnability(win_rate: float) -> float:
    """``4 * win * (1 - win)``: the variance of one play's win, scaled so that a design won half the time
    scores 1. It is 0 only at a win rate of 0 or 1: one win in 8 plays scores 0.4375, one in 4 0.75."""
    if not 0.0 <= win_rate <= 1.0:
        raise ValueError(f"a win rate lies in [0, 1], got {win_rate}")
    return 4.0 * win_rate * (1.0 - win_rate)


@dataclass(frozen=True)
class DesignerRewardConfig:
    mode: str = "blend"  # blend | regret | plateau | solve_rate | learning_potential | learnability
    w_plateau: float = 0.6
    w_regret: float = 0.4
    # The "learnability" mode's weight on 4 p (1 - p); its regret weight is w_regret (0.6 and 0.4: the
    # blend's weights, with the learnability term in place of the plateau).
    w_learnability: float = 0.6
    regret_scale: float = 0.15
    # Regret paid beyond its noise: the designer's regret term is regret_bound(with, without, this), a
    # lower confidence bound from the K + K plays (docs/designing.md, "Regret beyond noise"); 0: the plain
    # regret max(0, mean(with) - mean(without)), the reference's, which pays a coin flip for its noise.
    regret_confidence: float = 0.95
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
    # min(N_agent / N_designer * regenerate_every, max_scale) (spade-rl/spade, spade/core/utils/rewards.py
    # compute_env_reward_scale), so that the few designer samples of an iteration weigh about as much as the
    # many agent samples over a regeneration window.
    scale: str = "none"
    max_scale: float = 50.0
    # True: a design whose reward is negative (a timeout's penalty) is left out of the designer's update
    # instead of weighing on its group's mean (the reference masks negative blends: spade/core/utils/
    # delayed_env_rewards.py, "Games with blend < 0 are masked from the proposer update").
    mask_negative: bool = False
    # 0 (ours): a design is rewarded and trained in the iteration that played it. D > 0: it is held, with
    # its token ids, until D further iterations have played its environment, then rewarded from that window
    # (window_designer_reward) and trained in that iteration's update, as the reference trains its proposer
    # (spade/slime/spade_rollout.py, --spade-proposer-training-delay: 4 in cmd/games/train_spade_4b.sh, 8 in
    # cmd/tool_use/_train_spade_blend.sh). spade_rl.designer.reward holds the designs.
    delay: int = 0
    # The learning-potential mode's per-skill moving averages, mu <- (1 - g) * mu + g * r
    # (spade/core/learning_potential.py; --spade-gamma1 0.98, --spade-gamma2 0.85 in both paper scripts).
    lp_gamma_fast: float = 0.98
    lp_gamma_slow: float = 0.85

    def __post_init__(self) -> None:
        if isinstance(self.delay, bool) or not isinstance(self.delay, int) or self.delay < 0:
            raise ValueError(
                f"designer reward delay must be a whole number of iterations >= 0 (0: rewarded at once), "
                f"got {self.delay!r}"
            )
        if not 0.0 < self.lp_gamma_slow < self.lp_gamma_fast <= 1.0:
            raise ValueError(
                "designer reward lp_gamma_slow and lp_gamma_fast must satisfy 0 < lp_gamma_slow < "
                f"lp_gamma_fast <= 1 (the reference's 0.85 and 0.98), got {self.lp_gamma_slow} and "
                f"{self.lp_gamma_fast}"
            )
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
        confidence = self.regret_confidence
        if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence < 1:
            raise ValueError(
                "designer reward regret_confidence must lie in [0, 1) (0: the plain regret), got "
                f"{confidence!r}"
            )
        if self.regret_scale <= 0:
            raise ValueError(f"regret_scale must be positive, got {self.regret_scale}")
        for name in ("w_plateau", "w_regret", "w_learnability", "progress_bonus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"designer reward {name} must be a finite number >= 0, got {value!r}")
        if self.mode == "learnability" and self.w_learnability + self.w_regret <= 0:
            raise ValueError(
                "designer reward mode 'learnability' needs w_learnability + w_regret > 0 (both are 0: every "
                "valid design would earn the same)"
            )
        plateau(0.5, self.plateau_low, self.plateau_high, self.plateau_ramp)  # validates the plateau


# The terms of a valid design's reward, by name: each is computed and logged for every design
# (designer/term/<name>), and the mode's weights (designer_weights) say which are paid; a term of weight 0
# is a metric only, as in verifiers' Rubric.
DESIGNER_TERMS = ("plateau", "learnability", "regret", "regret_scaled", "learning_potential")


def designer_terms(
    win_rate: float, regret_value: float, config: DesignerRewardConfig, *, baseline: float = 0.0
) -> dict[str, float]:
    """Every term of a valid design's reward from its no-hint win rate and its (paid) regret:

    - ``plateau``: ``plateau(win)`` (:func:`plateau`, the reference's difficulty band);
    - ``learnability``: ``4 win (1 - win)`` (:func:`learnability`; ours);
    - ``regret``: the regret itself; ``regret_scaled``: ``clip(regret / regret_scale, 0, 1)``;
    - ``learning_potential``: ``|win - baseline|``, the baseline being the skill's slow moving average
      (:attr:`LearningPotential.baseline`; spade/core/utils/delayed_env_rewards.py)."""
    return {
        "plateau": plateau(win_rate, config.plateau_low, config.plateau_high, config.plateau_ramp),
        "learnability": learnability(win_rate),
        "regret": regret_value,
        "regret_scaled": min(1.0, max(0.0, regret_value / config.regret_scale)),
        "learning_potential": abs(win_rate - baseline),
    }


def designer_weights(config: DesignerRewardConfig) -> dict[str, float]:
    """The weight of each of ``DESIGNER_TERMS`` in ``config.mode`` (0: logged, not paid):

    - ``blend``: ``w_plateau`` on ``plateau``, ``w_regret`` on ``regret_scaled`` (the reference's default);
    - ``regret``: 1 on ``regret``;
    - ``plateau`` and ``solve_rate``: 1 on ``plateau`` (the reference's solve-rate ablation is its blend
      with plateau weight 1 and regret weight 0: cmd/ablations/train_solve_rate_30b.sh);
    - ``learnability``: ``w_learnability`` on ``learnability``, ``w_regret`` on ``regret_scaled``;
    - ``learning_potential``: 1 on ``learning_potential``."""
    weights = dict.fromkeys(DESIGNER_TERMS, 0.0)
    if config.mode == "blend":
        weights["plateau"], weights["regret_scaled"] = config.w_plateau, config.w_regret
    elif config.mode == "regret":
        weights["regret"] = 1.0
    elif config.mode in ("plateau", "solve_rate"):
        weights["plateau"] = 1.0
    elif config.mode == "learnability":
        weights["learnability"], weights["regret_scaled"] = config.w_learnability, config.w_regret
    else:  # learning_potential (DesignerRewardConfig refuses any other mode)
        weights["learning_potential"] = 1.0
    return weights


def designer_reward(
    win_rate: float,
    regret_value: float,
    config: DesignerRewardConfig,
    *,
    baseline: float = 0.0,
    gate: bool = True,
) -> float:
    """The reward of a valid design: ``gate * sum(weight * term) + progress_bonus`` over
    :func:`designer_terms` with :func:`designer_weights`. The gate multiplies: a design that a gate refused
    after validation (the gaming gauge's revalidation, ``gate=False``) earns the validity floor,
    ``progress_bonus``, never learnability or regret. The whole progress bonus (``progress_bonus * 1``) is
    added either way: a valid design is never worth less than an invalid one, whatever the agent made of it
    (with the bonus on, an invalid design that got far would otherwise out-earn a valid one nobody solves)."""
    if not gate:
        return config.progress_bonus
    return paid_reward(designer_terms(win_rate, regret_value, config, baseline=baseline), config)


def paid_reward(terms: dict[str, float], config: DesignerRewardConfig, *, gate: bool = True) -> float:
    """``gate * sum(weight * term) + progress_bonus``: :func:`designer_reward` from terms already computed
    (:func:`designer_terms`), for a caller that logs them too."""
    weights = designer_weights(config)
    paid = math.fsum(weights[name] * value for name, value in terms.items() if weights[name]) if gate else 0.0
    return paid + config.progress_bonus


class WindowPlay(NamedTuple):
    """One iteration's no-hint play of a held design's environment: how many episodes, their win rate and
    their mean return."""

    iteration: int
    episodes: int
    win_rate: float
    mean_return: float


def window_win_rate(plays: Sequence[WindowPlay]) -> float:
    """The no-hint win rate pooled over the window: ``sum(episodes * win_rate) / sum(episodes)``."""
    episodes = sum(p.episodes for p in plays)
    if episodes <= 0:
        raise ValueError("a window win rate needs at least one episode")
    return math.fsum(p.episodes * p.win_rate for p in plays) / episodes


def window_designer_reward(
    plays: Sequence[WindowPlay],
    regret_at_regeneration: float,
    hint_return: float,
    config: DesignerRewardConfig,
    *,
    baseline: float = 0.0,
) -> float:
    """The reward of a valid design held over a delay window, as the reference recomputes it when it
    trains its proposer (spade/core/utils/delayed_env_rewards.py): :func:`designer_reward` of
    :func:`window_inputs`. A window of one play gives exactly the immediate reward
    ``designer_reward(win, regret)``."""
    win, regret_value = window_inputs(plays, regret_at_regeneration, hint_return, config)
    return designer_reward(win, regret_value, config, baseline=baseline)


def window_inputs(
    plays: Sequence[WindowPlay],
    regret_at_regeneration: float,
    hint_return: float,
    config: DesignerRewardConfig,
) -> tuple[float, float]:
    """The win rate and the regret a held design's terms read. ``plays[0]`` is the play of the design's own
    iteration (its regeneration), with the hint's mean return ``hint_return`` and the regret
    ``regret_at_regeneration`` measured then; the win rate is pooled over every play of the window
    (:func:`window_win_rate`). The regret is the one at regeneration (matched timing: both arms played by
    the same weights; recompute_delayed_env_rewards_blend), but in the ``regret`` mode over a window of
    more than one play: ``max(0, hint_return - mean no-hint return pooled over the window)``
    (recompute_delayed_env_rewards_regret)."""
    if not plays:
        raise ValueError("a held design is rewarded from at least the play of its own iteration")
    win = window_win_rate(plays)
    regret_value = regret_at_regeneration
    if config.mode == "regret" and len(plays) > 1:
        episodes = sum(p.episodes for p in plays)
        pooled_return = math.fsum(p.episodes * p.mean_return for p in plays) / episodes
        regret_value = max(0.0, hint_return - pooled_return)
    return win, regret_value


@dataclass(frozen=True)
class LearningPotential:
    """One skill's fast and slow moving averages of the agent's win rate (spade/core/learning_potential.py):
    the first value sets both; then ``mu <- (1 - gamma) * mu + gamma * r`` for each (gamma weighs the new
    value: the fast average follows it more closely). None before any value."""

    mu_fast: float | None = None
    mu_slow: float | None = None

    def updated(self, value: float, gamma_fast: float, gamma_slow: float) -> LearningPotential:
        if self.mu_fast is None or self.mu_slow is None:
            return LearningPotential(value, value)
        return LearningPotential(
            (1 - gamma_fast) * self.mu_fast + gamma_fast * value,
            (1 - gamma_slow) * self.mu_slow + gamma_slow * value,
        )

    @property
    def baseline(self) -> float:
        """The slow average (0 before any value): the learning-potential reward is ``|win - baseline|``."""
        return self.mu_slow if self.mu_slow is not None else 0.0

    def signed_potential(self, gamma_fast: float, gamma_slow: float) -> float:
        """``(mu_fast - mu_slow) / (2 * (gamma_fast - gamma_slow))``: the reference logs it, as a metric."""
        if self.mu_fast is None or self.mu_slow is None:
            return 0.0
        return (self.mu_fast - self.mu_slow) / (2 * (gamma_fast - gamma_slow))


# How far a design got, by the first failure: stages before the validation battery, then the
# battery's checks in order (spade_rl.design.validate).
# ("truncated": the answer was cut off by the token limit, usually inside its code.)
PARSE_STAGES = {"no_code_block": 0.0, "truncated": 0.5, "syntax_error": 1.0}
BATTERY_CHECKS = PROGRESS_CHECKS  # spade_rl.design.report names the checks once


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
