"""The designer's rewards as they fall due: in the iteration that played a design, or D iterations later.

    rewards = DesignerRewards(config.rewards, config.loop.regenerate_every, config.design.invalid)
    first = rewards.to_play(i)                       # held environments, played first in iteration i
    due = rewards.step(designs, played, i, last=...)  # (held design, reward) pairs to train on now
    rewards.save(path); rewards.restore(path)        # beside the updater in every checkpoint

With ``rewards.delay = 0`` (our default) every design is rewarded from the play of its own iteration
and trained in that iteration's update. With ``rewards.delay = D > 0`` the loop trains its designer as
the reference trains its proposer (spade-rl/spade, spade/slime/spade_rollout.py,
``--spade-proposer-training-delay``: 4 for games, 8 for tool use): the designs of iteration ``t`` are
held, with their token ids and sampler log-probs, until iteration ``t + D``; meanwhile their
environments are played first in every iteration of their window, and each play's no-hint win rate and
mean return are kept; at ``t + D``, after that iteration's play, they are rewarded from the window
(``spade_rl.rewards.window_designer_reward``: the plateau on the win rate pooled over the window, the
regret measured at regeneration) and trained in its update. The run's last iteration rewards whatever
is still held, with the window it has (the reference flushes its buffer then).

The window of a design of iteration ``t``: the iterations ``i`` with ``i < t + regenerate_every`` (its
regeneration window: the reference plays a window's games in every rollout of it, and regenerates them
all after) and ``i <= t + D``. With ``D = regenerate_every`` (both paper configurations) that is
``t .. t + D - 1``, rewarded at ``t + D``; with a shorter delay the reward's own iteration plays too,
as in the reference, whose rollout accumulates its plays before it retrieves the delayed samples.

Invalid designs (``design.invalid = "penalty"``) are held with their fixed penalty, so that a design phase's
designs are centred together whenever they are rewarded; with ``"retry"`` they get no gradient and are not
held; a valid design its iteration did not play has no regret to learn from and is not held either.

The learning-potential mode's per-skill moving averages live here too (``potentials``): with a delay they are
updated at reward time, from the window's plays of each skill, before the baseline is read (the reference's
delayed update, ``update_lp``); without one, the baseline is read first and updated after (its per-rollout
update, ``assign_env_rewards``). Everything here is saved in each checkpoint, so that a resumed run neither
loses a held design nor counts a play twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from spade_rl.policy import Generation
from spade_rl.rewards import (
    DESIGNER_TERMS,
    DesignerRewardConfig,
    LearningPotential,
    WindowPlay,
    centred_advantages,
    designer_scale,
    designer_terms,
    invalid_design_reward,
    paid_reward,
    regret_bound,
    window_inputs,
    window_win_rate,
)
from spade_rl.train import sample_from_generation

if TYPE_CHECKING:
    from spade_rl.loop.config import RunConfig
    from spade_rl.loop.stages import Design, PlayedEnv, TrainingBatch

log = logging.getLogger(__name__)

STATE_FILE = "designer_rewards.json"
FORMAT = 1


@dataclass
class HeldDesign:
    """A design waiting for its reward: what it was, what was measured at its regeneration and the no-hint
    plays of its window so far. ``generation`` holds its token ids and sampler log-probs (None when the
    backend gave none: rewarded, but no sample). ``reward`` is set at once for an invalid design."""

    iteration: int
    skill: str
    env_id: int
    valid: bool
    reason: str
    generation: Generation | None
    reward: float | None = None  # invalid: the fixed penalty
    regret: float = 0.0  # valid: the regret of its own iteration's play
    hint_return: float = 0.0  # valid: the mean hint return of that play
    plays: list[WindowPlay] = field(default_factory=list)
    # valid, but a gate refused it on revalidation (the gaming gauge, designer/gauge.py): paid the floor
    gated: bool = False

    def in_window(self, iteration: int, regenerate_every: int, delay: int) -> bool:
        """Whether ``iteration`` plays this design's environment (see the module docstring)."""
        offset = iteration - self.iteration
        return self.valid and 0 <= offset < regenerate_every and offset <= delay

    def to_data(self) -> dict[str, Any]:
        generation = None
        if self.generation is not None:
            g = self.generation
            generation = {
                "prompt_token_ids": list(g.prompt_token_ids or ()),
                "completion_token_ids": list(g.completion_token_ids or ()),
                "completion_logprobs": None if g.completion_logprobs is None else list(g.completion_logprobs),
                "finish_reason": g.finish_reason,
            }
        return {
            "iteration": self.iteration,
            "skill": self.skill,
            "env_id": self.env_id,
            "valid": self.valid,
            "reason": self.reason,
            "reward": self.reward,
            "regret": self.regret,
            "hint_return": self.hint_return,
            "plays": [list(p) for p in self.plays],
            "gated": self.gated,
            "generation": generation,
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> HeldDesign:
        generation = None
        if data["generation"] is not None:
            g = data["generation"]
            logprobs = g["completion_logprobs"]
            generation = Generation(
                text="",  # the text is not trained on; the token ids are
                prompt_token_ids=tuple(g["prompt_token_ids"]),
                completion_token_ids=tuple(g["completion_token_ids"]),
                completion_logprobs=None if logprobs is None else tuple(logprobs),
                finish_reason=g["finish_reason"],
            )
        return cls(
            iteration=int(data["iteration"]),
            skill=str(data["skill"]),
            env_id=int(data["env_id"]),
            valid=bool(data["valid"]),
            reason=str(data["reason"]),
            generation=generation,
            reward=data["reward"],
            regret=float(data["regret"]),
            hint_return=float(data["hint_return"]),
            plays=[WindowPlay(int(i), int(n), float(w), float(r)) for i, n, w, r in data["plays"]],
            gated=bool(data.get("gated", False)),  # state files written before the gauge have none
        )


class DueReward(NamedTuple):
    """A held design rewarded now."""

    held: HeldDesign
    reward: float


class DesignerRewards:
    """The designs held for their reward and the learning-potential averages (see the module docstring)."""

    def __init__(self, config: DesignerRewardConfig, regenerate_every: int, invalid: str = "penalty") -> None:
        self.config = config
        self.regenerate_every = regenerate_every
        self.invalid = invalid
        self.held: list[HeldDesign] = []
        self.potentials: dict[str, LearningPotential] = {}
        self.regrets: list[tuple[float, float]] = []  # this iteration's (unfloored, paid) regrets
        self.terms: list[dict[str, float]] = []  # the terms of this iteration's rewarded valid designs
        self.gated_count = 0  # of them, how many a gate refused on revalidation

    # --- one iteration ---------------------------------------------------------------------------------
    def to_play(self, iteration: int) -> list[int]:
        """The environments of held designs that ``iteration`` plays before the pool, oldest first."""
        env_ids = [
            h.env_id for h in self.held if h.in_window(iteration, self.regenerate_every, self.config.delay)
        ]
        return list(dict.fromkeys(env_ids))

    def step(
        self,
        designs: Sequence[Design],
        played: Sequence[PlayedEnv],
        iteration: int,
        *,
        last: bool = False,
        gated: Collection[int] = (),
    ) -> list[DueReward]:
        """Hold this iteration's designs, add its plays to every window, and return what is due now
        (everything still held when ``last``), with its reward. ``gated``: environment ids that a gate
        refused on revalidation this iteration (the gaming gauge): their designs earn the validity floor."""
        self.hold(designs, played, iteration)
        for held in self.held:
            if held.valid and held.env_id in gated:
                held.gated = True
        self.record(played, iteration)
        due = [h for h in self.held if last or iteration - h.iteration >= self.config.delay]
        self.held = [h for h in self.held if not (last or iteration - h.iteration >= self.config.delay)]
        return self.reward(due)

    def hold(self, designs: Sequence[Design], played: Sequence[PlayedEnv], iteration: int) -> None:
        """This iteration's designs, held (those that can be rewarded: see the module docstring)."""
        by_env = {p.env_id: p for p in played}
        for design in designs:
            generation = design.generation if design.generation.completion_token_ids else None
            if design.valid:
                env = by_env.get(design.env_id)
                if env is None:
                    continue  # valid but not played in its iteration: no regret to learn from
                paid = self.paid_regret(env)
                held = HeldDesign(
                    iteration,
                    design.skill,
                    design.env_id,
                    True,
                    design.reason,
                    generation,
                    regret=paid,
                    hint_return=env.stats.mean_return_hint,
                )
            elif self.invalid == "retry":
                continue  # the reference's: a design that failed every try gets no gradient
            else:
                checks = design.report.checks if design.report is not None else ()
                penalty = invalid_design_reward(design.reason, self.config, checks)
                held = HeldDesign(
                    iteration, design.skill, design.env_id, False, design.reason, generation, reward=penalty
                )
            self.held.append(held)

    def record(self, played: Sequence[PlayedEnv], iteration: int) -> None:
        """The no-hint play of ``iteration`` into the window of every held design it belongs to."""
        by_env = {p.env_id: p for p in played}
        for held in self.held:
            env = by_env.get(held.env_id)
            if env is None or not held.in_window(iteration, self.regenerate_every, self.config.delay):
                continue
            if any(p.iteration == iteration for p in held.plays):
                continue  # one play per iteration (two designs of one source share an environment)
            stats = env.stats
            held.plays.append(
                WindowPlay(iteration, stats.episodes_nohint, stats.win_rate_nohint, stats.mean_return_nohint)
            )

    def reward(self, due: Sequence[HeldDesign]) -> list[DueReward]:
        """The rewards of ``due`` designs; the learning-potential mode reads and updates its averages."""
        config = self.config
        baselines: dict[str, float] = {}
        if config.mode == "learning_potential":
            skill_plays: dict[str, list[WindowPlay]] = {}
            for held in due:
                if held.valid:
                    skill_plays.setdefault(held.skill, []).extend(held.plays)
            for skill, plays in skill_plays.items():
                before = self.potentials.get(skill, LearningPotential())
                after = before.updated(window_win_rate(plays), config.lp_gamma_fast, config.lp_gamma_slow)
                self.potentials[skill] = after
                # With a delay: updated first, then read (the reference's update_lp); without: read, then
                # updated (its per-rollout update after assign_env_rewards' rewards).
                baselines[skill] = (after if config.delay > 0 else before).baseline
        out = []
        for held in due:
            if not held.valid:
                out.append(DueReward(held, float(held.reward)))
                continue
            baseline = baselines.get(held.skill, 0.0)
            win, regret_value = window_inputs(held.plays, held.regret, held.hint_return, config)
            terms = designer_terms(win, regret_value, config, baseline=baseline)
            self.terms.append(terms)
            self.gated_count += held.gated
            out.append(DueReward(held, paid_reward(terms, config, gate=not held.gated)))
        return out

    def paid_regret(self, env: PlayedEnv) -> float:
        """The regret a design's play pays (``rewards.regret_bound`` at ``regret_confidence``: beyond its
        noise), recording it and the unfloored ``mean(with) - mean(without)`` for ``metrics``."""
        if not env.hint:
            return env.stats.regret  # no hint plays: nothing to compare (0)
        with_hint, without = [e.return_ for e in env.hint], [e.return_ for e in env.nohint]
        paid = regret_bound(with_hint, without, self.config.regret_confidence)
        self.regrets.append((sum(with_hint) / len(with_hint) - sum(without) / len(without), paid))
        return paid

    def metrics(self) -> dict[str, float]:
        """This iteration's designs' regret, unfloored (``designer/regret_unfloored_mean``, the plain
        difference of mean returns) and as paid (``designer/regret_paid_mean``); with learning potential,
        its averages per skill (``designer/lp/<skill>/mu_fast``, ``mu_slow``)."""
        out: dict[str, float] = {}
        if self.terms:  # every term, paid or not (rewards.designer_weights), and the gate
            for name in DESIGNER_TERMS:
                out[f"designer/term/{name}"] = sum(t[name] for t in self.terms) / len(self.terms)
            out["designer/gated"] = float(self.gated_count)
            self.terms, self.gated_count = [], 0
        if self.regrets:
            out["designer/regret_unfloored_mean"] = sum(r for r, _ in self.regrets) / len(self.regrets)
            out["designer/regret_paid_mean"] = sum(p for _, p in self.regrets) / len(self.regrets)
            self.regrets = []
        if self.config.mode != "learning_potential":
            return out
        for skill, lp in sorted(self.potentials.items()):
            if lp.mu_fast is not None and lp.mu_slow is not None:
                out[f"designer/lp/{skill}/mu_fast"] = lp.mu_fast
                out[f"designer/lp/{skill}/mu_slow"] = lp.mu_slow
        return out

    # --- checkpoints -----------------------------------------------------------------------------------
    def to_data(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "held": [h.to_data() for h in self.held],
            "potentials": {s: [lp.mu_fast, lp.mu_slow] for s, lp in sorted(self.potentials.items())},
        }

    def save(self, path: Path) -> None:
        """The held designs and the averages as JSON in ``path`` (written whole, then renamed)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_data()) + "\n", encoding="utf-8")
        tmp.replace(path)

    def restore(self, path: Path) -> None:
        """What :meth:`save` wrote in ``path``; a checkpoint without the file (written before the delay
        existed) holds nothing."""
        path = Path(path)
        if not path.exists():
            log.info("%s: no designer rewards held in this checkpoint", path.parent)
            self.held, self.potentials = [], {}
            return
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(
                f"{path} holds designer rewards in format {data.get('format')!r}; this release reads {FORMAT}"
            )
        self.held = [HeldDesign.from_data(h) for h in data["held"]]
        self.potentials = {s: LearningPotential(fast, slow) for s, (fast, slow) in data["potentials"].items()}


def cohorts_due_at_once(iterations: int, regenerate_every: int, delay: int) -> int:
    """How many design phases' designs one update can train at most: 1, except in the run's last
    iteration, which rewards every phase still held (those of iterations ``iterations - delay`` ..
    ``iterations``)."""
    if delay <= 0:
        return 1
    first = max(1, iterations - delay)
    phases = sum(1 for t in range(first, iterations + 1) if (t - 1) % regenerate_every == 0)
    return max(1, phases)


def add_designer_samples(
    batch: TrainingBatch, due: Sequence[DueReward], config: RunConfig, first_group: int
) -> None:
    """The designer's samples of ``due`` rewards into ``batch``: masking, centring and scaling in one place.

    1. masking: with ``rewards.mask_negative``, a negative reward (a timeout's penalty) is left out
       (``batch.designer_masked``), as the reference masks negative blends;
    2. centring: the rest, per design phase and ``loop.designer_group_by`` group (all of a phase's
       designs, or one skill's), get ``reward - mean(group)`` (:func:`~spade_rl.rewards.centred_advantages`;
       no division by the spread); a group without spread carries no signal and, with
       ``loop.drop_zero_signal_groups``, no sample;
    3. scaling: every advantage times :func:`~spade_rl.rewards.designer_scale` (1, or the reference's
       ``min(N_agent / N_designer * regenerate_every, max_scale)``).

    Groups are numbered from ``first_group`` on (after the agent's); a design without token ids (a backend
    that gave none) is rewarded but makes no sample."""
    rewards_config = config.rewards
    rewarded = []
    for held, reward in due:
        if reward < 0 and rewards_config.mask_negative:
            batch.designer_masked += 1
            continue
        rewarded.append((held, reward))
    if rewarded:
        batch.designer_reward_mean = sum(r for _, r in rewarded) / len(rewarded)
    by_group: dict[tuple[int, str], list] = {}
    for held, reward in rewarded:
        # One design phase's designs are centred together (several fall due at once only in the last
        # iteration of a delayed run), per skill or all of them.
        key = "all" if config.loop.designer_group_by == "iteration" else held.skill
        by_group.setdefault((held.iteration, key), []).append((held, reward))
    designed = sum(1 for held, _ in rewarded if held.generation is not None)
    scale = designer_scale(len(batch.agent), designed, config.loop.regenerate_every, rewards_config)
    batch.designer_scale = scale
    for offset, members in enumerate(by_group.values()):
        advantages = centred_advantages([r for _, r in members])
        batch.designer_groups += 1
        if not advantages.has_signal:
            batch.designer_zero_signal += 1
            if config.loop.drop_zero_signal_groups:
                continue
        for (held, _), a in zip(members, advantages.advantages, strict=True):
            if held.generation is not None:
                group = first_group + offset
                batch.designer.append(sample_from_generation(held.generation, a * scale, group))
