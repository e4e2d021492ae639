"""The report page: one self-contained HTML file (inline CSS, figures as PNG data URIs, no URL).

    html_text = render_page(data, figures, pick_examples(data), pick_episodes(data))

Everything a model wrote (environment source, hints, rejection messages, transcripts) and everything
read from the run directory is untrusted text: it is only ever written through
:mod:`~spade_rl.report.markup` (``text``, ``clip``, ``highlight_python``), which HTML-escapes it.
A Content-Security-Policy in the page allows nothing but its own inline style and script (by hash)
and ``data:`` images, so even a mistake in escaping could not run a script or fetch anything. The
one script is the page's self-check: it records script errors, policy violations and whether every
figure decoded, into ``#page-check`` (shown in the footer, read by the tests through headless
Chromium).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

from spade_rl.report.data import EnvView, IterationRow, RunData
from spade_rl.report.evals import EvalRecord
from spade_rl.report.examples import Example, Phase
from spade_rl.report.figures import FigureImage
from spade_rl.report.markup import clip, fmt, highlight_python, text

MAX_SOURCE_CHARS = 40_000
MAX_MESSAGE_CHARS = 4_000
MAX_MESSAGES = 60

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:72rem;
padding:1rem 1.5rem;color:#222;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1.05rem;margin:.2rem 0}h4{margin:.8rem 0 .2rem;font-size:.95rem}
nav a{margin-right:1rem}table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.2rem .45rem;text-align:right;vertical-align:top}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.warn{background:#fff6e0;border:1px solid #f0c36d;padding:.5rem 1rem}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85rem;color:#555}.muted{color:#777}
.strip{display:flex;gap:1rem;overflow-x:auto;padding-bottom:.5rem;align-items:flex-start}
.card{flex:0 0 34rem;border:1px solid #ccc;border-radius:6px;padding:.6rem .8rem;background:#fcfcfc;
min-width:0}
.phase{font-size:.75rem;text-transform:uppercase;letter-spacing:.05em;color:#666}
.ok{color:#1a7f1a;font-weight:600}.bad{color:#b22;font-weight:600}
pre{background:#f6f8fa;border:1px solid #e4e4e4;padding:.5rem;overflow:auto;font-size:.78rem;
white-space:pre-wrap;word-break:break-word;max-height:32rem;margin:.2rem 0}
.code .k{color:#a626a4}.code .s{color:#50a14f}.code .c{color:#a0a1a7;font-style:italic}
.code .n{color:#986801}.code .d{color:#4078f2;font-weight:600}
.msg{margin:.3rem 0}.role{font-size:.75rem;font-weight:600;color:#555;text-transform:uppercase}
.hint{background:#eef6ff;border-left:3px solid #4a90d9;padding:.3rem .6rem;margin:.2rem 0;
white-space:pre-wrap}
dl{display:grid;grid-template-columns:max-content 1fr;gap:0 .8rem;font-size:.85rem;margin:.3rem 0}
dt{color:#666}dd{margin:0;overflow-wrap:anywhere}footer{margin-top:2rem;font-size:.8rem;color:#666}
"""

SCRIPT = """
(function () {
  "use strict";
  var problems = [], figures = [], loaded = false;
  function report() {
    if (!loaded) return;
    var out = document.getElementById("page-check");
    out.setAttribute("data-result", JSON.stringify({problems: problems, figures: figures}));
    out.textContent = problems.length ? "page check failed: " + problems.join("; ")
      : "page check: " + figures.length + " figures decoded, no script errors";
    document.documentElement.setAttribute("data-page-check", problems.length ? "failed" : "passed");
  }
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t !== window && t.tagName) {
      var what = t.getAttribute("data-figure") || "";
      problems.push("failed to load " + t.tagName.toLowerCase() + " " + what);
    } else {
      problems.push("script error: " + (e.message || "unknown"));
    }
    report();
  }, true);
  document.addEventListener("securitypolicyviolation", function (e) {
    problems.push("blocked by the content security policy: " + e.violatedDirective);
    report();
  });
  window.addEventListener("load", function () {
    var images = document.querySelectorAll("img[data-figure]");
    for (var i = 0; i < images.length; i++) {
      var img = images[i], name = img.getAttribute("data-figure");
      figures.push({name: name, width: img.naturalWidth, height: img.naturalHeight});
      if (!img.complete || img.naturalWidth === 0) problems.push("figure not decoded: " + name);
    }
    loaded = true;
    report();
  });
})();
"""


def _csp_hash(content: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(content.encode("utf-8")).digest()).decode() + "'"


CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; img-src data:; style-src {_csp_hash(CSS)}; script-src {_csp_hash(SCRIPT)}; "
    "base-uri 'none'; form-action 'none'"
)


# --- sections ----------------------------------------------------------------------------------------


def render_page(
    data: RunData,
    figures: list[FigureImage],
    examples: list[Example],
    episodes: list[tuple[Phase, dict[str, Any]]],
    *,
    generated_at: float | None = None,
) -> str:
    """The whole page as one string."""
    figure_map = {f.name: f for f in figures}
    sections = [
        ("summary", "Summary", _summary(data)),
        ("designer", "Designer", _figures(figure_map, "designer", "skills")),
        ("agent", "Agent and regret", _figures(figure_map, "agent", "frontier", "curriculum")),
        ("size", "Environment size and turns", _figures(figure_map, "size")),
        ("training", "Training", _figures(figure_map, "training")),
        ("evaluation", "Evaluation", _evaluation(data, figure_map)),
        ("filmstrip", "Example environments, early to late", _filmstrip(data, examples)),
        ("episodes", "Sampled episodes", _episodes(data, episodes)),
        ("iterations", "Iterations", _iteration_table(data)),
        ("config", "Run configuration", _config(data)),
    ]
    name = data.run_dir.resolve().name or str(data.run_dir)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(generated_at or time.time()))
    nav = "".join(f'<a href="#{key}">{title}</a>' for key, title, _ in sections)
    body = "".join(
        f'<section id="{key}"><h2>{title}</h2>{content}</section>' for key, title, content in sections
    )
    warnings = ""
    if data.warnings:
        items = "".join(f"<li>{text(w)}</li>" for w in data.warnings)
        title = "<strong>Notes on this run directory</strong>"
        warnings = f'<div class="warn" id="warnings">{title}<ul>{items}</ul></div>'
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>spade-rl report: {text(name)}</title>"
        f"<script>{SCRIPT}</script><style>{CSS}</style></head>\n<body>"
        f"<header><h1>spade-rl run report: {text(name)}</h1>"
        f'<p class="muted">{text(data.run_dir.resolve())}</p><nav>{nav}</nav></header>'
        f"{warnings}{body}"
        f'<footer>Written by spade-rl report at {text(stamp)}. <span id="page-check">page check: not run '
        "(the page's script did not run)</span></footer>\n</body></html>\n"
    )


def _summary(data: RunData) -> str:
    rows = data.rows
    designed = [e for e in data.envs if e.record.origin == "designer"]
    proposed = sum(r.proposed for r in rows)
    valid = sum(r.valid for r in rows)
    planned = data.planned_iterations
    model = _config_value(data.config, "policy", "model")
    setting = _config_value(data.config, "design", "setting")
    last = next((r for r in reversed(rows) if r.win_rate is not None), None)
    items = [
        (
            "iterations",
            f"{data.completed_iterations} finished" + (f" of {planned} planned" if planned else ""),
        ),
        ("model", text(model) if model else "the default model"),
        ("setting", text(setting) if setting else "-"),
        (
            "designer proposals",
            f"{proposed} ({valid} valid{f', {valid / proposed:.0%}' if proposed else ''})",
        ),
        (
            "distinct designer environments",
            f"{len(designed)} ({sum(e.record.valid for e in designed)} valid)",
        ),
        ("reference environments", str(len(data.references))),
        ("frontier", f"no-hint win rate in [{data.frontier[0]:g}, {data.frontier[1]:g}]"),
    ]
    if last is not None:
        items.append(
            (
                f"last play (iteration {last.iteration})",
                f"win rate {fmt(last.win_rate)} without hint, {fmt(last.win_rate_hint)} with; regret "
                f"{fmt(last.regret)}; {fmt(last.frontier_fraction)} on the frontier; "
                f"{last.envs_played} environments",
            )
        )
    if not rows:
        items.append(("note", "the run recorded no iteration yet"))
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _config_value(config: dict[str, Any] | None, section: str, key: str) -> object:
    part = (config or {}).get(section)
    return part.get(key) if isinstance(part, dict) else None


def _figure(figure: FigureImage) -> str:
    width, height = figure.size
    data = base64.b64encode(figure.png).decode("ascii")
    return (
        f'<figure><img data-figure="{text(figure.name)}" alt="{text(figure.title)}" width="{width}" '
        f'height="{height}" src="data:image/png;base64,{data}">'
        f"<figcaption><strong>{text(figure.title)}.</strong> {text(figure.caption)} "
        f'<span class="muted">({text(figure.name)}.png)</span></figcaption></figure>'
    )


def _figures(figure_map: dict[str, FigureImage], *names: str) -> str:
    return "".join(_figure(figure_map[n]) for n in names if n in figure_map)


def _evaluation(data: RunData, figure_map: dict[str, FigureImage]) -> str:
    records = [r for r in data.evals if r.suites]
    if not records:
        return (
            '<p class="muted">No evaluation results in this run (eval/iter-NNNN.json or eval/ metrics).</p>'
        )
    latest = records[-1]
    head = (
        f"<p>Latest evaluation: after iteration {latest.iteration} ({text(latest.source)})"
        + (f", model {text(latest.model)}" if latest.model else "")
        + ".</p>"
    )
    return head + _eval_table(latest) + _figures(figure_map, "evaluation") + _eval_history(records)


def _eval_table(record: EvalRecord) -> str:
    rows = []
    for s in record.suites.values():
        ci = f"[{s.ci[0]:.3f}, {s.ci[1]:.3f}]" if s.ci else "-"
        extras = ", ".join(f"{text(k)} {v:.3g}" for k, v in sorted(s.extras.items())[:8])
        rows.append(
            f'<tr><td class="l">{text(s.suite)}</td><td class="l">{text(s.version) or "-"}</td>'
            f"<td>{fmt(s.accuracy, '.3f')}</td><td>{ci}</td><td>{'-' if s.n is None else s.n}</td>"
            f'<td class="l">{extras or "-"}</td></tr>'
        )
    return (
        '<table><tr><th class="l">suite</th><th class="l">version</th><th>accuracy</th><th>95% interval</th>'
        f'<th>items</th><th class="l">other metrics</th></tr>{"".join(rows)}</table>'
    )


def _eval_history(records: list[EvalRecord]) -> str:
    if len(records) < 2:
        return ""
    suites = sorted({s for r in records for s in r.suites})
    head = "".join(f"<th>{text(s)}</th>" for s in suites)
    body = "".join(
        f"<tr><td>{r.iteration}</td>"
        + "".join(f"<td>{fmt(r.suites[s].accuracy, '.3f') if s in r.suites else '-'}</td>" for s in suites)
        + "</tr>"
        for r in records
    )
    return f"<h4>Accuracy by iteration</h4><table><tr><th>iteration</th>{head}</tr>{body}</table>"


def _stats_table(env: EnvView) -> str:
    if not env.history:
        return (
            '<p class="muted">Not played.</p>'
            if env.record.valid
            else '<p class="muted">Not played (rejected).</p>'
        )
    rows = "".join(
        f"<tr><td>{h.iteration}</td><td>{h.stats.episodes_nohint}+{h.stats.episodes_hint}</td>"
        f"<td>{h.stats.win_rate_nohint:.2f}</td><td>{h.stats.win_rate_hint:.2f}</td>"
        f"<td>{h.stats.regret:.2f}</td><td>{h.stats.mean_turns:.1f}</td></tr>"
        for h in env.history
    )
    return (
        "<table><tr><th>iteration</th><th>episodes</th><th>win</th><th>win + hint</th><th>regret</th>"
        f"<th>turns</th></tr>{rows}</table>"
    )


def _transcript(transcript: dict[str, Any]) -> str:
    messages = transcript.get("messages") or []
    shown = messages[:MAX_MESSAGES]
    parts = [
        f'<div class="msg"><div class="role">{text(m.get("role", "?"))}</div>'
        f"<pre>{clip(m.get('content', ''), MAX_MESSAGE_CHARS)}</pre></div>"
        for m in shown
    ]
    if len(messages) > len(shown):
        parts.append(f'<p class="muted">[... {len(messages) - len(shown)} more messages]</p>')
    return "".join(parts)


def _transcript_title(transcript: dict[str, Any]) -> str:
    value = transcript.get("return")
    ret = format(value, ".2f") if type(value) in (int, float) else "?"
    title = (
        f"iteration {transcript['iteration']}, {'with' if transcript.get('hint') is True else 'without'} "
        f"hint, return {ret}, ended: {text(transcript.get('stop_reason') or '?')}"
    )
    if transcript.get("error"):
        title += f" ({clip(transcript['error'], 200)})"
    return title


def _card(data: RunData, example: Example) -> str:
    r = example.env.record
    verdict = (
        '<span class="ok">valid</span>'
        if r.valid
        else f'<span class="bad">rejected: {text(r.reason)}</span>'
        + (f"<pre>{clip(r.message, 1500)}</pre>" if r.message else "")
    )
    facts = [
        ("skill", text(r.skill)),
        ("setting", text(r.setting)),
        ("document", text(r.document_id) if r.document_id else "-"),
        ("memory shown", ", ".join(str(p) for p in r.parents) or "-"),
        ("proposed", f"{r.times_proposed} time(s)"),
        ("size", f"{example.env.lines} lines, {example.env.chars} characters"),
    ]
    hint = (
        f'<div class="hint">{clip(r.hint, 2000)}</div>'
        if r.hint.strip()
        else '<p class="muted">(no hint)</p>'
    )
    if example.transcript is not None:
        transcript = (
            f"<details><summary>Transcript: {_transcript_title(example.transcript)}</summary>"
            f"{_transcript(example.transcript)}</details>"
        )
    else:
        transcript = '<p class="muted">No episode of this environment was sampled into transcripts.jsonl.</p>'
    return (
        f'<article class="card" id="env-{r.env_id}"><div class="phase">{text(example.phase.label)}</div>'
        f"<h3>environment {r.env_id}: <code>{text(r.class_name or '?')}</code> (iteration {r.iteration})</h3>"
        f"<p>{verdict}</p><dl>{''.join(f'<dt>{k}</dt><dd>{v}</dd>' for k, v in facts)}</dl>"
        f"<h4>Hint</h4>{hint}<h4>Play</h4>{_stats_table(example.env)}"
        f"<details open><summary>Source</summary>"
        f'<pre class="code">{highlight_python(_clip_raw(r.source, MAX_SOURCE_CHARS))}</pre></details>'
        f"<h4>Episode</h4>{transcript}</article>"
    )


def _clip_raw(source: str, limit: int) -> str:
    if len(source) <= limit:
        return source
    return source[:limit] + f"\n# [... {len(source) - limit} more characters not shown]"


def _filmstrip(data: RunData, examples: list[Example]) -> str:
    if not examples:
        if not data.has_archive:
            return '<p class="muted">No archive.sqlite: no environment to show.</p>'
        return '<p class="muted">The designer proposed no environment in this run.</p>'
    note = ""
    if not any(e.record.valid for e in data.envs if e.record.origin == "designer"):
        note = (
            '<p class="warn">The designer wrote no valid environment in this run: the examples below are '
            "rejected proposals, with the check that failed.</p>"
        )
    return note + '<div class="strip">' + "".join(_card(data, ex) for ex in examples) + "</div>"


def _episodes(data: RunData, episodes: list[tuple[Phase, dict[str, Any]]]) -> str:
    if not episodes:
        return '<p class="muted">No transcripts.jsonl entries.</p>'
    names = {e.record.env_id: e.record for e in data.envs + data.references}
    parts = []
    for phase, t in episodes:
        record = names.get(t.get("env_id"))  # type: ignore[arg-type]
        what = (
            f"environment {t.get('env_id')}"
            + (f" <code>{text(record.class_name)}</code> ({text(record.origin)})" if record else "")
            if type(t.get("env_id")) is int
            else "an environment"
        )
        parts.append(
            f'<details><summary><span class="phase">{text(phase.label)}</span> {what}: '
            f"{_transcript_title(t)}</summary>{_transcript(t)}</details>"
        )
    return "".join(parts)


def _iteration_table(data: RunData) -> str:
    if not data.rows:
        return '<p class="muted">No iteration recorded.</p>'
    head = (
        "iteration", "status", "proposed", "valid rate", "verdicts", "envs played", "win", "win + hint",
        "regret", "on frontier", "turns", "new env lines", "loss", "designer reward", "gamed", "seconds",
    )  # fmt: skip
    body = "".join(_iteration_row(r) for r in data.rows)
    header = "".join(f"<th{' class=l' if h in ('verdicts', 'status') else ''}>{h}</th>" for h in head)
    return f"<table><tr>{header}</tr>{body}</table>"


def _gamed(r: IterationRow) -> str:
    """The gaming gauge (designer/gauge.py): won designs a gate refuses on revalidation, of those won; "-"
    where it was not measured. Above 0 it is marked: the designer is paid for what a gate catches."""
    won, refused = r.metric("designer/won_designs"), r.metric("designer/gaming_refused")
    if won is None or refused is None:
        return "-"
    cell = f"{refused:.0f}/{won:.0f}"
    return f'<span class="bad">{cell}</span>' if refused > 0 else cell


def _iteration_row(r: IterationRow) -> str:
    verdicts = ", ".join(f"{text(k)} {v}" for k, v in r.reasons.items()) or "-"
    cells = [
        str(r.iteration),
        "finished" if r.complete else '<span class="bad">interrupted</span>',
        str(r.proposed),
        fmt(r.valid_rate),
        verdicts,
        str(r.envs_played),
        fmt(r.win_rate),
        fmt(r.win_rate_hint),
        fmt(r.regret),
        fmt(r.frontier_fraction),
        fmt(r.mean_turns, ".1f"),
        fmt(r.source_lines, ".0f"),
        fmt(r.metric("train/loss"), ".4g"),
        fmt(r.metric("designer/reward_mean"), ".3f"),
        _gamed(r),
        fmt(r.metric("time/iteration_s"), ".0f"),
    ]
    return (
        "<tr>"
        + "".join(f"<td{' class=l' if i in (1, 4) else ''}>{c}</td>" for i, c in enumerate(cells))
        + "</tr>"
    )


def _config(data: RunData) -> str:
    if data.config is None:
        return '<p class="muted">No readable config.json.</p>'
    return (
        "<details><summary>config.json (the resolved configuration)</summary>"
        f"<pre>{text(json.dumps(data.config, indent=2, sort_keys=False))}</pre></details>"
    )
