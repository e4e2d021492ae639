"""A self-contained HTML report of a self-play run, with PNG figures: ``spade-rl report RUN_DIR``.

    from spade_rl.report import build_report
    result = build_report(Path("runs/demo"))  # runs/demo/report/index.html and *.png

- :mod:`~spade_rl.report.data`: the run directory read into per-iteration rows (archive first,
  ``metrics.jsonl`` for the rest), tolerating killed runs;
- :mod:`~spade_rl.report.evals`: in-loop evaluation results (``eval/iter-NNNN.json``), read defensively;
- :mod:`~spade_rl.report.figures`: the matplotlib figures (needs the ``report`` extra);
- :mod:`~spade_rl.report.examples`: the filmstrip of example environments and episodes;
- :mod:`~spade_rl.report.markup`: escaping untrusted text, Python source with its syntax coloured;
- :mod:`~spade_rl.report.page`: the HTML page (its Content-Security-Policy and self-check);
- :mod:`~spade_rl.report.build`: writing ``index.html`` and the figures;
- :mod:`~spade_rl.report.browser`: checking the page in headless Chromium.
"""

from spade_rl.report.build import ReportResult, build_report
from spade_rl.report.data import ReportError, RunData, load_run

__all__ = ["ReportError", "ReportResult", "RunData", "build_report", "load_run"]
