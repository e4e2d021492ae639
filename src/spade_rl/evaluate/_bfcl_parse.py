"""Tool calls in a model's text, in this project's convention: ``<tool_call>{json}</tool_call>``.

    parsed = parse_tool_calls('<tool_call>{"name": "ls", "arguments": {"a": true}}</tool_call>')
    parsed.calls, parsed.error          # [("ls", {"a": True})], ""

Each ``<tool_call>`` block holds one JSON object ``{"name": str, "arguments": {...}}`` (``"parameters"``
is accepted for ``"arguments"``, a JSON-encoded string of the arguments too, a missing one means no
arguments) or a JSON list of such objects; a block may sit in a code fence; the last block may lack
its closing tag (the model stopped right after the JSON). Text outside the blocks is ignored.

As in BFCL's own decoders, the text decodes as a whole or not at all: one malformed block makes
``error`` say why and ``calls`` empty. Text without any block decodes to no calls. Parsing never
raises and takes time linear in the text; at most ``MAX_CALLS`` calls decode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
MAX_CALLS = 64  # more calls than this in one message is not an answer, it is a flood


@dataclass(frozen=True)
class ParsedCalls:
    calls: list[tuple[str, dict]] = field(default_factory=list)  # (name, arguments), in order
    error: str = ""  # why the text does not decode; "" when it does
    blocks: int = 0  # <tool_call> blocks found

    @property
    def ok(self) -> bool:
        return not self.error


def tool_call_blocks(text: str) -> list[str]:
    """The contents of every ``<tool_call>`` block, in order (the last one may be unclosed)."""
    blocks = []
    position = 0
    close = text.find(CLOSE)  # the first closing tag at or after `position` (-1: none left)
    while True:
        start = text.find(OPEN, position)
        if start < 0:
            return blocks
        start += len(OPEN)
        if 0 <= close < start:
            close = text.find(CLOSE, start)
        following = text.find(OPEN, start)
        if close < 0 or 0 <= following < close:
            # Unclosed: this block runs to the next opening tag, or to the end of the text.
            end = following if following >= 0 else len(text)
            blocks.append(text[start:end])
            position = end
        else:
            blocks.append(text[start:close])
            position = close + len(CLOSE)


def parse_tool_calls(text: str) -> ParsedCalls:
    """Every tool call in ``text``; see the module docstring for the format and the failure rules."""
    if not isinstance(text, str):
        return ParsedCalls(error=f"the response is not text but {type(text).__name__}")
    blocks = tool_call_blocks(text)
    calls: list[tuple[str, dict]] = []
    for number, block in enumerate(blocks, 1):
        content = _unfence(block.strip())
        try:
            value = json.loads(content)
        except (ValueError, RecursionError) as exc:
            return ParsedCalls(error=f"tool call {number} is not JSON: {_short(exc)}", blocks=len(blocks))
        for item in value if isinstance(value, list) else [value]:
            call, error = _one_call(item)
            if error:
                return ParsedCalls(error=f"tool call {number}: {error}", blocks=len(blocks))
            calls.append(call)
            if len(calls) > MAX_CALLS:
                return ParsedCalls(
                    error=f"more than {MAX_CALLS} tool calls in one message", blocks=len(blocks)
                )
    return ParsedCalls(calls=calls, blocks=len(blocks))


def _one_call(item: object) -> tuple[tuple[str, dict], str]:
    none: tuple[str, dict] = ("", {})
    if not isinstance(item, dict):
        return none, f'expected an object {{"name": ..., "arguments": {{...}}}}, got {type(item).__name__}'
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        return none, 'the "name" must be a non-empty string'
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's wire format: the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            return none, f'the "arguments" string is not JSON: {_short(exc)}'
    if not isinstance(arguments, dict):
        return none, f'the "arguments" must be an object, got {type(arguments).__name__}'
    return (name.strip(), arguments), ""


def _unfence(content: str) -> str:
    """The inside of a code fence (```json ... ```), or ``content`` unchanged."""
    if len(content) >= 6 and content.startswith("```") and content.endswith("```"):
        newline = content.find("\n")
        if 0 <= newline < len(content) - 3:
            return content[newline + 1 : -3].strip()
    return content


def _short(exc: BaseException) -> str:
    return str(exc)[:200]
