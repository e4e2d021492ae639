"""Issue 40's agent side: designs do not starve the agent (loop.pool_share, probe_plays, retire_after_plays,
hint_plays_for), distinct instances for designed games (loop.design_group_seeds), the curriculum and format
metrics, and the format penalty. A scripted policy plays real environments through the real sandbox."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest

from spade_rl.archive import Archive, PlayStats
from spade_rl.archive.sampling import draw_pool, retired, weighted_sample
from spade_rl.design.parse import Parsed
from spade_rl.design.validate import ValidationReport
from spade_rl.designer.reward import DesignerRewards
from spade_rl.envs import reference
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.loop.pool import retired_designs
from spade_rl.loop.run import SelfPlay
from spade_rl.loop.stages import Design, PlayedEnv, Proposal, curriculum_metrics, format_metrics
from spade_rl.policy import FakePolicy, Generation, default_tokenizer
from spade_rl.rollout import Episode, EpisodeSpec, Turn, invalid_action
from spade_rl.sandbox import Sandbox, SandboxConfig
from spade_rl.stats import bad_turn_share, format_counts, malformed_action, play_stats

GENERATION = Generation("x", (1,), (2,), (-1.0,), "stop")

# A designed game: answer 7 to win (its hint says so), one turn.
SEVEN = """
class SevenEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.seed = seed
        return f"Instance {seed}. Say a number in \\\\boxed{{}}.", {"status": "start"}

    def step(self, action):
        won = "\\\\boxed{7}" in action
        return ("Right." if won else "Wrong."), float(won), True, False, {"status": "done"}
"""


def design(env_id: int, valid: bool = True) -> Design:
    report = ValidationReport(valid, "ok" if valid else "timeout")
    return Design(Proposal("math", None, (), [], GENERATION, Parsed("ok")), report, env_id, False)


def episode(reward: float, actions=("\\boxed{1}",), invalid=False, setting="games") -> Episode:
    turns = [Turn(a, "o", 0.0, False, False, "stop", "", invalid) for a in actions]
    turns[-1] = Turn(actions[-1], "o", reward, True, False, "stop", "", invalid)
    return Episode(
        EpisodeSpec("", setting=setting),
        turns=turns,
        stop_reason="terminated",
        token_ids=[1, 2],
        mask=[0, 1],
        logprobs=[0.0, -1.0],
        prompt_length=1,
    )


# --- configuration -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("loop.design_group_seeds='same'", r"loop\.design_group_seeds 'same'; allowed"),
        ("loop.pool_share=1.5", r"loop\.pool_share must be a number in \[0, 1\]"),
        ("loop.pool_share=true", r"loop\.pool_share must be a number"),
        ("loop.probe_plays=-1", r"loop\.probe_plays must be an integer >= 0"),
        ("loop.retire_after_plays=2.5", r"loop\.retire_after_plays must be an integer"),
        ("loop.hint_plays_for='pool'", r"loop\.hint_plays_for 'pool'; allowed: \['all', 'designs'\]"),
        ("loop.format_penalty=2", r"loop\.format_penalty must be a number in \[0, 1\]"),
    ],
)
def test_bad_values_are_refused_with_what_is_allowed(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_combinations_that_cannot_work_are_refused():
    with pytest.raises(ConfigError, match=r"loop\.probe_min_wins must be an integer from 1 to"):
        load_config(None, ["loop.probe_plays=4", "loop.probe_min_wins=5"])
    with pytest.raises(ConfigError, match=r"loop\.probe_plays \(9\) .* at most train\.group_size \(8\)"):
        load_config(None, ["loop.probe_plays=9"])
    with pytest.raises(ConfigError, match=r"loop\.retire_after_plays = 4 acts on designed .* 'none'"):
        load_config(
            None, ["designer.source='none'", "loop.retire_after_plays=4", "loop.hint_plays_per_env=0"]
        )
    with pytest.raises(ConfigError, match=r"rewards\.delay = 1 plays a design phase's designs"):
        load_config(None, ["loop.probe_plays=4", "rewards.delay=1"])
    with pytest.raises(
        ConfigError, match=r"loop\.pool_share = 1\.0 keeps every group .*loop\.probe_plays > 0"
    ):
        load_config(None, ["loop.pool_share=1.0"])
    loop = load_config(None, ["loop.pool_share=1.0", "loop.probe_plays=4"]).loop  # probes still play designs
    assert (loop.pool_groups, loop.probe_hint_plays) == (6, 4)
    loop = load_config(None, ["loop.pool_share=0.5", "loop.design_group_seeds='distinct'"]).loop
    assert loop.pool_groups == 3 and loop.seeds_shared(False) and not loop.seeds_shared(True)
    assert load_config(None, []).loop.seeds_shared(True)  # the CPU default: unset follows group_seeds


# --- the pool's draw and retirement --------------------------------------------------------------------


def test_the_pool_draw_leaves_out_what_it_is_told_and_is_the_archives_draw_otherwise():
    weights = {1: 0.5, 2: 1.0, 3: 0.05, 4: 0.7}
    a, b = random.Random(3), random.Random(3)
    assert draw_pool(weights, 5, a, replace=True) == b.choices(list(weights), list(weights.values()), k=5)
    assert draw_pool(weights, 3, a) == weighted_sample(list(weights), list(weights.values()), 3, b)
    drawn = draw_pool(weights, 50, random.Random(0), replace=True, exclude={2, 4})
    assert set(drawn) == {1, 3}
    assert draw_pool(weights, 9, random.Random(0), exclude={1, 2, 3}) == [4]
    assert draw_pool(weights, 3, random.Random(0), exclude=set(weights)) == []


def test_designs_never_won_in_enough_plays_retire():
    plays = {1: [(4, 0.0)], 2: [(4, 0.0), (8, 0.125)], 3: [(2, 0.0)], 4: [(2, 0.0), (2, 0.0)]}
    assert retired(plays, 4) == {1, 4}
    assert retired(plays, 0) == set()


def test_retirement_reads_the_archive_and_counts_only_designs(tmp_path):
    with Archive(tmp_path / "a.sqlite") as archive:
        ids = [
            archive.add(
                f"class E{n}: pass",
                valid=True,
                reason="ok",
                skill="s",
                setting="games",
                iteration=1,
                origin=origin,
            ).env_id
            for n, origin in enumerate(["designer", "designer", "reference", "designer"])
        ]
        lost = PlayStats(4, 4, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0)
        for env_id in ids[:3]:
            archive.record_stats(env_id, 1, lost)
        archive.record_stats(ids[1], 2, PlayStats(4, 4, 0.25, 0.0, 0.0, 1.0, 0.25, 0.0))
        assert retired_designs(archive, 4) == {ids[0]}  # the reference game and the won design stay
        assert retired_designs(archive, 8) == set() and retired_designs(archive, 0) == set()
        archive.discard_after(0)  # a resumed run that forgot iteration 1 forgets the retirement too
        assert retired_designs(archive, 4) == set()


def chooser(overrides, weights):
    pool = SimpleNamespace(
        pool_weights=lambda setting: dict(weights),
        sample_pool=lambda n, rng, setting, replace=False: draw_pool(weights, n, rng, replace=replace),
    )
    return SimpleNamespace(config=load_config(None, overrides), archive=pool)


def test_a_share_of_the_groups_stays_on_the_pools_older_entries():
    weights = {1: 1.0, 2: 1.0, 10: 1.0, 11: 1.0, 12: 1.0}  # 10-12: this iteration's designs
    designs = [design(10), design(11), design(12), design(13, valid=False)]
    today = chooser([], weights)  # the CPU default: the designs first, then the pool (designs included)
    assert SelfPlay._choose_envs(today, designs, random.Random(0))[:3] == [10, 11, 12]
    run = chooser(["loop.pool_share=0.5"], weights)
    for seed in range(20):
        chosen = SelfPlay._choose_envs(run, designs, random.Random(seed))
        assert len(chosen) == 6 and chosen[:3] == [10, 11, 12] and set(chosen[3:]) <= {1, 2}
    many = [design(n) for n in range(10, 16)]
    chosen = SelfPlay._choose_envs(run, many, random.Random(0))
    assert chosen[:3] == [10, 11, 12] and set(chosen[3:]) <= {1, 2}  # 3 groups kept for the pool
    # retired environments are never drawn; a pool with nothing older left gives its slots to designs
    chosen = SelfPlay._choose_envs(run, many, random.Random(0), retired={1, 2})
    assert chosen == [10, 11, 12, 13, 14, 15]


def test_only_designs_whose_probe_passed_take_full_groups():
    weights = {1: 1.0, 2: 1.0, 10: 1.0, 11: 1.0}
    run = chooser(["loop.probe_plays=4"], weights)
    for seed in range(20):
        chosen = SelfPlay._choose_envs(run, [design(10), design(11)], random.Random(seed), promoted=[11])
        assert chosen[0] == 11 and 10 not in chosen and len(chosen) == 6


# --- play: seeds, hints, probes, format ----------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0)) as s:
        yield s


def player(chat) -> str:
    """Says 7 on the designed game at even instances (a hint makes no difference), a letter on nim (an
    illegal move), and on guess leaves its box open (a malformed turn)."""
    text = " ".join(m["content"] for m in chat)
    if "Instance" in text:
        seed = int(re.search(r"Instance (\d+)", text).group(1))
        return "\\boxed{7}" if seed % 2 == 0 else "\\boxed{3}"
    if "stones" in text:
        return "\\boxed{x}"
    return "I think 5"


def play_run(tmp_path, sandbox, overrides, seven_hint="Say seven."):
    plain = ["rollout.action_prefix={}", "rollout.action_stop={}"]  # the action is what the player says
    config = load_config(None, ["rollout.max_turns=2", "loop.iterations=1", *plain, *overrides])
    tmp_path.mkdir(parents=True, exist_ok=True)
    archive = Archive(tmp_path / "archive.sqlite", config.archive)
    kwargs = {"max_turns": 2}
    ids = {
        "seven": archive.add(
            SEVEN,
            valid=True,
            reason="ok",
            skill="math",
            setting="games",
            iteration=1,
            hint=seven_hint,
            env_kwargs={"max_turns": 1},
        ).env_id,
    }
    for name in ("nim", "guess"):
        ids[name] = archive.add(
            reference.source(name),
            valid=True,
            reason="ok",
            skill=name,
            setting="games",
            iteration=0,
            hint=reference.HINTS[name],
            origin="reference",
            env_kwargs=kwargs,
        ).env_id
    run = SimpleNamespace(
        config=config,
        archive=archive,
        policy=FakePolicy(player, tokenizer=default_tokenizer()),
        executor=sandbox,
        designer_rewards=DesignerRewards(config.rewards, 1),
    )
    run._play = lambda *a, **k: SelfPlay._play(run, *a, **k)
    run._choose_envs = lambda *a, **k: SelfPlay._choose_envs(run, *a, **k)
    return run, ids


def test_designed_games_draw_an_instance_per_play_where_asked(tmp_path, sandbox):
    run, ids = play_run(tmp_path, sandbox, ["loop.design_group_seeds='distinct'"])
    seven, nim = run._play([ids["seven"], ids["nim"]], random.Random(0), 1)
    assert len({e.spec.seed for e in seven.nohint + seven.hint}) == 12  # 8 + 4 instances
    assert len({e.spec.seed for e in nim.nohint + nim.hint}) == 1  # the pool's games: one shared seed
    assert 0 < seven.stats.win_rate_nohint < 1  # a rate over instances, not one instance's answer
    assert (seven.family, nim.family) == ("designed", "nim")
    run.archive.close()


def test_hint_episodes_only_where_a_hint_exists_and_is_wanted(tmp_path, sandbox):
    run, ids = play_run(tmp_path, sandbox, [], seven_hint="  ")
    seven, nim = run._play([ids["seven"], ids["nim"]], random.Random(0), 1)
    assert (len(seven.nohint), len(seven.hint), len(nim.hint)) == (8, 0, 4)
    assert seven.stats.episodes_hint == 0 and seven.stats.regret == 0.0
    run.archive.close()
    run, ids = play_run(tmp_path / "b", sandbox, ["loop.hint_plays_for='designs'"])
    seven, nim = run._play([ids["seven"], ids["nim"]], random.Random(0), 1)
    assert (len(seven.hint), len(nim.hint), len(nim.nohint)) == (4, 0, 8)
    run.archive.close()


def test_a_new_design_is_probed_before_it_takes_a_full_group(tmp_path, sandbox):
    overrides = ["loop.probe_plays=4", "loop.design_group_seeds='distinct'", "loop.pool_share=0.5"]
    run, ids = play_run(tmp_path, sandbox, overrides)
    played, counts = SelfPlay._play_iteration(run, [design(ids["seven"])], random.Random(1), 1, set())
    probe = [p for p in played if p.probe]
    assert len(probe) == 1 and (len(probe[0].nohint), len(probe[0].hint)) == (4, 4)
    won = sum(e.won for e in probe[0].nohint)
    full = [p for p in played if not p.probe and p.env_id == ids["seven"]]
    assert (len(full) == 1) == (won >= 1) and counts["probe/promoted"] == float(won >= 1)
    assert counts["probe/designs"] == 1.0 and counts["pool/groups"] >= 3
    assert len([p for p in played if not p.probe]) == 6
    # a probe that wins nothing keeps the design out of this iteration's full groups
    run.policy = FakePolicy(lambda chat: "\\boxed{3}", tokenizer=default_tokenizer())
    played, counts = SelfPlay._play_iteration(run, [design(ids["seven"])], random.Random(1), 1, set())
    assert counts["probe/promoted"] == 0.0
    assert [p.env_id for p in played if p.env_id == ids["seven"]] == [ids["seven"]]  # the probe only
    run.archive.close()


def test_format_metrics_count_malformed_and_illegal_turns_per_family(tmp_path, sandbox):
    run, ids = play_run(tmp_path, sandbox, [])
    played = run._play([ids["seven"], ids["nim"], ids["guess"]], random.Random(0), 1)
    metrics = format_metrics(played)
    assert metrics["format/nim/illegal"] == 1.0 and metrics["format/nim/malformed"] == 0.0
    assert metrics["format/guess/malformed"] == 1.0 and metrics["format/guess/illegal"] == 1.0
    assert metrics["format/designed/malformed"] == 0.0 and metrics["format/designed/illegal"] == 0.0
    assert 0 < metrics["format/malformed"] < 1 and 0 < metrics["format/illegal"] < 1
    run.archive.close()


def test_format_pieces():
    assert malformed_action("\\boxed{up}") is False and malformed_action("\\boxed{up") is True
    assert malformed_action("<answer>4</answer>") is False and malformed_action("4") is True
    assert malformed_action("<tool_call>{}</tool_call>", "tool_use") is False
    assert malformed_action("<tool_call>{}</tool_call>") is True
    assert invalid_action({"status": "invalid"}) and invalid_action({"invalid_action": True})
    assert not invalid_action({"status": ["invalid"]}) and not invalid_action({"invalid_action": 1})
    bad = episode(0.0, ["\\boxed{1", "\\boxed{2}"], invalid=False)
    assert bad_turn_share(bad) == 0.5 and bad_turn_share(episode(1.0)) == 0.0
    counts = format_counts([bad, episode(0.0, invalid=True)])
    assert (counts.turns, counts.malformed, counts.illegal) == (3, 1, 1)


# --- metrics and the batch ------------------------------------------------------------------------------


def test_the_band_fraction_and_win_rate_of_the_iterations_new_designs():
    def played(env_id, wins, n=4, probe=False):
        nohint = [episode(1.0 if k < wins else 0.0) for k in range(n)]
        return PlayedEnv(env_id, nohint, [], play_stats(nohint, []), probe, "designed")

    groups = [played(1, 1, probe=True), played(1, 0, n=8), played(2, 0), played(3, 2), played(9, 4)]
    metrics = curriculum_metrics(
        [design(1), design(2), design(3), design(4, valid=False)], groups, (0.15, 0.85)
    )
    # design 1: 1 win in 12 plays (probe and full group together); 2: 0 of 4; 3: 2 of 4; 9 is the pool's
    assert metrics["designer/new_played"] == 3
    assert metrics["designer/new_win_rate"] == pytest.approx((1 / 12 + 0 + 0.5) / 3)
    assert metrics["designer/band_fraction"] == pytest.approx(1 / 3)
    none = curriculum_metrics([], groups, (0.15, 0.85))
    assert none["designer/new_win_rate"] is None and none["designer/band_fraction"] is None


def test_the_format_penalty_lowers_the_advantage_of_bad_turns():
    nohint = [episode(0.0, ["\\boxed{1"]), episode(0.0), episode(1.0), episode(1.0)]
    played = [PlayedEnv(1, nohint, [], play_stats(nohint, []))]
    plain = SelfPlay._batch(SimpleNamespace(config=load_config(None, [])), [], played)
    fined = SelfPlay._batch(
        SimpleNamespace(config=load_config(None, ["loop.format_penalty=0.5"])), [], played
    )
    a, b = [s.advantage for s in plain.agent], [s.advantage for s in fined.agent]
    assert a[0] == a[1] and b[0] < b[1]  # the malformed loss is worse than the well-formed one
    # a group whose only difference is the format has a signal with the penalty and none without
    same = [episode(0.0, ["\\boxed{1"]), episode(0.0)] * 2
    flat = [PlayedEnv(1, same, [], play_stats(same, []))]
    assert SelfPlay._batch(SimpleNamespace(config=load_config(None, [])), [], flat).agent == []
    fined = SelfPlay._batch(SimpleNamespace(config=load_config(None, ["loop.format_penalty=0.5"])), [], flat)
    assert len(fined.agent) == 4
