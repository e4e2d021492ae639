"""Write the report of a run directory: ``RUN_DIR/report/index.html`` and the PNG figures beside it.

    result = build_report(Path("runs/demo"))
    print(result.index, [p.name for p in result.figures])

The page embeds every figure, so ``index.html`` alone is the whole report; the PNG files are for
papers and slides. Files are written through temporary names and renamed, so a reader never sees
half a page; figures of an earlier report that this one no longer draws are removed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from spade_rl.report.data import ReportError, load_run
from spade_rl.report.examples import pick_episodes, pick_examples
from spade_rl.report.figures import FIGURE_NAMES, make_figures
from spade_rl.report.page import render_page


@dataclass(frozen=True)
class ReportResult:
    index: Path
    figures: list[Path]
    warnings: list[str] = field(default_factory=list)


def build_report(
    run_dir: Path, out_dir: Path | None = None, *, examples: int = 3, episodes: int = 3
) -> ReportResult:
    """Read ``run_dir`` and write its report into ``out_dir`` (default ``run_dir/report``).

    :class:`ReportError` when ``run_dir`` is not a run directory or a count is not allowed.
    """
    for name, value in (("examples", examples), ("episodes", episodes)):
        if type(value) is not int or value < 0:
            raise ReportError(f"{name} must be an integer >= 0, got {value!r}")
    data = load_run(Path(run_dir))
    out_dir = Path(out_dir) if out_dir is not None else data.run_dir / "report"
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportError(f"{out_dir} is a file; the report needs a folder to write index.html into")
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = make_figures(data)
    page = render_page(data, figures, pick_examples(data, examples), pick_episodes(data, episodes))
    written = []
    for figure in figures:
        path = out_dir / f"{figure.name}.png"
        _write(path, figure.png)
        written.append(path)
    drawn = {f.name for f in figures}
    for stale in FIGURE_NAMES:
        if stale not in drawn:
            (out_dir / f"{stale}.png").unlink(missing_ok=True)
    index = out_dir / "index.html"
    _write(index, page.encode("utf-8"))
    return ReportResult(index, written, list(data.warnings))


def _write(path: Path, content: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(content)
    tmp.replace(path)
