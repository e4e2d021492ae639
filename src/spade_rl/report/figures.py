"""The report's figures: matplotlib (Agg, no pyplot, no global state) drawn into PNG bytes.

    figures = make_figures(load_run(run_dir))
    for figure in figures:
        (out_dir / f"{figure.name}.png").write_bytes(figure.png)

Every figure over iterations shades the iterations that have archive records but no metrics line (an
interrupted iteration) and draws single points with markers, so a one-iteration run still shows its
values. A figure without data says so in its panels instead of disappearing; the evaluation figure
exists only when the run holds evaluation results. Labels are drawn as plain text (no mathtext).
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass

from spade_rl.report.data import IterationRow, RunData

OK_COLOUR = "#2ca02c"
PALETTE = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#1f77b4")
HINT_COLOUR, NOHINT_COLOUR = "#ff7f0e", "#1f77b4"
DPI = 100
WIDTH_IN = 8.0
FIGURE_NAMES = ("designer", "agent", "frontier", "curriculum", "size", "skills", "training", "evaluation")


@dataclass(frozen=True)
class FigureImage:
    name: str  # file stem: <name>.png
    title: str
    caption: str
    png: bytes

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels, from the PNG header."""
        width, height = struct.unpack(">II", self.png[16:24])
        return width, height


def make_figures(data: RunData) -> list[FigureImage]:
    """All figures of the report, in page order. Needs matplotlib (the ``report`` extra)."""
    try:
        import matplotlib  # noqa: F401  (imported here: the rest of spade-rl does not need it)
    except ImportError:
        raise ImportError(
            "the report draws its figures with matplotlib; install it with: pip install 'spade-rl[report]'"
        ) from None
    from matplotlib import rc_context

    builders: list[tuple[str, str, str, Callable]] = [
        ("designer", "Designer: verdicts", _designer_caption(data), _designer),
        ("agent", "Agent: win rate without and with the hint", _agent_caption(), _agent),
        ("frontier", "Regret and the frontier", _frontier_caption(data), _frontier),
        ("curriculum", "New designs, probes and the agent's format", _curriculum_caption(data), _curriculum),
        ("size", "Environment size and episode length", _size_caption(), _size),
        ("skills", "Mix of skills", _skills_caption(), _skills),
        ("training", "Training", _training_caption(), _training),
    ]
    if any(record.suites for record in data.evals):
        builders.append(("evaluation", "Evaluation", _eval_caption(), _evaluation))
    figures = []
    with rc_context({"text.parse_math": False, "font.size": 9, "axes.spines.top": False}):
        for name, title, caption, build in builders:
            figure = build(data)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
            figures.append(FigureImage(name, title, caption, buffer.getvalue()))
    return figures


# --- helpers -----------------------------------------------------------------------------------------


def _new_figure(rows: int, height_per_row: float = 2.3):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_IN, 0.6 + height_per_row * rows), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, 1, squeeze=False)[:, 0]
    return figure, list(axes)


def _values(rows: list[IterationRow], get: Callable[[IterationRow], float | None]) -> list[float]:
    return [math.nan if (v := get(row)) is None else v for row in rows]


def _has(values: list[float]) -> bool:
    return any(not math.isnan(v) for v in values)


def _label(text: str) -> str:
    """Matplotlib hides legend entries whose label starts with an underscore."""
    return " " + text if text.startswith("_") else text


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777777")
    ax.set_xticks([])
    ax.set_yticks([])


def _integer_ticks(ax, iterations: list[int]) -> None:
    """Iterations on the x axis: every one while there are few, else integer ticks chosen by matplotlib."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlim(min(iterations) - 0.6, max(iterations) + 0.6)
    if max(iterations) - min(iterations) < 16:
        ax.set_xticks(range(min(iterations), max(iterations) + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _iteration_axis(ax, data: RunData) -> None:
    iterations = [row.iteration for row in data.rows]
    _integer_ticks(ax, iterations)
    ax.grid(True, axis="y", alpha=0.3)
    interrupted = [row.iteration for row in data.rows if not row.complete]
    for k, i in enumerate(interrupted):
        ax.axvspan(i - 0.5, i + 0.5, color="#bbbbbb", alpha=0.3, label="interrupted" if k == 0 else None)


def _line(ax, data: RunData, values: list[float], label: str, colour: str, style: str = "-o") -> bool:
    if not _has(values):
        return False
    ax.plot([row.iteration for row in data.rows], values, style, color=colour, label=_label(label), ms=4)
    return True


def _finish(ax, data: RunData, ylabel: str, plotted: bool, empty: str, unit_range: bool = False) -> None:
    if not plotted or not data.rows:
        _no_data(ax, empty)
        ax.set_ylabel(ylabel)
        return
    _iteration_axis(ax, data)
    ax.set_ylabel(ylabel)
    if unit_range:
        ax.set_ylim(-0.03, 1.03)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8, frameon=False)


# --- the figures -------------------------------------------------------------------------------------


def _designer_caption(data: RunData) -> str:
    return (
        "Top: designer proposals per iteration by verdict (ok = valid; any other colour is the first "
        "validation check that failed). Bottom: the valid rate. Grey: iterations without a metrics line."
    )


def _designer(data: RunData):
    figure, (bars, rate) = _new_figure(2)
    reasons: dict[str, int] = {}
    for row in data.rows:
        for reason, count in row.reasons.items():
            reasons[reason] = reasons.get(reason, 0) + count
    order = sorted(reasons, key=lambda r: (r != "ok", -reasons[r], r))
    colours = {}
    others = iter(PALETTE * (1 + len(order) // len(PALETTE)))
    for reason in order:
        colours[reason] = OK_COLOUR if reason == "ok" else next(others)
    x = [row.iteration for row in data.rows]
    bottom = [0] * len(x)
    for reason in order:
        counts = [row.reasons.get(reason, 0) for row in data.rows]
        bars.bar(x, counts, bottom=bottom, color=colours[reason], label=_label(reason), width=0.7)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    _finish(bars, data, "proposals", bool(order), "no designer proposal recorded")
    if order:
        bars.yaxis.get_major_locator().set_params(integer=True)
        bars.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    plotted = _line(rate, data, _values(data.rows, lambda r: r.valid_rate), "valid rate", OK_COLOUR)
    _finish(rate, data, "valid rate", plotted, "no designer proposal recorded", unit_range=True)
    rate.set_xlabel("iteration")
    return figure


def _agent_caption() -> str:
    return (
        "Mean win rate over the environments played in each iteration, without the hint (the agent's "
        "training episodes) and with the hint appended to the first observation."
    )


def _agent(data: RunData):
    figure, (ax,) = _new_figure(1, 2.8)
    nohint = _values(data.rows, lambda r: r.win_rate)
    hint = _values(data.rows, lambda r: r.win_rate_hint)
    plotted = _line(ax, data, nohint, "without hint", NOHINT_COLOUR)
    plotted = _line(ax, data, hint, "with hint", HINT_COLOUR, "--s") or plotted
    _finish(ax, data, "win rate", plotted, "no episode played", unit_range=True)
    ax.set_xlabel("iteration")
    return figure


def _frontier_caption(data: RunData) -> str:
    low, high = data.frontier
    return (
        "Top: mean hint-based regret (mean return with the hint minus without, floored at 0) over the "
        f"environments played. Bottom: the fraction of them whose no-hint win rate lies on the frontier "
        f"[{low:g}, {high:g}]."
    )


def _frontier(data: RunData):
    figure, (regret, frontier) = _new_figure(2)
    plotted = _line(regret, data, _values(data.rows, lambda r: r.regret), "regret", "#9467bd")
    _finish(regret, data, "regret", plotted, "no episode played")
    plotted = _line(
        frontier, data, _values(data.rows, lambda r: r.frontier_fraction), "on frontier", "#17becf"
    )
    _finish(frontier, data, "fraction on frontier", plotted, "no episode played", unit_range=True)
    frontier.set_xlabel("iteration")
    return figure


def _curriculum_caption(data: RunData) -> str:
    low, high = data.frontier
    return (
        "From metrics.jsonl. Top: the share of each iteration's new valid designs whose no-hint win rate "
        f"lies in [{low:g}, {high:g}] (designer/band_fraction) and their mean no-hint win rate "
        "(designer/new_win_rate). Middle: designs probed and promoted to full groups (loop.probe_plays), "
        "designs retired from the pool (loop.retire_after_plays) and groups on the pool's older entries. "
        "Bottom: the share of the agent's turns that were malformed (no closed \\boxed{}) or illegal (the "
        "game said invalid), over all games (solid) and per game family (thin)."
    )


def _curriculum(data: RunData):
    figure, (band, counts, form) = _new_figure(3, 2.0)
    empty = "not recorded (a run before issue 40)" if data.has_metrics else "no metrics.jsonl line"
    plotted = _line(
        band,
        data,
        _values(data.rows, lambda r: r.metric("designer/band_fraction")),
        "band fraction",
        "#17becf",
    )
    rate = _values(data.rows, lambda r: r.metric("designer/new_win_rate"))
    plotted = _line(band, data, rate, "new designs' win rate", NOHINT_COLOUR, "--s") or plotted
    _finish(band, data, "new designs", plotted, empty, unit_range=True)
    plotted = False
    panels = (
        ("probe/designs", "probed", "#7f7f7f"),
        ("probe/promoted", "promoted", OK_COLOUR),
        ("pool/retired", "retired", "#d62728"),
        ("pool/groups", "pool groups", "#9467bd"),
    )
    for key, label, colour in panels:
        values = _values(data.rows, lambda r, k=key: r.metric(k))
        plotted = _line(counts, data, values, label, colour) or plotted
    _finish(counts, data, "per iteration", plotted, empty)
    keys = sorted(
        {k for row in data.rows for k in (row.metrics or {}) if k.startswith("format/") and k.count("/") == 2}
    )
    plotted = False
    for overall, colour in (("format/malformed", "#d62728"), ("format/illegal", "#ff7f0e")):
        values = _values(data.rows, lambda r, k=overall: r.metric(k))
        plotted = _line(form, data, values, overall.split("/")[1], colour) or plotted
        for key in (k for k in keys if k.endswith(overall.split("/")[1])):
            values = _values(data.rows, lambda r, k=key: r.metric(k))
            if _has(values):
                x = [r.iteration for r in data.rows]
                form.plot(x, values, "-", color=colour, alpha=0.3, lw=0.8)
                last = max(k for k, v in enumerate(values) if not math.isnan(v))
                family = key.split("/")[1]  # named at its last point
                form.annotate(_label(family), (x[last], values[last]), fontsize=7, color=colour, alpha=0.7)
    _finish(form, data, "share of turns", plotted, empty, unit_range=True)
    form.set_xlabel("iteration")
    return figure


def _size_caption() -> str:
    return (
        "Mean size of the environments first proposed in each iteration (all of them and the valid "
        "ones), and the mean number of turns per episode over the environments played."
    )


def _size(data: RunData):
    figure, (lines, chars, turns) = _new_figure(3, 2.0)
    plotted = _line(lines, data, _values(data.rows, lambda r: r.source_lines), "all proposed", "#7f7f7f")
    plotted = (
        _line(lines, data, _values(data.rows, lambda r: r.valid_source_lines), "valid", OK_COLOUR, "--s")
        or plotted
    )
    _finish(lines, data, "source lines", plotted, "no environment source recorded")
    plotted = _line(chars, data, _values(data.rows, lambda r: r.source_chars), "all proposed", "#7f7f7f")
    plotted = (
        _line(chars, data, _values(data.rows, lambda r: r.valid_source_chars), "valid", OK_COLOUR, "--s")
        or plotted
    )
    _finish(chars, data, "source characters", plotted, "no environment source recorded")
    plotted = _line(turns, data, _values(data.rows, lambda r: r.mean_turns), "turns", "#8c564b")
    _finish(turns, data, "turns / episode", plotted, "no episode played")
    turns.set_xlabel("iteration")
    return figure


def _skills_caption() -> str:
    return "Distinct designer environments per skill, valid and invalid (duplicates counted once)."


def _skills(data: RunData):
    designed = [e for e in data.envs if e.record.origin == "designer"]
    skills = sorted({e.record.skill for e in designed})
    figure, (ax,) = _new_figure(1, max(1.6, 0.35 * len(skills) + 0.8))
    if not skills:
        _no_data(ax, "no designer environment recorded")
        return figure
    valid = [sum(e.record.valid for e in designed if e.record.skill == s) for s in skills]
    invalid = [sum(not e.record.valid for e in designed if e.record.skill == s) for s in skills]
    y = list(range(len(skills)))
    ax.barh(y, valid, color=OK_COLOUR, label="valid", height=0.6)
    ax.barh(y, invalid, left=valid, color="#d62728", label="invalid", height=0.6)
    ax.set_yticks(y, [_label(s) for s in skills])
    ax.invert_yaxis()
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("environments")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return figure


def _training_caption() -> str:
    return (
        "From metrics.jsonl: the GRPO loss of each iteration's update, the designer's mean reward "
        "before centring, and the wall-clock seconds of the iteration."
    )


def _training(data: RunData):
    figure, axes = _new_figure(3, 1.8)
    panels = (
        ("train/loss", "loss", "#1f77b4", "no update recorded"),
        ("designer/reward_mean", "designer reward", "#2ca02c", "no designer reward recorded"),
        ("time/iteration_s", "seconds", "#7f7f7f", "no timing recorded"),
    )
    for ax, (key, ylabel, colour, empty) in zip(axes, panels, strict=True):
        plotted = _line(ax, data, _values(data.rows, lambda r, k=key: r.metric(k)), ylabel, colour)
        _finish(ax, data, ylabel, plotted, empty if data.has_metrics else "no metrics.jsonl line")
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    axes[-1].set_xlabel("iteration")
    return figure


def _eval_caption() -> str:
    return (
        "Accuracy of each evaluation suite after the iterations where the loop evaluated, with 95% intervals."
    )


def _evaluation(data: RunData):
    figure, (ax,) = _new_figure(1, 3.0)
    suites = sorted({s for record in data.evals for s in record.suites})
    colours = dict(zip(suites, PALETTE * (1 + len(suites) // len(PALETTE)), strict=False))
    for suite in suites:
        points = [(r.iteration, r.suites[suite]) for r in data.evals if suite in r.suites]
        x = [i for i, _ in points]
        y = [s.accuracy for _, s in points]
        low = [s.accuracy - s.ci[0] if s.ci else 0.0 for _, s in points]
        high = [s.ci[1] - s.accuracy if s.ci else 0.0 for _, s in points]
        low, high = [max(0.0, v) for v in low], [max(0.0, v) for v in high]
        ax.errorbar(
            x, y, yerr=[low, high], fmt="-o", ms=4, capsize=3, color=colours[suite], label=_label(suite)
        )
    _integer_ticks(ax, [r.iteration for r in data.evals if r.suites])
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("accuracy")
    ax.set_xlabel("iteration")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return figure
