"""Score groups of an experiment (issue 40, item 1): the primary held-out score over families no arm
trains on and the pool's own games as a second score, each tested on its own items; and each run's
training seconds and trained tokens side by side."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spade_rl.evaluate.base import ItemResult, SuiteResult
from spade_rl.evaluate.results import EvalResult
from spade_rl.experiment import ExperimentError, RunRecord, load_experiment
from spade_rl.experiment.compare import build_comparison, to_markdown

EXPERIMENT = """
[experiment]
iterations = 1
seeds = [0, 1]
baseline = "a"
overrides = ["policy.model='tiny-random'"]
[eval]
suites = ["envs"]
[eval.options.envs]
envs = ["guess", "sequence", "tally"]
[scores]
primary = ["sequence", "tally"]
pool = ["guess"]
[arms.a]
[arms.b]
overrides = ["design.memory=false"]
"""

GAMES = ("sequence", "sequence", "tally", "tally", "guess", "guess")


def result(wins: list[int], model: str) -> EvalResult:
    """One evaluation over GAMES, two items each; a win scores 1, a loss 0.25 (partial credit)."""
    items = [
        ItemResult(f"{game}/seed={i}", bool(w), 1.0 if w else 0.25, "", {"category": game})
        for i, (game, w) in enumerate(zip(GAMES, wins, strict=True))
    ]
    return EvalResult(
        model, "fake", 0, len(items), {"temperature": 0.6}, {"envs": SuiteResult("envs", "v1", items)}
    )


def write(tmp_path, body):
    path = tmp_path / "exp.toml"
    path.write_text(body)
    return path


def test_score_groups_are_read_and_checked(tmp_path):
    spec = load_experiment(write(tmp_path, EXPERIMENT))
    assert [(g.name, g.categories) for g in spec.scores] == [
        ("primary", ("sequence", "tally")),
        ("pool", ("guess",)),
    ]
    plain = load_experiment(
        write(
            tmp_path, EXPERIMENT.replace('[scores]\nprimary = ["sequence", "tally"]\npool = ["guess"]\n', "")
        )
    )
    assert plain.scores == () and plain.resolved() == spec.resolved()  # they read results, decide none
    cases = {
        EXPERIMENT.replace('pool = ["guess"]', 'pool = ["maze"]'): (
            r"scores.pool: 'maze' is not evaluated; \[eval.options.envs\] envs has guess, sequence, tally"
        ),
        EXPERIMENT.replace('pool = ["guess"]', 'pool = ["tally"]'): r"'tally' is already in scores.primary",
        EXPERIMENT.replace('pool = ["guess"]', "pool = []"): "scores.pool must be a non-empty list",
        EXPERIMENT.replace('pool = ["guess"]', '"2nd" = ["guess"]'): "score name '2nd'",
        EXPERIMENT.replace('envs = ["guess", "sequence", "tally"]\n', ""): "needs the games named",
        EXPERIMENT.replace("[scores]", "[score]"): r"unknown table \[score\]",
    }
    for body, message in cases.items():
        with pytest.raises(ExperimentError, match=message):
            load_experiment(write(tmp_path, body))


def test_the_comparison_gives_each_score_its_own_tests_and_the_training_cost(tmp_path):
    spec = load_experiment(write(tmp_path, EXPERIMENT))
    start = tmp_path / "start.json"
    result([0, 0, 0, 1, 1, 0], "base").write(start)
    ends = {
        ("a", 0): [0, 0, 0, 1, 1, 1],  # the baseline gains on its pool game only
        ("a", 1): [0, 0, 0, 1, 1, 1],
        ("b", 0): [1, 1, 1, 1, 1, 0],  # b wins every primary item, the pool as the base
        ("b", 1): [1, 0, 1, 1, 1, 0],
    }
    records = []
    for (arm, seed), wins in ends.items():
        run_dir = tmp_path / f"{arm}-{seed}"
        run_dir.mkdir()
        lines = [
            {"iteration": 1, "train/agent/model_tokens": 100.0, "train/designer/model_tokens": 40.0},
            {
                "iteration": 2,
                "train/agent/model_tokens": 50.0,
                "train/num_tokens": 900.0,
                "time/update_s": 7.5,
            },
        ]
        if arm == "a":  # a run whose metrics lack the designer's key (nothing recorded): a dash, not 0
            for line in lines:
                line.pop("train/designer/model_tokens", None)
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
        result(wins, arm).write(run_dir / "end.json")
        records.append(
            RunRecord(arm, seed, run_dir, 2, 120.0 + seed, "wall_time", start, run_dir / "end.json")
        )
    comparison = build_comparison(spec, records)
    primary, pool = comparison["scores"]
    assert primary["primary"] and not pool["primary"]
    assert primary["categories"] == ["sequence", "tally"] and primary["base"][0]["n"] == 4
    assert primary["base"][0]["win"]["mean"] == pytest.approx(0.25)
    b0 = primary["rows"][2]
    assert (b0["arm"], b0["seed"], b0["n"]) == ("b", 0, 4) and b0["win"]["mean"] == 1.0
    # b seed 0 against the base on the primary items: three items won that the base lost: p = 2/8
    assert b0["win_vs_base"]["diff"] == pytest.approx(0.75) and b0["win_vs_base"]["p_value"] == pytest.approx(
        0.25
    )
    assert b0["win_vs_baseline"]["diff"] == pytest.approx(0.75)
    assert primary["rows"][0]["win_vs_baseline"] is None  # the baseline against itself
    pooled_a, pooled_b = primary["pooled"]
    assert pooled_b["seeds"] == [0, 1] and pooled_b["win"]["mean"] == pytest.approx(0.875)
    assert pooled_b["win_vs_baseline"]["diff"] == pytest.approx(0.625)
    assert pooled_b["return_vs_baseline"]["diff"] == pytest.approx(0.625 * 0.75)
    assert pooled_a["win_vs_base"]["diff"] == 0.0 and pooled_a["win_vs_baseline"] is None
    # the pool's own game: a gains one item of two, b none
    pa, pb = pool["pooled"]
    assert pa["win_vs_base"]["diff"] == pytest.approx(0.5) and pb["win_vs_baseline"]["diff"] == pytest.approx(
        -0.5
    )
    cost = {(t["arm"], t["seed"]): t for t in comparison["training"]}
    assert cost[("b", 1)]["agent_tokens"] == 150.0 and cost[("b", 1)]["designer_tokens"] == 40.0
    assert cost[("a", 0)]["designer_tokens"] is None and cost[("a", 0)]["processed_tokens"] == 900.0
    assert cost[("b", 0)]["update_seconds"] == 7.5 and cost[("b", 1)]["train_seconds"] == 121.0

    markdown = to_markdown(comparison)
    assert "## Primary score: primary (sequence, tally)" in markdown
    assert "## Score: pool (guess)" in markdown and "## envs (every game)" in markdown
    assert markdown.index("Primary score") < markdown.index("Score: pool") < markdown.index("## envs")
    assert "| b | pooled 0, 1 | 4 | 87.5 |" in markdown
    assert "| base model | - | 4 | 25.0 |" in markdown
    assert "| a | 0 | 120 | 8 | 150 | - | 900 |" in markdown
    assert "| b | 1 | 121 | 8 | 150 | 40 | 900 |" in markdown


def test_without_score_groups_the_comparison_is_as_before(tmp_path):
    body = EXPERIMENT.replace('[scores]\nprimary = ["sequence", "tally"]\npool = ["guess"]\n', "")
    spec = load_experiment(write(tmp_path, body))
    start = tmp_path / "start.json"
    result([0, 0, 0, 1, 1, 0], "base").write(start)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"iteration": 1}) + "\n")
    result([1, 0, 0, 1, 1, 0], "a").write(run_dir / "end.json")
    comparison = build_comparison(
        spec, [RunRecord("a", 0, run_dir, 1, 3.0, "iterations", start, run_dir / "end.json")]
    )
    assert comparison["scores"] == []
    markdown = to_markdown(comparison)
    assert "## envs\n" in markdown and "Primary score" not in markdown
    assert "| a | 0 | 3 | - | - | - | - |" in markdown  # training cost: nothing recorded


def test_the_figure_draws_each_score_over_its_own_games(tmp_path):
    from spade_rl.experiment.figure import _held_out, plot_curves

    spec = load_experiment(write(tmp_path, EXPERIMENT))
    start, run_dir = tmp_path / "start.json", tmp_path / "run"
    run_dir.mkdir()
    result([0, 0, 0, 1, 1, 0], "base").write(start)
    result([1, 1, 0, 1, 0, 0], "a").write(run_dir / "end.json")
    (run_dir / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "time/iteration_s": 5.0}) + "\n")
    record = RunRecord("a", 0, run_dir, 1, 5.0, "iterations", start, run_dir / "end.json")
    points = _held_out(record, [{"iteration": 1, "time/iteration_s": 5.0}], spec.scores)
    assert [p[1]["win"] for p in points["score primary"]] == [0.25, 0.75]
    assert [p[1]["win"] for p in points["score pool"]] == [0.5, 0.0]
    assert [p[1]["win"] for p in points["envs"]] == [pytest.approx(2 / 6), 0.5]
    pytest.importorskip("matplotlib")
    figure = plot_curves([record], tmp_path / "curves.png", groups=spec.scores)
    assert figure.stat().st_size > 0


def test_the_curriculum_experiment_scores_families_no_arm_trains_on():
    """experiments/cpu-curriculum.toml (issue 40): its primary score is the held-out families, every one
    of them, none in any arm's training pool; its second score the pool's games at the pool's sizes."""
    from pathlib import Path

    from spade_rl.envs import heldout

    root = Path(__file__).resolve().parents[2]
    spec = load_experiment(root / "experiments" / "cpu-curriculum.toml")
    assert [a.name for a in spec.arms] == [
        "fixed-pool", "spade", "spade-no-designer-training", "spade-caps", "spade-undetermined",
    ]  # fmt: skip
    assert spec.seeds == (0, 1, 2) and spec.budget.wall_time_s == 1800 and spec.baseline == "fixed-pool"
    primary, pool = spec.scores
    assert primary.name == "primary" and len(primary.categories) >= 4
    assert set(primary.categories) <= set(heldout.NAMES)
    assert pool.categories == ("guess", "maze", "codebreaker")
    assert spec.evaluation.limit >= 48 and spec.evaluation.seed == 1000
    options = spec.evaluation.options["envs"]
    for arm in spec.arms:
        config = arm.config(0)
        assert not set(primary.categories) & set(config.pool.reference)
        assert set(pool.categories) <= set(config.pool.reference)
        for game in pool.categories:  # the pool's own games are evaluated at the sizes they train at
            assert options["env_kwargs"].get(game) == config.pool.reference_kwargs.get(game), game
    assert spec.arm("fixed-pool").config(0).designer.source == "none"
    assert spec.arm("spade-no-designer-training").config(0).designer.train is False
    # Both SPADE arms carry the curriculum options (items 2-5), and differ only in the designer's training
    spade, ablation = spec.arm("spade").config(0), spec.arm("spade-no-designer-training").config(0)
    assert spade.rewards.mode == "learnability" and spade.design.edit_share == 0.5
    loop = spade.loop
    assert (loop.design_group_seeds, loop.pool_share, loop.hint_plays_for) == ("distinct", 0.5, "designs")
    assert (loop.probe_plays, loop.probe_min_wins, loop.retire_after_plays) == (4, 1, 8)
    assert dataclasses.replace(ablation, designer=spade.designer) == spade
    # The remedy arm is the SPADE arm with the two validation caps, and nothing else. (Since issue 56 the
    # defaults carry both caps and the undetermined-answer check: a new run of the spade arm has them, at
    # the defaults' common-answer cap; the committed runs of each arm were made at their commits, whose
    # resolved settings their config.json keeps.)
    capped = spec.arm("spade-caps").config(0)
    validation = capped.design.validation
    assert (validation.max_common_answer_win_rate, validation.max_copy_win_rate) == (0.15, 0.75)
    plain = spade.design.validation
    uncapped = dataclasses.replace(
        validation,
        max_common_answer_win_rate=plain.max_common_answer_win_rate,
        max_copy_win_rate=plain.max_copy_win_rate,
    )
    assert (
        dataclasses.replace(capped, design=dataclasses.replace(capped.design, validation=uncapped)) == spade
    )
    # The next remedy arm is spade-caps with the undetermined-answer check, and nothing else
    strict = spec.arm("spade-undetermined").config(0)
    assert strict.design.validation.refuse_undetermined_answers is True
    lenient = dataclasses.replace(
        strict.design.validation, refuse_undetermined_answers=validation.refuse_undetermined_answers
    )
    assert (
        dataclasses.replace(strict, design=dataclasses.replace(strict.design, validation=lenient)) == capped
    )


def test_the_prompt_experiment_changes_only_the_games_prompt_of_the_curriculum_arms():
    """experiments/cpu-curriculum-prompt.toml: each arm is cpu-curriculum's arm of that name with a games
    prompt that has no placeholder to copy, trained and evaluated under it; the yardstick is otherwise
    cpu-curriculum's."""
    from pathlib import Path

    from spade_rl.rollout import SYSTEM_PROMPTS

    root = Path(__file__).resolve().parents[2]
    prompt_file = load_experiment(root / "experiments" / "cpu-curriculum-prompt.toml")
    main = load_experiment(root / "experiments" / "cpu-curriculum.toml")
    options = prompt_file.evaluation.options["envs"]
    prompt = options["system_prompt"]
    assert prompt and prompt != SYSTEM_PROMPTS["games"] and "..." not in prompt and "\\boxed{}" in prompt
    main_options = main.evaluation.options["envs"]
    assert {k: v for k, v in options.items() if k != "system_prompt"} == main_options
    assert dataclasses.replace(prompt_file.evaluation, options=main.evaluation.options) == main.evaluation
    assert (prompt_file.seeds, prompt_file.budget, prompt_file.scores) == (
        main.seeds,
        main.budget,
        main.scores,
    )
    assert [a.name for a in prompt_file.arms] == ["fixed-pool", "spade-caps", "spade"]
    for arm in prompt_file.arms:
        config, theirs = arm.config(0), main.arm(arm.name).config(0)
        assert config.rollout.system_prompts == {**theirs.rollout.system_prompts, "games": prompt}
        assert dataclasses.replace(config, rollout=theirs.rollout) == theirs


def test_the_lever_experiment_adds_one_option_at_a_time_to_plain_spade():
    """experiments/cpu-curriculum-levers.toml: each arm is plain SPADE plus its own option(s) and nothing
    else; `all` is the SPADE arm of experiments/cpu-curriculum.toml; its evaluation seeds are not the
    yardstick's (nothing is tuned on the held-out seeds)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    levers = load_experiment(root / "experiments" / "cpu-curriculum-levers.toml")
    main = load_experiment(root / "experiments" / "cpu-curriculum.toml")
    plain = levers.arm("plain").config(0)
    spade, every = main.arm("spade").config(0), levers.arm("all").config(0)
    assert (
        dataclasses.replace(every, loop=dataclasses.replace(every.loop, iterations=spade.loop.iterations))
        == spade
    )
    changed = {
        "learnability": {("rewards", "mode")},
        "edit": {("design", "edit_share")},
        "distinct": {("loop", "design_group_seeds")},
        "pool-share": {("loop", "pool_share")},
        "probe-retire": {("loop", "probe_plays"), ("loop", "retire_after_plays")},
        "hint-designs": {("loop", "hint_plays_for")},
    }
    penalised = levers.arm("all-format-penalty").config(0)
    assert (
        dataclasses.replace(penalised, loop=dataclasses.replace(penalised.loop, format_penalty=0.0)) == every
    )
    assert penalised.loop.format_penalty == 0.5
    capped = levers.arm("all-common-answer-cap").config(0)
    defaults = every.design.validation  # since issue 56 both caps are on by default (at 0.43 and 0.75)
    validation = dataclasses.replace(
        capped.design.validation, max_common_answer_win_rate=defaults.max_common_answer_win_rate
    )
    assert (
        dataclasses.replace(capped, design=dataclasses.replace(capped.design, validation=validation)) == every
    )
    assert capped.design.validation.max_common_answer_win_rate == 0.15
    anchored = levers.arm("all-kl").config(0)
    assert dataclasses.replace(anchored, train=dataclasses.replace(anchored.train, beta=0.0)) == every
    assert anchored.train.beta == 0.04
    copy_capped = levers.arm("all-copy-cap").config(0)
    uncapped = dataclasses.replace(
        copy_capped.design.validation, max_copy_win_rate=defaults.max_copy_win_rate
    )
    design = dataclasses.replace(copy_capped.design, validation=uncapped)
    assert dataclasses.replace(copy_capped, design=design) == every
    assert copy_capped.design.validation.max_copy_win_rate == 0.75
    assert levers.arm("all-again").config(0) == every  # the same arm again, on another machine
    blended = levers.arm("all-blend-reward").config(0)
    assert blended.rewards == plain.rewards and blended.rewards.mode != every.rewards.mode
    assert dataclasses.replace(blended, rewards=every.rewards) == every
    for name, fields in changed.items():
        config = levers.arm(name).config(0)
        differ = {
            (section.name, f.name)
            for section in dataclasses.fields(plain)
            if dataclasses.is_dataclass(getattr(plain, section.name))
            for f in dataclasses.fields(getattr(plain, section.name))
            if getattr(getattr(plain, section.name), f.name) != getattr(getattr(config, section.name), f.name)
        }
        assert differ == fields, name
    assert not set(range(levers.evaluation.seed, levers.evaluation.seed + levers.evaluation.limit)) & set(
        range(main.evaluation.seed, main.evaluation.seed + main.evaluation.limit)
    )


def test_the_gated_experiment_is_the_curriculum_yardstick_on_the_gated_defaults():
    """experiments/cpu-gated.toml (issue 56): cpu-curriculum's fixed-pool and spade arms, unchanged, run
    again on the defaults where every gate is on; the same yardstick, only without in-loop curves."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    gated = load_experiment(root / "experiments" / "cpu-gated.toml")
    main = load_experiment(root / "experiments" / "cpu-curriculum.toml")
    assert [a.name for a in gated.arms] == ["fixed-pool", "spade"]
    assert (gated.seeds, gated.budget, gated.scores, gated.baseline) == (
        main.seeds,
        main.budget,
        main.scores,
        main.baseline,
    )
    assert gated.evaluation.every == 0 and main.evaluation.every > 0
    assert dataclasses.replace(gated.evaluation, every=main.evaluation.every) == main.evaluation
    for name in ("fixed-pool", "spade"):
        assert gated.arm(name).config(0) == main.arm(name).config(0), name
    validation = gated.arm("spade").config(0).design.validation
    assert validation.refuse_undetermined_answers and validation.max_copy_win_rate is not None
    assert validation.max_common_answer_win_rate is not None
    assert validation.max_trivial_mean_return is not None
