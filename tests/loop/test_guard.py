"""The play-time guard (loop/guard.py): pure checks with hand-computed numbers, and flags in the archive
(left out of the pool and the memory, forgotten with a discarded iteration)."""

from __future__ import annotations

import pytest

from spade_rl.archive import Archive, ArchiveConfig, PlayStats
from spade_rl.loop.guard import (
    binomial_tail,
    changed,
    empty_action,
    empty_action_win,
    flag_changed,
    one_answer_win,
    probe_shift,
    win_rate_shift,
    won_count,
)
from spade_rl.loop.stages import PlayedEnv
from spade_rl.rollout import Episode, EpisodeSpec, Turn

SOURCE = "class SayEnv:\n    def reset(self, seed=None):\n        return 'say', {}\n"


def episode(action: str, won: bool, seed: int = 0) -> Episode:
    e = Episode(EpisodeSpec(SOURCE, seed=seed))
    e.turns = [Turn(action, "yes" if won else "no", float(won), won, False, "stop")]
    e.stop_reason = "terminated" if won else "truncated"
    return e


def stats(won_nohint: int, won_hint: int, n: int = 4) -> PlayStats:
    return PlayStats(n, n, won_nohint / n, won_hint / n, 0.0, 1.0, won_nohint / n, won_hint / n)


def test_empty_actions():
    for action in (
        "",
        "  ",
        "\\boxed{}",
        "\\boxed{ }",
        "<answer></answer>",
        "this is not a valid action %%% \\boxed{??}",
    ):
        assert empty_action(action), action
    for action in ("\\boxed{0}", "go", "<answer>no</answer>"):
        assert not empty_action(action), action
    assert empty_action_win([episode("\\boxed{}", False), episode("go", True)]) is None
    won = episode("\\boxed{}", True)
    assert empty_action_win([episode("go", True), won]) is won


def test_binomial_tail_by_hand():
    assert binomial_tail(8, 8, 0.5, upper=True) == pytest.approx(1 / 256)
    assert binomial_tail(0, 4, 0.5, upper=False) == pytest.approx(1 / 16)
    assert binomial_tail(1, 2, 0.5, upper=True) == pytest.approx(3 / 4)
    assert won_count(stats(3, 1)) == (4, 8)


def test_win_rate_shift():
    # 0 of 16 before (p' = 1/18), 8 of 8 now: tail (1/18)^8 = 9.1e-11, shift 1.0
    assert "won 8 of 8 episodes this iteration against 0 of 16 before" in win_rate_shift(
        [stats(0, 0), stats(0, 0)], stats(4, 4), 0.6, 1e-4
    )
    assert win_rate_shift([], stats(4, 4), 0.6, 1e-4) == ""  # no history
    assert win_rate_shift([stats(1, 2)], stats(3, 4), 0.6, 1e-4) == ""  # 3/8 -> 7/8: shift 0.5 < 0.6
    # 0 of 8 before (p' = 1/10), 6 of 8 now: shift 0.75 but tail 2.3e-5 ... below 1e-4: flagged;
    # with a stricter p_value it is not
    assert win_rate_shift([stats(0, 0)], stats(3, 3), 0.6, 1e-4)
    assert win_rate_shift([stats(0, 0)], stats(3, 3), 0.6, 1e-6) == ""
    # a drop counts too: 16 of 16 before, 0 of 8 now
    assert "won 0 of 8" in win_rate_shift([stats(4, 4), stats(4, 4)], stats(0, 0), 0.6, 1e-4)


def test_changed_needs_distinct_seeds_for_the_rate():
    before = [stats(0, 0), stats(0, 0)]
    shared = [episode("go", True, seed=7) for _ in range(8)]  # one shared seed: no evidence of a change
    assert changed(shared, before, stats(4, 4), 0.6, 1e-4) is None
    distinct = [episode("go", True, seed=n) for n in range(8)]
    assert changed(distinct, before, stats(4, 4), 0.6, 1e-4)[0] == "win_rate_shift"
    empty = [*distinct[:7], episode("", True, seed=3)]
    assert changed(empty, [], stats(4, 4), 0.6, 1e-4)[0] == "empty_action_won"


def test_one_answer_that_wins_at_almost_every_seed():
    """16 of 16 seeds won by one answer: P(X >= 16) = 2^-16 = 1.5e-5 < 1e-4; 15 of 16: 17 / 2^16 =
    2.6e-4, not below it. Spellings of one answer count together; a play of several answers does not."""
    spellings = ["\\boxed{-1}", "<answer>-1</answer>", "-1.0", "\\boxed{ -1 }"]
    every = [episode(spellings[n % 4], True, seed=n) for n in range(16)]
    why = one_answer_win(every, 1e-4)
    assert "won at 16 of 16 seeds" in why and "1.5e-05" in why, why
    assert changed(every, [], stats(8, 8, n=8), 0.6, 1e-4)[0] == "one_answer_won"
    all_but_one = [*every[:15], episode("\\boxed{3}", False, seed=15)]
    assert one_answer_win(all_but_one, 1e-4) == ""
    assert one_answer_win(all_but_one, 1e-3) != ""  # 2.6e-4 < 1e-3
    varied = []
    for n in range(16):  # won, but each episode tried another answer first
        e = episode("\\boxed{-1}", True, seed=n)
        e.turns.insert(0, Turn(f"\\boxed{{{n}}}", "no", 0.0, False, False, "stop"))
        varied.append(e)
    assert one_answer_win(varied, 1e-4) == ""
    shared = [episode("\\boxed{-1}", True, seed=7) for _ in range(16)]  # one seed: one instance
    assert one_answer_win(shared, 1e-4) == "" and changed(shared, [], stats(8, 8, n=8), 0.6, 1e-4) is None


def test_probe_shift_by_hand():
    """16 of 16 probe episodes won where validation allowed 15%: P(X >= 16) = 0.15^16 = 6.6e-14. 10 of 16
    (0.625 - 0.15 = 0.475) is under a shift of 0.6; 13 of 16 (0.66) is not, and its tail is tiny."""
    assert "won 16 of 16 episodes" in probe_shift(16, 16, 0.15, 0.6, 1e-4)
    assert "6.6e-14" in probe_shift(16, 16, 0.15, 0.6, 1e-4)
    assert probe_shift(10, 16, 0.15, 0.6, 1e-4) == ""
    assert probe_shift(13, 16, 0.15, 0.6, 1e-4) != ""
    assert probe_shift(2, 2, 0.15, 0.6, 1e-4) == ""  # 0.15^2 = 0.0225: two episodes say little
    assert probe_shift(0, 0, 0.15, 0.6, 1e-4) == ""


def test_probe_flags_designed_environments_only(tmp_path):
    with Archive(tmp_path / "archive.sqlite") as archive:
        ids = {origin: add_env(archive, origin, origin) for origin in ("reference", "designer")}
        honest = [episode("go", n % 2 == 0, seed=n) for n in range(8)]
        asked = []

        def probe(env_id: int) -> tuple[int, int]:
            asked.append(env_id)
            return 16, 16

        flags = flag_changed(archive, [played(i, honest, honest) for i in ids.values()], 1, probe, 0.15)
        assert [(f.env_id, f.reason) for f in flags] == [(ids["designer"], "trivial_policy_won")]
        assert asked == [ids["designer"]] and ids["designer"] not in archive.pool_weights()


def played(env_id: int, nohint: list[Episode], hint: list[Episode]) -> PlayedEnv:
    from spade_rl.stats import play_stats

    return PlayedEnv(env_id, nohint, hint, play_stats(nohint, hint))


def add_env(archive: Archive, name: str, origin: str = "designer") -> int:
    """A valid environment of its own source (``name`` in its observation) added to ``archive``."""
    source = SOURCE.replace("'say'", f"'say {name}'")
    return archive.add(
        source, valid=True, reason="ok", skill="s", setting="games", iteration=0, origin=origin
    ).env_id


def test_flags_leave_the_pool_and_are_forgotten_with_their_iteration(tmp_path):
    with Archive(tmp_path / "archive.sqlite") as archive:
        ids = [add_env(archive, str(n)) for n in range(2)]
        honest = [episode("go", n % 2 == 0, seed=n) for n in range(4)]
        rigged = [episode("", True, seed=n) for n in range(4)]
        flags = flag_changed(archive, [played(ids[0], honest, honest), played(ids[1], rigged, honest)], 3)
        assert [(f.env_id, f.reason) for f in flags] == [(ids[1], "empty_action_won")]
        assert archive.get(ids[1]).flagged == {
            "iteration": 3,
            "reason": "empty_action_won",
            "message": flags[0].message,
        }
        assert archive.get(ids[0]).flagged is None and archive.get(ids[1]).valid
        assert set(archive.pool_weights()) == {ids[0]}
        assert archive.sample_pool(5, 0) == [ids[0]]
        assert not archive.flag(ids[1], 4, "win_rate_shift")  # the first flag stays
        archive.discard_after(2)  # a resumed run replays iteration 3: its flag goes
        assert archive.get(ids[1]).flagged is None and set(archive.pool_weights()) == set(ids)


def test_guard_can_be_switched_off(tmp_path):
    config = ArchiveConfig(flag_changed=False)
    with Archive(tmp_path / "archive.sqlite", config) as archive:
        env_id = archive.add(SOURCE, valid=True, reason="ok", skill="s", setting="games", iteration=0).env_id
        rigged = [episode("", True, seed=n) for n in range(4)]
        assert flag_changed(archive, [played(env_id, rigged, rigged)], 1) == []
    with pytest.raises(ValueError, match="flag_p_value"):
        ArchiveConfig(flag_p_value=0.0)


def test_a_reference_game_learned_fast_is_not_flagged(tmp_path):
    """The win-rate test leaves out the package's own games: their rise is the agent learning (a
    fixed-pool run lost maze from its pool at 21 of 64 -> 31 of 32). A designed one is still flagged."""
    with Archive(tmp_path / "archive.sqlite") as archive:
        ids = {origin: add_env(archive, origin, origin) for origin in ("reference", "designer")}
        losing = [episode("go", n == 0, seed=n) for n in range(8)]
        winning = [episode("go", True, seed=n) for n in range(8)]
        for env_id in ids.values():
            assert flag_changed(archive, [played(env_id, losing, losing)], 1) == []
            archive.record_stats(env_id, 1, played(env_id, losing, losing).stats)
        flags = flag_changed(archive, [played(i, winning, winning) for i in ids.values()], 2)
        assert [(f.env_id, f.reason) for f in flags] == [(ids["designer"], "win_rate_shift")]
        rigged = [*winning[:7], episode("", True, seed=9)]  # an empty action still flags any origin
        flags = flag_changed(archive, [played(ids["reference"], rigged, rigged)], 3)
        assert [(f.env_id, f.reason) for f in flags] == [(ids["reference"], "empty_action_won")]
