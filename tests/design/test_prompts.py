"""Designer and hint prompts: what the designer is told, in which mode."""

from __future__ import annotations

import pytest

from spade_rl.design.prompts import PromptConfig, ShownExample, designer_chat, hint_chat
from spade_rl.envs import reference


def example(positive: bool, win: float) -> ShownExample:
    return ShownExample(
        reference.source("guess"), "Halve the range.", "math", win, min(1.0, win + 0.3), positive
    )


def test_designer_chat_has_document_skill_contract_and_format():
    chat = designer_chat("The heap queue algorithm keeps the smallest item first.", "logic", title="heapq")
    assert [m["role"] for m in chat] == ["system", "user"]
    system, user = chat[0]["content"], chat[1]["content"]
    assert "class whose name ends in `Env`" in system and "\\boxed{" in system
    assert "heap queue" in user and "(heapq)" in user and "Skill to exercise: logic" in user
    assert "<hint>" in user and "```python" in user


def test_document_is_truncated_to_the_word_budget():
    chat = designer_chat("word " * 5000, "math", config=PromptConfig(max_document_words=100))
    document = chat[1]["content"].split("<document>")[1].split("</document>")[0]
    assert document.split() == ["word"] * 100 + ["[...]"]


def test_memory_examples_are_labelled():
    examples = [example(True, 0.5), example(True, 0.3), example(False, 0.95)]
    user = designer_chat("doc", "math", examples)[1]["content"]
    assert user.count("[GOOD") == 2 and "[AVOID (too easy)]" in user
    assert "win rate without hint 0.95, with hint 1.00" in user
    assert user.count("class GuessEnv") == 3
    hard = designer_chat("doc", "math", [example(False, 0.0)])[1]["content"]
    assert "AVOID (too hard)" in hard


def test_long_examples_are_cut():
    user = designer_chat("doc", "math", [example(True, 0.5)], PromptConfig(max_example_chars=300))[1][
        "content"
    ]
    assert "# [...]" in user


def test_separate_hint_mode_and_hint_chat():
    user = designer_chat("doc", "math", config=PromptConfig(hint_mode="separate"))[1]["content"]
    assert "<hint>" not in user
    chat = hint_chat(reference.source("maze"), "spatial")
    assert "class MazeEnv" in chat[1]["content"] and "<hint>" in chat[1]["content"]
    assert "Never state the answer" in chat[1]["content"]


def test_tool_use_setting():
    system = designer_chat("doc", "retail", config=PromptConfig(setting="tool_use"))[0]["content"]
    assert "<tool_call>" in system and "<answer>" in system


def test_config_errors_name_allowed_values():
    with pytest.raises(ValueError, match="games"):
        PromptConfig(setting="board")
    with pytest.raises(ValueError, match="inline"):
        PromptConfig(hint_mode="both")


def test_the_prompt_states_the_limits_the_parser_enforces():
    from spade_rl.design.parse import HintRules, check_hint

    rules = HintRules(max_words=7, max_sentences=1)
    user = designer_chat("doc", "math", config=PromptConfig(hint=rules))[1]["content"]
    assert "1 sentence, at most 7 words" in user
    assert "1-3 sentences, at most 100 words" in designer_chat("doc", "math")[1]["content"]
    assert (
        "1 sentence, at most 7 words" in hint_chat(reference.source("maze"), "spatial", rules)[1]["content"]
    )
    assert check_hint("one two three four five six seven.", rules).ok
    assert check_hint("one two three four five six seven eight.", rules).reason == "hint_too_long"
    assert check_hint("One. Two.", rules).reason == "hint_too_long"
