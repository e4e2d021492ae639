"""Parsing designer output: every failure is typed, and nothing ever raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spade_rl.design.parse import HintRules, check_hint, parse_design, parse_hint

ENV = "class GuessEnv:\n    def reset(self, seed=None):\n        return 'hi', {}\n"


def fenced(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code}```"


def test_ok_with_hint_tag():
    parsed = parse_design(f"Here it is.\n{fenced(ENV)}\n<hint>Halve the range each time.</hint>")
    assert parsed.ok and parsed.source == ENV and parsed.hint == "Halve the range each time."


def test_hint_line_and_bare_fence():
    parsed = parse_design(f"{fenced(ENV, '')}\nHint: Try the middle first.")
    assert parsed.ok and parsed.hint == "Try the middle first."


def test_bare_code_without_fences():
    parsed = parse_design(ENV, need_hint=False)
    assert parsed.ok and "GuessEnv" in parsed.source


def test_last_revision_of_the_same_class_counts():
    first, second = ENV, ENV.replace("'hi'", "'hello'")
    parsed = parse_design(f"{fenced(first)}\nFixed:\n{fenced(second)}\n<hint>Think.</hint>")
    assert parsed.ok and "'hello'" in parsed.source


def test_helper_block_without_env_is_ignored():
    parsed = parse_design(f"{fenced('print(1)')}\n{fenced(ENV)}<hint>Go.</hint>")
    assert parsed.ok and parsed.source == ENV


def test_failures():
    assert parse_design("I cannot do that.").reason == "no_code_block"
    assert parse_design(fenced("x = 1\n")).reason == "no_env_class"
    assert parse_design(fenced("class AEnv(:\n")).reason == "syntax_error"
    two = fenced(ENV + "class OtherEnv:\n    pass\n")
    assert parse_design(two + "<hint>x</hint>").reason == "multiple_env_classes"
    split = fenced(ENV) + fenced(ENV.replace("GuessEnv", "MazeEnv"))
    assert parse_design(split + "<hint>x</hint>").reason == "multiple_env_classes"
    assert parse_design(fenced(ENV)).reason == "missing_hint"
    assert parse_design(fenced(ENV), need_hint=False).ok


def test_truncation():
    assert parse_design("```python\nclass GuessEnv:\n    def re", truncated=True).reason == "truncated"
    assert parse_design(fenced(ENV) + "\n<hint>Halve the", truncated=True).ok  # the hint tag may be cut
    assert parse_design(fenced(ENV) + "\nNow the hi", truncated=True).reason == "truncated"
    assert parse_design("Let me think about the design of", truncated=True).reason == "truncated"


def test_hint_rules():
    assert check_hint("").reason == "missing_hint"
    assert check_hint("One. Two. Three.").ok
    assert check_hint("One. Two. Three. Four.").reason == "hint_too_long"
    assert check_hint(" ".join(["word"] * 101)).reason == "hint_too_long"
    assert check_hint("a b c", HintRules(max_words=2)).reason == "hint_too_long"


def test_parse_hint_from_second_call():
    assert parse_hint("<hint>Use the walls.</hint>").hint == "Use the walls."
    assert parse_hint("  Use the walls.  ").hint == "Use the walls."
    assert parse_hint("", truncated=True).reason == "truncated"


PIECES = st.sampled_from(
    ["```", "```python\n", "```py", "\n", "class ", "XEnv", "Env:", "(:", "<hint>", "</hint>", "Hint: ",
     "def reset(self):", "    ", "\x00", "'''", '"""', "\\", "é", "🙂", ". ", "pass", "\r\n", "`"]
)  # fmt: skip


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.one_of(PIECES, st.text(max_size=20)), max_size=30), st.booleans(), st.booleans())
def test_parse_never_raises(pieces, truncated, need_hint):
    text = "".join(pieces)
    parsed = parse_design(text, truncated=truncated, need_hint=need_hint)
    assert parsed.reason in {
        "ok", "truncated", "no_code_block", "multiple_env_classes", "no_env_class", "syntax_error",
        "missing_hint", "hint_too_long",
    }  # fmt: skip
    if parsed.ok:
        assert "Env" in parsed.source and (parsed.hint or not need_hint)
    hint = parse_hint(text, truncated=truncated)
    assert hint.reason in {"ok", "truncated", "missing_hint", "hint_too_long"}


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=2000))
def test_parse_never_raises_on_any_text(text):
    assert parse_design(text).reason
    assert parse_design(fenced(text)).reason
