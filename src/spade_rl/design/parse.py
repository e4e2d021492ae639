"""Parse what the designer wrote into (environment source, hint), with typed failures.

The designer is asked for one fenced Python code block holding the environment and a hint between
``<hint>`` and ``</hint>`` tags (or, in the two-call mode, only the code; the hint comes from a second
call parsed by ``parse_hint``). Parsing never raises: every outcome is a ``Parsed`` with ``reason``:

- ``ok``;
- ``truncated``: the generation hit its token limit before the code block or the hint was complete;
- ``no_code_block``: no fenced block, and the text itself is not an environment;
- ``multiple_env_classes``: more than one distinct ``*Env`` class across the blocks;
- ``no_env_class``: code, but no ``*Env`` class in it;
- ``syntax_error``: the chosen block does not parse;
- ``missing_hint`` / ``hint_too_long``: no hint, or more than ``HintRules.max_words`` words or
  ``HintRules.max_sentences`` sentences.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from spade_rl.envs.contract import ENV_CLASS_SUFFIX

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_HINT_TAG = re.compile(r"<hint>(.*?)(</hint>|\Z)", re.S | re.I)
_HINT_LINE = re.compile(r"^\s*(?:\*\*)?hint(?:\*\*)?\s*:\s*(.+)$", re.I | re.M)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")


@dataclass(frozen=True)
class Parsed:
    reason: str  # "ok" or the failure code
    source: str = ""
    hint: str = ""
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


@dataclass(frozen=True)
class HintRules:
    """What a hint may be: the designer's prompt states these limits and the parser enforces them (both
    read this one object: ``design.prompt.hint`` in a run's config)."""

    max_words: int = 100
    max_sentences: int = 3

    def __post_init__(self) -> None:
        for name in ("max_words", "max_sentences"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"hint {name} must be a whole number of at least 1, got {value!r}")

    def describe(self) -> str:
        """The limits as the prompt states them: "1-3 sentences, at most 100 words"."""
        sentences = "1 sentence" if self.max_sentences == 1 else f"1-{self.max_sentences} sentences"
        return f"{sentences}, at most {self.max_words} words"


def _env_classes(code: str) -> list[str] | None:
    """Names of top-level ``*Env`` classes, or None when the code does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith(ENV_CLASS_SUFFIX)]


def _mentions_env_class(code: str) -> bool:
    return re.search(r"^class\s+\w*" + ENV_CLASS_SUFFIX + r"\b", code, re.M) is not None


def _blocks(text: str) -> list[tuple[str, bool]]:
    """Fenced blocks as (code, closed)."""
    blocks = []
    for match in _FENCE.finditer(text):
        closed = text.startswith("```", match.end() - 3) and match.end() - 3 >= match.start(2)
        blocks.append((match.group(2), closed))
    return blocks


def check_hint(hint: str, rules: HintRules = HintRules()) -> Parsed:
    hint = " ".join(hint.split())
    if not hint:
        return Parsed("missing_hint", message="the hint is empty")
    words = len(hint.split())
    if words > rules.max_words:
        return Parsed(
            "hint_too_long", hint=hint, message=f"the hint has {words} words; at most {rules.max_words}"
        )
    sentences = len(_SENTENCE_END.findall(hint)) or 1
    if sentences > rules.max_sentences:
        return Parsed(
            "hint_too_long",
            hint=hint,
            message=f"the hint has {sentences} sentences; at most {rules.max_sentences}",
        )
    return Parsed("ok", hint=hint)


def find_hint(text: str) -> str:
    tag = _HINT_TAG.findall(text)
    if tag:
        return tag[-1][0].strip()
    line = _HINT_LINE.findall(text)
    return line[-1].strip() if line else ""


def parse_hint(text: str, truncated: bool = False, rules: HintRules = HintRules()) -> Parsed:
    """The hint from a separate hint call: the ``<hint>`` tag if present, else the whole text."""
    try:
        hint = find_hint(text) or re.sub(r"```.*?(```|\Z)", "", text, flags=re.S).strip()
        if truncated and not hint:
            return Parsed("truncated", message="the hint generation hit its token limit")
        return check_hint(hint, rules)
    except Exception as exc:  # noqa: BLE001 - parsing model output must never raise
        return Parsed("missing_hint", message=f"could not read a hint: {type(exc).__name__}")


def parse_design(
    text: str, truncated: bool = False, need_hint: bool = True, rules: HintRules = HintRules()
) -> Parsed:
    """Parse designer output. ``truncated``: the generation stopped at its token limit."""
    try:
        return _parse_design(text, truncated, need_hint, rules)
    except Exception as exc:  # noqa: BLE001 - parsing model output must never raise
        return Parsed("no_code_block", message=f"unreadable designer output ({type(exc).__name__})")


def _parse_design(text: str, truncated: bool, need_hint: bool, rules: HintRules) -> Parsed:
    blocks = _blocks(text)
    if any(not closed for _, closed in blocks):
        if truncated:
            return Parsed("truncated", message="the output ended inside the code block (token limit)")
        # An unclosed last block without truncation: take it as it is.
    candidates = [code for code, _ in blocks if _mentions_env_class(code)]
    if not blocks:
        if _mentions_env_class(text) and _env_classes(text) is not None:
            candidates = [text]  # bare code with no fences
        else:
            reason = "truncated" if truncated else "no_code_block"
            return Parsed(reason, message="no fenced ```python code block with an *Env class was found")
    if not candidates:
        if truncated:
            return Parsed("truncated", message="the output hit its token limit before an *Env class")
        code = blocks[-1][0]
        if _env_classes(code) is None:
            return Parsed("syntax_error", source=code, message="the code block does not parse")
        return Parsed(
            "no_env_class", source=code, message=f"no class whose name ends in {ENV_CLASS_SUFFIX!r}"
        )
    names_per_block = [_env_classes(code) for code in candidates]
    distinct = {name for names in names_per_block if names for name in names}
    if len(distinct) > 1 or any(names and len(names) > 1 for names in names_per_block):
        return Parsed(
            "multiple_env_classes",
            source=candidates[-1],
            message=f"expected one *Env class, found {', '.join(sorted(distinct))}",
        )
    source = candidates[-1]  # a designer that revises its code: the last version counts
    if names_per_block[-1] is None:
        return Parsed("syntax_error", source=source, message=_syntax_message(source))
    if not need_hint:
        return Parsed("ok", source=source)
    hint = find_hint(text)
    if not hint:
        reason = "truncated" if truncated else "missing_hint"
        return Parsed(reason, source=source, message="no <hint>...</hint> after the code")
    checked = check_hint(hint, rules)
    return Parsed(checked.reason, source=source, hint=checked.hint, message=checked.message)


def _syntax_message(source: str) -> str:
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    except (ValueError, MemoryError, RecursionError) as exc:
        return f"the code cannot be parsed: {type(exc).__name__}"
    return "the code does not parse"


def parse_question_design(
    text: str, truncated: bool = False, need_hint: bool = True, rules: HintRules = HintRules()
) -> Parsed:
    """Parse a design in the "question" form (:mod:`spade_rl.envs.kits`): one code block holding a
    subclass of ``QuestionTask`` whose name ends in ``Env``, with its hint as the class attribute
    ``hint`` (a string literal; an inline hint needs it). ``text`` is the whole answer, the forced
    opening of the block included. The source of a parsed design is the kit composed with the code:
    one self-contained module. Reasons as :func:`parse_design`'s; a class that is not a
    ``QuestionTask`` is ``no_env_class``. Never raises."""
    return parse_kit_design(text, "question", truncated, need_hint, rules)


def parse_kit_design(
    text: str, kit: str, truncated: bool = False, need_hint: bool = True, rules: HintRules = HintRules()
) -> Parsed:
    """Parse a design written for kit ``kit`` (:mod:`spade_rl.envs.kits`: "question", or "tool_use", a
    subclass of ``ToolUseTask`` or of ``ToolUseBaseEnv``, the reference's name for it), as
    :func:`parse_question_design` parses the "question" form. Never raises."""
    try:
        return _parse_kit_design(text, kit, truncated, need_hint, rules)
    except Exception as exc:  # noqa: BLE001 - parsing model output must never raise
        return Parsed("no_code_block", message=f"unreadable designer output ({type(exc).__name__})")


def _parse_kit_design(text: str, kit: str, truncated: bool, need_hint: bool, rules: HintRules) -> Parsed:
    from spade_rl.envs import kits

    bases = kits.BASE_NAMES[kit]
    blocks = _blocks(text)
    if not blocks:
        reason = "truncated" if truncated else "no_code_block"
        return Parsed(reason, message="no fenced ```python code block was found")
    # The forced opening's block, or (an answer written freely, after thinking) the first that holds a class
    # whose name ends in Env.
    code, closed = next(((c, done) for c, done in blocks if _mentions_env_class(c)), blocks[0])
    if not closed and truncated:
        return Parsed("truncated", message="the output ended inside the code block (token limit)")
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return Parsed("syntax_error", source=code, message=_syntax_message(code))
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith(ENV_CLASS_SUFFIX)]
    if len(classes) > 1:
        names = ", ".join(sorted({c.name for c in classes}))
        return Parsed("multiple_env_classes", source=code, message=f"expected one *Env class, found {names}")
    if not classes or not any(isinstance(b, ast.Name) and b.id in bases for b in classes[0].bases):
        return Parsed(
            "no_env_class",
            source=code,
            message=f"expected one class whose name ends in {ENV_CLASS_SUFFIX!r} and that subclasses "
            + " or ".join(bases),
        )
    source = kits.compose(kit, code)
    if not need_hint:
        return Parsed("ok", source=source)
    hint = _class_hint(classes[0])
    if not hint:
        return Parsed("missing_hint", source=source, message="the class has no hint = '...' string attribute")
    checked = check_hint(hint, rules)
    return Parsed(checked.reason, source=source, hint=checked.hint, message=checked.message)


def _class_hint(node: ast.ClassDef) -> str:
    """The string literal assigned to ``hint`` in the class body (the last one), or ''."""
    hint = ""
    for item in node.body:
        targets = item.targets if isinstance(item, ast.Assign) else []
        if isinstance(item, ast.AnnAssign):
            targets = [item.target]
        value = getattr(item, "value", None)
        if any(isinstance(t, ast.Name) and t.id == "hint" for t in targets):
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                hint = value.value
    return hint
