"""What the base agent makes of the graded warm-up designs (issue 40): win rates by level and band.

    python bench/warmup_grades.py                          # the CPU default: 3 x 48 candidates, 4 plays each
    python bench/warmup_grades.py --plays 8 warmup.candidates_per_design=2   # with any run override
    python bench/warmup_grades.py design.question_attempts=3 design.question_feedback=direction

Draws the candidates the graded warm-up would draw (``spade_rl.designer.warmup.draw_candidates``: the levels
in turn), plays each ``--plays`` times without the hint at distinct seeds with the run's policy as the
run's agent plays (its rollout settings, in its sandbox), before any training, and prints per level the
mean win rate and how many candidates fall in each band (never won, too hard, at the frontier, too easy),
what ``select_graded`` would keep, and the mean win rate per skill and level. Nothing is trained or cached.
With ``design.question_attempts`` > 1 the candidates are played with those attempts (and
``design.question_feedback``), as the loop plays its designs; those that the design phase's validation
refuses with them are counted per level and left out, as the graded warm-up leaves them out
(``--all`` measures them too, in the table's other rows).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict

from spade_rl.corpus import Corpus
from spade_rl.designer.synthetic import LEVELS
from spade_rl.designer.warmup import (
    BANDS,
    WarmupPlay,
    band_of,
    draw_candidates,
    measure_candidates,
    playable_candidates,
    select_graded,
)
from spade_rl.loop.config import load_config
from spade_rl.policy import make_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plays", type=int, default=4, help="plays of each candidate (distinct seeds)")
    parser.add_argument(
        "--all", action="store_true", help="with several attempts, measure the refused candidates too"
    )
    parser.add_argument("overrides", nargs="*", help="run overrides, as spade-rl run takes them")
    args = parser.parse_args()
    config = load_config(None, [*args.overrides, f"warmup.measure_plays={args.plays}"])
    policy = make_policy(config.policy)
    drawn = draw_candidates(config.warmup, config.design, Corpus.from_config(config.corpus))
    design = config.design
    play = WarmupPlay(config.sandbox, config.rollout)
    started = time.perf_counter()
    valid = drawn
    if design.question_attempts > 1:
        messages: list[str] = []
        valid, refused = playable_candidates(drawn, design, play, config.warmup.seed, messages)
        print(
            f"validation with {design.question_attempts} attempts: {len(drawn) - len(valid)} of {len(drawn)} "
            f"refused {dict(refused)} ({time.perf_counter() - started:.0f} s)"
        )
        # how often the answers in turn won where they refused a candidate ("win N of 16 seeds")
        in_turn = Counter(
            int(m.split(" win ")[1].split(" of ")[0]) for m in messages if "one a turn, win " in m
        )
        print(
            "answers in turn won (seeds: candidates): "
            + ", ".join(f"{k}: {v}" for k, v in sorted(in_turn.items()))
        )
    candidates = drawn if args.all else valid
    started = time.perf_counter()
    rates = measure_candidates(
        policy, candidates, args.plays, play, config.warmup.seed, design.question_kwargs
    )
    seconds = time.perf_counter() - started
    bands = [band_of(r) for r in rates]
    order = ("never_won", "too_hard", "frontier", "too_easy")
    ok = {id(c) for c in valid}
    print(
        f"{len(candidates)} candidates x {args.plays} plays, {design.question_attempts} attempt(s), feedback "
        f"{design.question_feedback!r}: {seconds:.0f} s"
    )
    print(f"{'level':14} {'count':>5} {'mean win':>8} " + " ".join(f"{b:>9}" for b in order))
    for level in LEVELS:
        for accepted in (True, False) if args.all and len(valid) < len(drawn) else (True,):
            mine = [i for i, c in enumerate(candidates) if c.level == level and (id(c) in ok) == accepted]
            if not mine:
                continue
            counts = Counter(bands[i] for i in mine)
            mean = sum(rates[i] for i in mine) / len(mine)
            label = level if accepted else f"{level}/refused"
            print(f"{label:14} {len(mine):5d} {mean:8.3f} " + " ".join(f"{counts[b]:9d}" for b in order))
    if args.all:  # what select_graded keeps is chosen among the valid ones
        rates = [r for c, r in zip(candidates, rates, strict=True) if id(c) in ok]
        bands = [band_of(r) for r in rates]
        candidates = valid
    chosen = select_graded(rates, config.warmup.designs)
    kept = Counter(bands[i] for i in chosen)
    print(
        f"kept {len(chosen)}: "
        + ", ".join(f"{b} {kept[b]}" for b in (*BANDS, "never_won"))
        + f"; mean win {sum(rates[i] for i in chosen) / len(chosen):.3f}"
    )
    by_skill: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c, r in zip(candidates, rates, strict=True):
        by_skill[(c.skill, c.level)].append(r)
    print(
        "by skill/level: "
        + ", ".join(f"{s}/{lv} {sum(v) / len(v):.2f}" for (s, lv), v in sorted(by_skill.items()) if any(v))
        + " (the others 0)"
    )


if __name__ == "__main__":
    main()
