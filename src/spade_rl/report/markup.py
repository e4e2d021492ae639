"""Untrusted text as HTML: escaping, cutting, and Python source with its syntax coloured.

    text("<script>")                   # '&lt;script&gt;'
    highlight_python("def f(): pass")  # '<span class="k">def</span> <span class="d">f</span>(): ...'

Every function here escapes all of its input (``html.escape`` with quotes) after dropping control
characters and replacing unpaired surrogates, so what a model wrote can only ever appear as text.
Colouring is lexing with ``tokenize``; nothing is executed.
"""

from __future__ import annotations

import html
import io
import keyword
import re
import tokenize

CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean(value: object) -> str:
    """Text that is safe to escape: unpaired surrogates replaced, control characters (but tab and
    newlines) removed."""
    text = value if isinstance(value, str) else str(value)
    text = text.encode("utf-8", "replace").decode("utf-8")
    return CONTROL.sub("", text)


def text(value: object) -> str:
    """Untrusted text as HTML: cleaned and escaped (``<``, ``>``, ``&``, both quotes)."""
    return html.escape(clean(value), quote=True)


def clip(value: object, limit: int) -> str:
    """Escaped text cut to ``limit`` characters, saying how much was left out."""
    raw = clean(value)
    if len(raw) <= limit:
        return html.escape(raw, quote=True)
    return (
        html.escape(raw[:limit], quote=True)
        + f'<span class="muted"> [... {len(raw) - limit} more characters]</span>'
    )


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def highlight_python(source: str) -> str:
    """Escaped Python source with keywords, strings, comments, numbers and defined names in spans.

    Lexing only (``tokenize``); nothing is executed. Source that does not tokenise is shown plain.
    Removing the tags and unescaping gives back exactly ``clean(source)``.
    """
    source = clean(source)
    starts, offset = [], 0
    for line in source.split("\n"):
        starts.append(offset)
        offset += len(line) + 1
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return html.escape(source, quote=True)
    out, position, previous = [], 0, ""
    for token in tokens:
        if token.type in (tokenize.ENDMARKER, tokenize.DEDENT) or token.start[0] > len(starts):
            continue
        begin = starts[token.start[0] - 1] + token.start[1]
        end = starts[token.end[0] - 1] + token.end[1] if token.end[0] <= len(starts) else len(source)
        if begin < position or end > len(source) or source[begin:end] != token.string:
            return html.escape(source, quote=True)  # positions disagree (odd line endings): plain text
        css = _token_class(token, previous)
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            previous = token.string
        out.append(html.escape(source[position:begin], quote=True))
        piece = html.escape(token.string, quote=True)
        out.append(f'<span class="{css}">{piece}</span>' if css and piece else piece)
        position = end
    out.append(html.escape(source[position:], quote=True))
    return "".join(out)


def _token_class(token: tokenize.TokenInfo, previous: str) -> str:
    if token.type == tokenize.COMMENT:
        return "c"
    if token.type == tokenize.STRING:
        return "s"
    if token.type == tokenize.NUMBER:
        return "n"
    if token.type == tokenize.NAME:
        if previous in ("def", "class"):
            return "d"
        if keyword.iskeyword(token.string):
            return "k"
    return ""
