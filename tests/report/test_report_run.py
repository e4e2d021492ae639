"""The report of a real short run, the command line, and the page in headless Chromium.

Chromium is the Debian package ``chromium`` (.ci/run installs it); without it the browser tests are
skipped with that reason. Each browser test reads the page's own self-check from the DOM Chromium
dumps after loading the file with no network.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from report_helpers import XSS, env_source, metrics_line, stats

from spade_rl.report import build_report, load_run
from spade_rl.report.browser import BrowserError, check_page, find_chromium

pytestmark = pytest.mark.slow
needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="headless Chromium is not installed (Debian package `chromium`; .ci/run installs it)",
)
FIGURES = ["designer", "agent", "frontier", "curriculum", "size", "skills", "training"]


def spade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spade_rl", *args], capture_output=True, text=True, timeout=300
    )


class DomFacts(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts = 0
        self.pwned: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"
        self.pwned += [v for k, v in attrs if k == "data-pwned"]

    def handle_data(self, data):
        self.text.append(data)


def test_report_numbers_agree_with_the_loops_own_metrics(real_run):
    data = load_run(real_run)
    lines = [json.loads(line) for line in (real_run / "metrics.jsonl").read_text().splitlines()]
    assert [row.iteration for row in data.rows] == [line["iteration"] for line in lines] == [1, 2, 3]
    assert [row.reasons for row in data.rows] == [
        {"ok": 1, "timeout": 1},
        {"ok": 1, "syntax_error": 1},
        {"ok": 1, "no_code_block": 1},
    ]
    for row, line in zip(data.rows, lines, strict=True):
        assert row.complete and row.reasons == line["designer/reasons"]
        assert row.proposed == line["designer/proposed"] and row.envs_played == line["agent/envs"]
        assert row.valid_rate == pytest.approx(line["designer/valid_rate"])
        for mine, key in (
            (row.win_rate, "agent/win_rate"),
            (row.win_rate_hint, "agent/win_rate_hint"),
            (row.regret, "regret/mean"),
            (row.frontier_fraction, "frontier/fraction"),
            (row.mean_turns, "agent/mean_turns"),
        ):
            assert mine == pytest.approx(line[key]), key
    assert data.warnings == []


def test_the_filmstrip_goes_from_early_to_late_with_escaped_transcripts(real_run_copy):
    result = build_report(real_run_copy)
    page = result.index.read_text(encoding="utf-8")
    data = load_run(real_run_copy)
    designed = {e.record.class_name: e.record.iteration for e in data.envs if e.record.valid}
    assert designed == {"ParityEnv": 1, "ParityTwoEnv": 2, "ParityThreeEnv": 3}
    strip = page.split('<section id="filmstrip">')[1].split("</section>")[0]
    assert strip.count('<article class="card"') == 3
    for phase in ("early (iteration 1)", "middle (iteration 2)", "late (iteration 3)"):
        assert phase in strip
    assert strip.index("ParityEnv") < strip.index("ParityTwoEnv") < strip.index("ParityThreeEnv")
    assert strip.count("Transcript: iteration") == 3  # every new design was played and sampled
    assert "<script>document" not in page


def test_the_command_writes_the_report_and_refuses_what_is_not_a_run(real_run_copy, tmp_path):
    done = spade("report", str(real_run_copy))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"report: {real_run_copy / 'report' / 'index.html'}" in done.stdout.replace("\n", "")
    assert sorted(p.stem for p in (real_run_copy / "report").glob("*.png")) == sorted(FIGURES)
    missing = spade("report", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no run directory at" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = spade("report", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "is not a run directory" in empty.stderr


@needs_chromium
def test_the_real_runs_report_loads_in_chromium_with_every_figure_and_no_script(real_run_copy):
    items = [{"id": str(i), "correct": i < 2, "score": float(i < 2)} for i in range(5)]
    (real_run_copy / "eval").mkdir()
    (real_run_copy / "eval" / "iter-0002.json").write_text(
        json.dumps({"model": "tiny", "suites": {"envs": {"suite": "envs", "version": "1", "items": items}}})
    )
    done = spade("report", str(real_run_copy), "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "page check: 8 figures decoded in Chromium, no script errors" in done.stdout
    check = check_page(real_run_copy / "report" / "index.html")
    assert check.passed and check.problems == []
    pngs = {p.stem: p.read_bytes() for p in (real_run_copy / "report").glob("*.png")}
    assert sorted(pngs) == sorted([*FIGURES, "evaluation"])
    decoded = {f["name"]: (f["width"], f["height"]) for f in check.figures}
    assert decoded == {
        name: (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"))
        for name, png in pngs.items()
    }
    facts = DomFacts()
    facts.feed(check.dom)
    assert facts.scripts == 1 and facts.pwned == []  # the injected scripts neither ran nor became elements
    shown = "".join(facts.text)
    assert shown.count(XSS) >= 3  # source, hint and the transcript's observation, shown as text


@needs_chromium
@pytest.mark.parametrize("case", ["one_iteration", "no_valid", "killed", "metrics_only"])
def test_edge_case_reports_load_in_chromium(hand_run, case):
    run = hand_run()
    if case != "metrics_only":
        run.config(iterations=3)
        ref = run.reference(env_source("Guess"))
    if case == "one_iteration":
        env = run.design(env_source("A"), 1, hint=XSS)
        run.play(env, 1, stats(0.5, 1.0))
        run.transcript(1, env, XSS)
        run.metrics(metrics_line(1))
    elif case == "no_valid":
        for i in (1, 2):
            run.design(env_source(f"Bad{i}"), i, reason="timeout")
            run.play(ref, i, stats(1.0, 1.0))
        run.metrics(metrics_line(1), metrics_line(2))
    elif case == "killed":
        env = run.design(env_source("A"), 1)
        run.play(env, 1, stats(0.5, 1.0))
        run.design(env_source("B"), 2)
        run.metrics(metrics_line(1), raw_tail='{"iteration": 2')
    else:
        run.metrics(metrics_line(1), metrics_line(2, **{"eval/humaneval/accuracy": 0.5}))
    build_report(run.path)
    check = check_page(run.path / "report" / "index.html")
    assert check.passed, check.problems
    expected = FIGURES + (["evaluation"] if case == "metrics_only" else [])
    assert sorted(f["name"] for f in check.figures) == sorted(expected)
    assert all(f["width"] == 800 and f["height"] > 0 for f in check.figures)


@needs_chromium
def test_the_browser_check_catches_a_script_a_broken_figure_and_a_fetch(hand_run):
    """The self-check is only worth something if it fails: three broken copies of a good page."""
    run = hand_run().config(iterations=1)
    env = run.design(env_source("A"), 1)
    run.play(env, 1, stats(0.5, 1.0))
    run.metrics(metrics_line(1))
    page = build_report(run.path).index.read_text(encoding="utf-8")
    broken_png = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really a png").decode()
    first_png = page.index("data:image/png;base64,") + len("data:image/png;base64,")
    end_png = page.index('"', first_png)
    variants = {
        "script": (page.replace("</footer>", f"{XSS}</footer>"), "content security policy"),
        "figure": (page[:first_png] + broken_png + page[end_png:], "designer"),
        "fetch": (page.replace("</footer>", '<img src="https://example.invalid/x.png"></footer>'), "img"),
    }
    for name, (variant, expected) in variants.items():
        path = run.path / "report" / f"{name}.html"
        path.write_text(variant, encoding="utf-8")
        check = check_page(path)
        assert not check.passed, name
        assert any(expected in problem for problem in check.problems), (name, check.problems)


def test_check_page_says_what_is_missing(tmp_path, monkeypatch):
    import spade_rl.report.browser as browser

    with pytest.raises(BrowserError, match="no page at"):
        check_page(tmp_path / "none.html")
    (tmp_path / "p.html").write_text("<html></html>")
    monkeypatch.setattr(browser, "BROWSERS", ("no-such-browser-binary",))
    with pytest.raises(BrowserError, match="no Chromium found"):
        check_page(tmp_path / "p.html")
