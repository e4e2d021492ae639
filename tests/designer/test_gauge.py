"""The gaming gauge (designer/gauge.py): the share of an iteration's won designs that revalidation with every
gate on refuses. A real sandbox; designs as the design phase records them."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_rl.archive import Archive, ArchiveConfig
from spade_rl.design.parse import Parsed
from spade_rl.design.validate import ValidationReport, ValidationSettings
from spade_rl.designer.gauge import all_gates, gaming_gauge, won_designs
from spade_rl.executor import LocalExecutor
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.loop.stages import Design, PlayedEnv, Proposal
from spade_rl.policy import Generation
from spade_rl.rollout import Episode, EpisodeSpec, Turn
from spade_rl.sandbox import SandboxConfig
from spade_rl.stats import play_stats

ATTACKS = Path(__file__).resolve().parents[1] / "sandbox" / "attacks"
SOUND = (Path(__file__).resolve().parents[1] / "design" / "designs" / "valid_single_turn.py").read_text()


def design(env_id: int, valid: bool = True, duplicate: bool = False) -> Design:
    generation = Generation("x", (1,), (2,), (-0.5,), "stop")
    report = ValidationReport(valid, "ok" if valid else "syntax_error")
    return Design(Proposal("math", None, (), [], generation, Parsed("ok")), report, env_id, duplicate)


def played(env_id: int, wins: int, n: int = 4) -> PlayedEnv:
    def episode(reward: float) -> Episode:
        return Episode(
            EpisodeSpec(""), turns=[Turn("a", "o", reward, True, False, "stop")], stop_reason="terminated"
        )

    nohint = [episode(1.0 if k < wins else 0.0) for k in range(n)]
    return PlayedEnv(env_id, nohint, nohint, play_stats(nohint, nohint))


def test_all_gates_turns_on_what_a_run_has_off():
    off = ValidationSettings(
        seed=7,
        max_common_answer_win_rate=None,
        max_copy_win_rate=None,
        refuse_undetermined_answers=False,
        max_trivial_mean_return=None,
    )
    on, defaults = all_gates(off), ValidationSettings()
    assert on.seed is None and on.refuse_undetermined_answers
    assert on.max_common_answer_win_rate == defaults.max_common_answer_win_rate
    assert on.max_copy_win_rate == defaults.max_copy_win_rate
    assert on.max_trivial_mean_return == defaults.max_trivial_mean_return
    assert all_gates(ValidationSettings(max_copy_win_rate=0.5)).max_copy_win_rate == 0.5  # a run's own kept


def test_won_designs_are_new_valid_designs_won_without_the_hint():
    designs = [design(1), design(2), design(3, valid=False), design(4, duplicate=True)]
    plays = [played(1, 1), played(2, 0), played(3, 2), played(4, 3)]
    assert [d.env_id for d in won_designs(designs, plays)] == [1]


def test_the_gauge_counts_won_designs_a_gate_refuses_and_flags_them(tmp_path):
    """A coin-flip key that a run with the gates off let through is refused on revalidation and flagged
    out of the pool; a sound design is not; a design nobody won is not revalidated."""
    archive = Archive(tmp_path / "archive.sqlite", ArchiveConfig())
    ids = []
    for source in ((ATTACKS / "coin_flip_key.py").read_text(), SOUND, SOUND.replace("10, 99", "20, 89")):
        ids.append(
            archive.add(source, valid=True, reason="ok", skill="math", setting="games", iteration=1).env_id
        )
    designs = [design(env_id) for env_id in ids]
    plays = [played(ids[0], 2), played(ids[1], 1), played(ids[2], 0)]
    off = ValidationSettings(max_common_answer_win_rate=None)
    with LocalExecutor(SandboxConfig(pool_size=2)) as executor:
        gauge = gaming_gauge(designs, plays, archive, executor, off, iteration=1)
        none_won = gaming_gauge(designs[2:], plays[2:], archive, executor, ValidationSettings(), iteration=1)
    assert gauge.metrics == {
        "designer/won_designs": 2.0,
        "designer/gaming_refused": 1.0,
        "designer/gaming_gauge": 0.5,
    }
    assert gauge.refused == {ids[0]}
    assert archive.get(ids[0]).flagged["reason"] == "gate_on_revalidation"
    assert archive.get(ids[1]).flagged is None and ids[0] not in archive.pool_weights()
    assert none_won.metrics["designer/gaming_gauge"] is None and not none_won.refused
    archive.close()


def test_a_gated_design_earns_the_validity_floor_and_every_term_is_logged():
    """The gate multiplies: a design the gauge refused is paid the progress bonus alone, whatever its play;
    every term is logged, paid or not (learnability, weight 0 in the blend, too)."""
    from spade_rl.designer.reward import DesignerRewards
    from spade_rl.rewards import DESIGNER_TERMS, DesignerRewardConfig, designer_reward

    config = DesignerRewardConfig(regret_confidence=0.0, progress_bonus=0.1)
    rewards = DesignerRewards(config, 1)
    plays = [played(1, 2), played(2, 2)]
    due = rewards.step([design(1), design(2)], plays, iteration=1, gated={2})
    assert [d.held.gated for d in due] == [False, True]
    assert due[0].reward == pytest.approx(designer_reward(0.5, 0.0, config)) and due[0].reward > 0.6
    assert due[1].reward == pytest.approx(0.1)
    metrics = rewards.metrics()
    assert {f"designer/term/{name}" for name in DESIGNER_TERMS} <= set(metrics)
    assert metrics["designer/term/plateau"] == 1.0 and metrics["designer/term/learnability"] == 1.0
    assert metrics["designer/gated"] == 1.0


def test_the_gauge_is_a_loop_setting():
    assert load_config(None).loop.gaming_gauge is True
    assert load_config(None, ["loop.gaming_gauge=false"]).loop.gaming_gauge is False
    with pytest.raises(ConfigError, match=r"loop\.gaming_gauge must be true or false"):
        load_config(None, ["loop.gaming_gauge=2"])


def test_the_iteration_line_shows_the_gauge():
    from spade_rl.cli.run import _iteration_line

    line = _iteration_line({"iteration": 3, "designer/won_designs": 4.0, "designer/gaming_refused": 1.0})
    assert "gamed 1/4" in line
    assert "gamed" not in _iteration_line({"iteration": 3})  # not measured: not shown
