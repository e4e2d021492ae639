"""The training curves of every arm of an experiment in one figure (PNG, matplotlib, imported lazily).

    plot_curves(records, Path("runs/experiments/ci-tiny/curves.png"), title="ci-tiny")

One panel per metric of the runs' ``metrics.jsonl`` (agent win rate without and with the hint, the
fraction of played environments on the frontier, regret, designer valid rate, training loss; where
some run records them, the new designs' band fraction and win rate and the agent's malformed and illegal
turns), the iteration on the x axis, one colour per arm and one line style per seed. A metric an arm never
records (the designer's valid rate of the fixed-pool arm) is simply absent from its panel.

Then two panels per held-out suite, its win rate and its mean return, read from the evaluation files
themselves: the start (shared), every in-loop evaluation (``RUN_DIR/eval/iter-NNNN.json``) and the end,
against the seconds of training spent (evaluations not counted): arms that run iterations at different
speeds (the fixed pool designs nothing) meet on the same budget axis. Score groups (the experiment's
``[scores]``, given as ``groups``) add the same two panels over their games only, the primary first.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from spade_rl.experiment.arm_run import RunRecord
from spade_rl.loop.stages import upgrade_metrics

PANELS = (
    ("agent/win_rate", "agent win rate (no hint)"),
    ("agent/win_rate_hint", "agent win rate (with hint)"),
    ("frontier/fraction", "fraction of envs on the frontier"),
    ("regret/mean", "regret"),
    ("designer/valid_rate", "designer valid rate"),
    ("train/loss", "training loss"),
)
# Drawn only where some run records them (issue 40's curriculum and format metrics; earlier runs have none).
CURRICULUM_PANELS = (
    ("designer/band_fraction", "new designs in the frontier band"),
    ("designer/new_win_rate", "new designs' win rate (no hint)"),
    ("format/malformed", "agent turns malformed"),
    ("format/illegal", "agent turns illegal"),
)
STYLES = ("-", "--", ":", "-.")


def _series(lines: list[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for line in lines:
        value = line.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            xs.append(line["iteration"])
            ys.append(float(value))
    return xs, ys


def _held_out(
    record: RunRecord, lines: list[dict], groups: tuple = ()
) -> dict[str, list[tuple[float, dict]]]:
    """Suite -> [(seconds of training, {"win", "return"})] from the start, in-loop and end evaluations;
    and ``score <name>`` -> the same over the games of each score group."""
    from spade_rl.evaluate.results import EvalResult

    spent, total = {}, 0.0
    for line in lines:
        total += line.get("time/iteration_s") or 0.0
        spent[line.get("iteration")] = total
    files = [(0.0, record.start_path)]
    for path in sorted((record.run_dir / "eval").glob("iter-*.json")):
        try:
            iteration = int(path.stem.split("-")[1])
        except (IndexError, ValueError):
            continue
        if iteration in spent:
            files.append((spent[iteration], path))
    files.append((record.train_seconds, record.end_path))
    points: dict[str, list[tuple[float, dict]]] = {}
    for seconds, path in files:
        try:
            result = EvalResult.read(path)
        except (OSError, ValueError):  # a missing or unreadable evaluation leaves a gap, not a failure
            continue
        for name, suite in result.suites.items():
            scored = [i for i in suite.items if not i.error]  # errors are not answers (ItemResult.error)
            _add(points, name, seconds, scored)
            for group in groups:
                if group.suite == name:
                    mine = [i for i in scored if i.detail.get("category") in group.categories]
                    _add(points, f"score {group.name}", seconds, mine)
    return points


def _add(points: dict, key: str, seconds: float, scored: list) -> None:
    if scored:
        win = sum(1 for i in scored if i.correct) / len(scored)
        mean_return = sum(i.score for i in scored) / len(scored)
        points.setdefault(key, []).append((seconds, {"win": win, "return": mean_return}))


def plot_curves(records: list[RunRecord], path: Path, title: str = "", groups: tuple = ()) -> Path:
    """Draw the curves of ``records`` into ``path`` (PNG); raises ``ImportError`` without matplotlib.
    ``groups``: the experiment's score groups (:class:`~spade_rl.experiment.spec.ScoreGroup`)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = []
    for record in records:
        metrics = record.run_dir / "metrics.jsonl"
        text = metrics.read_text(encoding="utf-8") if metrics.exists() else ""
        runs.append(
            (record, [upgrade_metrics(json.loads(line)) for line in text.splitlines() if line.strip()])
        )
    held_out = {id(record): _held_out(record, lines, groups) for record, lines in runs}
    found = {suite for points in held_out.values() for suite in points}
    scores = [f"score {g.name}" for g in groups if f"score {g.name}" in found]  # in the file's order
    suites = [*scores, *sorted(found - set(scores))]
    eval_panels = [
        (f"held-out:{suite}:{value}", f"held-out {suite}: {label}")
        for suite in suites
        for value, label in (("win", "win rate"), ("return", "mean return"))
    ]
    recorded = [
        (key, label) for key, label in CURRICULUM_PANELS if any(_series(lines, key)[0] for _, lines in runs)
    ]
    panels = [*PANELS, *recorded, *eval_panels]
    columns = 3
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    arms = list(dict.fromkeys(record.arm for record in records))
    seeds = list(dict.fromkeys(record.seed for record in records))
    colours = plt.get_cmap("tab10")
    for ax, (key, label) in zip(axes.flat, panels, strict=False):
        drawn = 0
        for record, lines in runs:
            if key.startswith("held-out:"):
                _, suite, value = key.split(":")
                points = held_out[id(record)].get(suite, [])
                xs, ys = [p[0] for p in points], [p[1][value] for p in points]
            else:
                xs, ys = _series(lines, key)
            if not xs:
                continue
            drawn += 1
            ax.plot(
                xs,
                ys,
                STYLES[seeds.index(record.seed) % len(STYLES)],
                color=colours(arms.index(record.arm) % 10),
                marker="o" if len(xs) < 30 else None,
                markersize=3,
                label=record.arm if len(seeds) == 1 else f"{record.arm} (seed {record.seed})",
            )
        if not drawn:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_title(label, fontsize=10)
        if key.startswith("held-out:"):
            ax.set_xlabel("seconds of training", fontsize=8)
        else:
            ax.set_xlabel("iteration", fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, labels = {}, []
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    # Margins in inches turned into fractions of this figure's height (3 inches a row of panels): a
    # fraction fixed for a 2-row figure leaves a gap of inches under a 6-row one, and tight_layout does
    # not keep the figure's title clear of the first row's titles.
    height = fig.get_figheight()
    bottom = top = 0.0
    if handles:
        # As many columns as long labels fit across the figure (about 7 pixels a character at this size),
        # so that none is cut at the edges; a row of legend (about 0.22 inch) more per extra line.
        width_px = fig.get_figwidth() * 100
        ncol = max(1, min(len(labels), int(width_px // (7 * max(map(len, labels)) + 50))))
        rows = -(-len(labels) // ncol)
        fig.legend([handles[label] for label in labels], labels, loc="lower center", ncol=ncol)
        bottom = (0.15 + 0.22 * rows) / height
    if title:
        fig.suptitle(title, y=1 - 0.08 / height, va="top")
        top = 0.4 / height
    fig.tight_layout(rect=(0, bottom, 1, 1 - top))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
