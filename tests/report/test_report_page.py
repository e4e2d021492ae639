"""The page: model-written text is escaped everywhere, nothing is fetched, figures are embedded."""

from __future__ import annotations

import base64
import html
import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_helpers import IMG_XSS, XSS, env_source, metrics_line, stats

from spade_rl.report import build_report
from spade_rl.report.markup import clean, clip, highlight_python, text
from spade_rl.report.page import CONTENT_SECURITY_POLICY


class Elements(HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def elements(page: str) -> list[tuple[str, dict]]:
    parser = Elements()
    parser.feed(page)
    return parser.tags


def hostile_run(hand_run):
    """One iteration whose every model-written field tries to inject markup."""
    run = hand_run().config(iterations=1)
    source = env_source("Evil") + f"# {XSS}\nBANNER = '{IMG_XSS}'\n"
    env = run.design(source, 1, hint=f"Think. {XSS}", class_name="EvilEnv")
    run.design(env_source("Broken") + f"# {XSS}", 1, reason="timeout", message=f"hung {IMG_XSS}")
    run.play(env, 1, stats(0.5, 1.0))
    run.transcript(1, env, f"my answer {XSS} {IMG_XSS} \x00\x07 \ud800 done")
    run.metrics(metrics_line(1))
    return run


def test_model_written_text_is_shown_as_text_never_as_markup(hand_run):
    run = hostile_run(hand_run)
    result = build_report(run.path)
    page = result.index.read_text(encoding="utf-8")
    tags = elements(page)
    assert [t for t, _ in tags].count("script") == 1  # the page's own self-check, nothing else
    assert not any(t == "img" and "onerror" in attrs for t, attrs in tags)
    assert all(not name.startswith("on") for _, attrs in tags for name in attrs)
    assert "<script>document" not in page and "<img src=x" not in page
    escaped = html.escape(XSS, quote=True)
    assert page.count(escaped) >= 4  # source, hint, transcript, rejected source
    assert html.escape(f"hung {IMG_XSS}", quote=True) in page  # the rejection message
    assert "\x00" not in page and "\x07" not in page
    assert "my answer" in page and "? done" in page  # the lone surrogate is replaced, not fatal


def test_the_page_reaches_nothing_outside_itself(hand_run):
    page = build_report(hostile_run(hand_run).path).index.read_text(encoding="utf-8")
    for tag, attrs in elements(page):
        for name in ("src", "href", "srcset", "action", "poster", "data"):
            value = attrs.get(name)
            if value is None:
                continue
            assert value.startswith(("data:image/png;base64,", "#")), (tag, name, value[:80])
    assert "url(" not in page.split("</style>")[0]  # the stylesheet loads nothing
    assert "@import" not in page
    assert CONTENT_SECURITY_POLICY in html.unescape(page)
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY and "img-src data:" in CONTENT_SECURITY_POLICY


def test_figures_are_written_beside_the_page_and_embedded_in_it(hand_run):
    run = hostile_run(hand_run)
    result = build_report(run.path)
    page = result.index.read_text(encoding="utf-8")
    names = [p.stem for p in result.figures]
    assert names == ["designer", "agent", "frontier", "curriculum", "size", "skills", "training"]
    images = {attrs["data-figure"]: attrs for tag, attrs in elements(page) if tag == "img"}
    assert list(images) == ["designer", "skills", "agent", "frontier", "curriculum", "size", "training"]
    for path in result.figures:
        png = path.read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        embedded = images[path.stem]["src"].removeprefix("data:image/png;base64,")
        assert base64.b64decode(embedded) == png
        assert int(images[path.stem]["width"]) == int.from_bytes(png[16:20], "big")
    assert result.index == run.path / "report" / "index.html"


def test_the_curriculum_figure_draws_the_new_designs_probes_and_format(hand_run):
    """Issue 40's metrics as curves: a run that records them gets a taller-than-empty figure whose caption
    names the keys; a run of an earlier release gets the figure saying they were not recorded."""
    from spade_rl.report.data import load_run
    from spade_rl.report.figures import make_figures

    extra = {
        "designer/band_fraction": 0.25,
        "designer/new_win_rate": 0.1,
        "probe/designs": 4.0,
        "probe/promoted": 1.0,
        "pool/retired": 2.0,
        "pool/groups": 3.0,
        "format/malformed": 0.2,
        "format/illegal": 0.1,
        "format/maze/malformed": 0.5,
        "format/maze/illegal": 0.3,
    }
    run = hand_run().config(iterations=2)
    run.metrics(metrics_line(1, **extra), metrics_line(2, **{**extra, "designer/band_fraction": 0.5}))
    drawn = {f.name: f for f in make_figures(load_run(run.path))}["curriculum"]
    assert "designer/band_fraction" in drawn.caption and "designer/new_win_rate" in drawn.caption
    old = hand_run("old").config(iterations=2)
    old.metrics(metrics_line(1), metrics_line(2))
    blank = {f.name: f for f in make_figures(load_run(old.path))}["curriculum"]
    assert drawn.size[0] == blank.size[0] == 800 and drawn.png != blank.png
    page = build_report(run.path).index.read_text(encoding="utf-8")
    assert 'data-figure="curriculum"' in page


def test_evaluation_results_get_a_section_a_table_and_a_figure(hand_run):
    run = hostile_run(hand_run)
    items = [{"id": str(i), "correct": i == 0} for i in range(4)]
    run.eval_file(1, {"model": "tiny", "suites": {f"rg{XSS}": {"version": "v<b>1</b>", "items": items}}})
    result = build_report(run.path)
    assert (run.path / "report" / "evaluation.png").exists()
    page = result.index.read_text(encoding="utf-8")
    section = page.split('<section id="evaluation">')[1].split("</section>")[0]
    assert "0.250" in section and "[0.046, 0.699]" in section  # 1 of 4, Wilson interval
    assert html.escape(f"rg{XSS}") in section and "v&lt;b&gt;1&lt;/b&gt;" in section
    run.path.joinpath("eval", "iter-0001.json").unlink()
    build_report(run.path)
    assert not (run.path / "report" / "evaluation.png").exists()  # a stale figure is removed


def test_a_run_without_valid_environments_says_so_and_shows_rejections(hand_run):
    run = hand_run().config(iterations=2)
    for i in (1, 2):
        run.design(env_source(f"Bad{i}"), i, reason="syntax_error", message=f"syntax error at line {i}")
    run.metrics(metrics_line(1), metrics_line(2))
    page = build_report(run.path).index.read_text(encoding="utf-8")
    assert "The designer wrote no valid environment in this run" in page
    assert page.count('<article class="card"') == 2 and "rejected: syntax_error" in page
    assert "syntax error at line 2" in page


def test_a_killed_run_reports_what_it_has(hand_run):
    run = hand_run().config(iterations=3)
    for i in (1, 2):
        env = run.design(env_source(f"E{i}"), i)
        run.play(env, i, stats(0.5, 0.75))
    run.metrics(metrics_line(1), raw_tail='{"iteration": 2, "agent/win')
    result = build_report(run.path)
    page = result.index.read_text(encoding="utf-8")
    assert "1 finished of 3 planned" in page and "interrupted" in page
    assert any("not complete JSON" in w for w in result.warnings)
    assert len(result.figures) == 7


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def f(self):\n        return 'x<y>' # c & d\n",
        "x = '''multi\nline <b>'''\ny = 1_000 + 0x1F\n",
        "def broken(:\n    pass\n",  # does not tokenise cleanly: shown plain
        "s = 'unterminated\n",
        "a = 1\r\nb = 2\r\n",
        "",
        "\tif x:\n\t\ty = f'{x!r}'  # tabs\n",
    ],
)
def test_highlighting_keeps_the_source_exactly(source):
    out = highlight_python(source)
    assert html.unescape(re.sub(r"<[^>]+>", "", out)) == clean(source)
    assert "<script" not in out


def test_highlighting_marks_keywords_strings_comments_and_names():
    out = highlight_python("def go(x):\n    return 'a'  # c\n")
    assert '<span class="k">def</span> <span class="d">go</span>' in out
    assert '<span class="s">&#x27;a&#x27;</span>' in out and '<span class="c"># c</span>' in out


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abc def():=\n \t'\"#<>&\\0123{}[]\r")), max_size=80))
def test_highlighting_round_trips_any_text(source):
    out = highlight_python(source)
    assert html.unescape(re.sub(r"<[^>]+>", "", out)) == clean(source)


def test_clip_and_text_escape_and_cut():
    assert text("<a href='x'>") == "&lt;a href=&#x27;x&#x27;&gt;"
    assert clip("<" * 10, 3) == '&lt;&lt;&lt;<span class="muted"> [... 7 more characters]</span>'
    assert clean("a\x00b\x1bc\td\ne\ud800") == "abc\td\ne?"
