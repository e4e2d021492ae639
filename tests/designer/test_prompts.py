"""Designer and hint prompts: what the designer is told, in which mode."""

from __future__ import annotations

import pytest

from spade_rl.designer.prompts import (
    PromptConfig,
    ShownExample,
    designer_chat,
    difficulty,
    edit_chat,
    edit_direction,
    hint_chat,
    measured,
    question_designer_chat,
)
from spade_rl.envs import kits, reference


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


def test_memory_examples_are_labelled_with_their_measured_win_rate():
    examples = [example(True, 0.5), example(True, 0.3), example(False, 0.95)]
    user = designer_chat("doc", "math", examples)[1]["content"]
    assert user.count("[AT THE FRONTIER]") == 2 and "Example 3 [TOO EASY]" in user
    assert "win rate without hint 0.95, with hint 1.00" in user
    assert "AT THE FRONTIER (won 15% to 85% of the time without the hint)" in user
    assert user.count("class GuessEnv") == 3
    # the label is the measurement's, whatever role the memory drew it in
    hard = designer_chat("doc", "math", [example(True, 0.0)])[1]["content"]
    assert "Example 1 [TOO HARD] skill=math win rate without hint 0.00" in hard
    # another frontier; an example never played has no rate
    band = ShownExample("class XEnv: pass", "h", "math", 0.3, None, True, (0.4, 0.6))
    unplayed = ShownExample("class XEnv: pass", "h", "math", None, None, True)
    user = designer_chat("doc", "math", [band, unplayed])[1]["content"]
    assert "Example 1 [TOO HARD] skill=math win rate without hint 0.30\n" in user
    assert "Example 2 [NOT PLAYED YET] skill=math\n" in user and "won 40% to 60%" in user


def test_difficulty_labels_against_the_frontier():
    assert [difficulty(w) for w in (0.0, 0.14, 0.15, 0.5, 0.85, 0.86, None)] == [
        "too hard",
        "too hard",
        "at the frontier",
        "at the frontier",
        "at the frontier",
        "too easy",
        "not played yet",
    ]
    assert difficulty(0.3, (0.4, 0.6)) == "too hard"
    assert measured(0.125) == "too hard: the agent won it 12% of the time"
    with pytest.raises(ValueError, match="0 <= low < high <= 1"):
        difficulty(0.5, (0.6, 0.4))


def test_the_question_example_is_shown_with_its_win_rate_and_the_aim():
    plain = question_designer_chat("", "math", kits.EXAMPLES["math"])[1]["content"]
    assert "An example task:\n" in plain and "Aim for" not in plain
    user = question_designer_chat("", "math", kits.EXAMPLES["math"], win_rate=0.9)[1]["content"]
    assert "An example task (too easy: the agent won it 90% of the time):" in user
    assert "Aim for the frontier: a task won 15% to 85% of the time without the hint." in user


def test_an_edit_asks_for_a_harder_version_of_what_the_agent_wins_often_and_easier_of_the_rest():
    often = ShownExample("class SumEnv(QuestionTask): pass", "Add.", "math", 0.75, 0.8, True)
    rarely = ShownExample(reference.source("guess"), "Halve the range.", "logic", 0.2, 0.5, True)
    assert edit_direction(0.75) == "harder" and edit_direction(0.5) == "harder"
    assert edit_direction(0.2) == "easier" and edit_direction(0.45, (0.4, 0.6)) == "easier"
    system, user = (m["content"] for m in edit_chat(often, "question"))
    assert "QuestionTask" in system
    assert "(at the frontier: the agent won it 75% of the time)" in user
    assert "a little harder: it wins it often" in user and "class SumEnv" in user
    assert "new name ending in Env" in user and "<hint>" not in user
    system, user = (m["content"] for m in edit_chat(rarely, "module"))
    assert "class whose name ends in `Env`" in system
    assert "a little easier: it wins it rarely" in user and "50% with the hint" in user
    assert "Hint: Halve the range." in user and "<hint>" in user and "class GuessEnv" in user
    with pytest.raises(ValueError, match="forms \\['module', 'question'\\]"):
        edit_chat(often, "tool_kit")
    with pytest.raises(ValueError, match="measured win rate"):
        edit_chat(ShownExample("x", "h", "math", None, None, True), "module")


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
