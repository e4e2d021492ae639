"""The thinking switch of a chat template (``enable_thinking``) and the stripping of thinking text.

The templates are hand-written ChatML ones with Qwen3's switch (``THINKING_TEMPLATE``: false closes an empty
block in the generation prompt) or with the opening variant some thinking models use (``OPENING_TEMPLATE``:
true opens ``<think>`` in the prompt), set on a copy of the default tokenizer."""

from __future__ import annotations

import pytest

from chat_templates import OPENING_TEMPLATE, REWRITING_TEMPLATE, THINKING_TEMPLATE, with_template
from spade_rl.policy import FakePolicy, PolicyError
from spade_rl.policy.base import render_messages
from spade_rl.policy.thinking import (
    THINKING_MODES,
    check_thinking_mode,
    has_thinking_switch,
    opens_thinking,
    strip_thinking,
    thinking_flag,
)

CHAT = [{"role": "user", "content": "Hi"}]


def test_the_switch_is_passed_only_when_asked(thinking_tokenizer):
    default, _ = render_messages(thinking_tokenizer, CHAT)
    on, _ = render_messages(thinking_tokenizer, CHAT, thinking=True)
    off, off_ids = render_messages(thinking_tokenizer, CHAT, thinking=False)
    assert default == on == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert off == on + "<think>\n\n</think>\n\n"
    assert off_ids == thinking_tokenizer(off, add_special_tokens=False)["input_ids"]


def test_policy_render_and_generate_take_the_switch(thinking_tokenizer):
    policy = FakePolicy(["ok", "ok"], tokenizer=thinking_tokenizer)
    assert policy.render(CHAT, thinking=False)[: len(policy.render(CHAT))] == policy.render(CHAT)
    assert len(policy.render(CHAT, thinking=False)) > len(policy.render(CHAT, thinking=True))
    [on] = policy.generate([CHAT], _settings(), thinking=True)
    [off] = policy.generate([CHAT], _settings(), thinking=False)
    assert off.prompt_text.endswith("<think>\n\n</think>\n\n") and not on.prompt_text.endswith("</think>\n\n")
    assert off.prompt_token_ids == tuple(policy.render(CHAT, thinking=False))


def test_a_template_without_the_switch_is_refused_naming_the_key_and_the_model(tokenizer):
    policy = FakePolicy(["ok"], tokenizer=tokenizer)
    assert not has_thinking_switch(tokenizer)
    assert thinking_flag(policy, "template", key="rollout.thinking") is None  # today's behaviour
    for mode in ("on", "off"):
        with pytest.raises(PolicyError, match=r"rollout\.thinking") as error:
            thinking_flag(policy, mode, key="rollout.thinking")
        assert tokenizer.name_or_path in str(error.value) and "'template'" in str(error.value)
    with pytest.raises(PolicyError, match="no thinking switch"):
        render_messages(tokenizer, CHAT, thinking=True)


def test_flags_and_modes(thinking_tokenizer):
    policy = FakePolicy(["ok"], tokenizer=thinking_tokenizer)
    assert THINKING_MODES == ("template", "on", "off")
    assert [thinking_flag(policy, m, key="design.thinking") for m in THINKING_MODES] == [None, True, False]
    with pytest.raises(ValueError, match=r"design.thinking must be one of \['template', 'on', 'off'\]"):
        check_thinking_mode("design.thinking", True)
    # A templates dict (several named templates) counts when any of them has the switch.
    assert has_thinking_switch(type("T", (), {"chat_template": {"default": THINKING_TEMPLATE}})())
    # No local tokenizer (a server renders): nothing to check here, the flag is sent as it is.
    assert thinking_flag(FakePolicy(["ok"]), "off", key="rollout.thinking") is False


def test_opens_thinking_tells_a_prompt_that_leaves_the_block_open(tokenizer, thinking_tokenizer):
    opening = FakePolicy(["ok"], tokenizer=with_template(tokenizer, OPENING_TEMPLATE))
    closing = FakePolicy(["ok"], tokenizer=thinking_tokenizer)
    assert opens_thinking(opening, True) and opens_thinking(opening, None)
    assert not opens_thinking(opening, False)
    assert not any(opens_thinking(closing, flag) for flag in (None, True, False))
    assert not opens_thinking(FakePolicy(["ok"]), None)  # no tokenizer


@pytest.mark.parametrize(
    ("text", "opened", "expected"),
    [
        ("\\boxed{left}", False, "\\boxed{left}"),  # none: unchanged, whitespace too
        ("  plain answer \n", False, "  plain answer \n"),
        ("<think>\nthe maze turns left\n</think>\n\n\\boxed{left}", False, "\\boxed{left}"),  # closed
        ("<think>\nI should go left, but", False, ""),  # unclosed: the token limit hit while thinking
        ("\\boxed{up} <think>second thoughts", False, "\\boxed{up}"),  # unclosed after an answer
        ("<think>a</think>\\boxed{1}<think>b</think> and <think>c</think>!", False, "\\boxed{1} and !"),
        ("<think></think>answer", False, "answer"),  # the empty block of thinking 'off'
        ("the prompt opened it</think>\n\nanswer", False, "answer"),  # a close without its opening
        ("the prompt opened it</think>answer", True, "answer"),
        ("still thinking when the tokens ran out", True, ""),
        ("a</think>b<think>c</think>", True, "b"),
    ],
)
def test_strip_thinking(text, opened, expected):
    assert strip_thinking(text, opened=opened) == expected


def test_the_openai_backend_sends_the_switch_as_chat_template_kwargs(loopback_server, tiny):
    from spade_rl.policy import OpenAIConfig, OpenAIPolicy, SamplingSettings

    _, tokenizer = tiny
    thinking_tokenizer = with_template(tokenizer, THINKING_TEMPLATE)
    config = OpenAIConfig(base_url=loopback_server.base_url, max_retries=0, timeout_s=30)
    with OpenAIPolicy(config, model="tiny-random", tokenizer=thinking_tokenizer) as policy:
        settings = SamplingSettings(max_new_tokens=4, seed=1)
        [plain] = policy.generate([CHAT], settings)
        [off] = policy.generate([CHAT], settings, thinking=False)
    first, second = loopback_server.requests[-2:]
    assert "chat_template_kwargs" not in first
    assert second["chat_template_kwargs"] == {"enable_thinking": False}
    assert off.prompt_text.endswith("<think>\n\n</think>\n\n") and not plain.prompt_text.endswith(
        "</think>\n\n"
    )


def _settings():
    from spade_rl.policy import SamplingSettings

    return SamplingSettings(max_new_tokens=8)


# Rewrites the last assistant turn too, and moves the system prompt into the first user message (as
# Gemma's does): no suffix can be appended.
MERGING_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'system' %}"
    "{%- elif loop.index0 == 1 and messages[0].role == 'system' %}"
    "{{ '<|im_start|>' + m.role + '\\n' + messages[0].content + ' ' + m.content + '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + ('!' if loop.last else '')"
    " + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
TURN = [
    {"role": "system", "content": "Play."},
    {"role": "user", "content": "Start."},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\n\\boxed{1}"},
]


@pytest.mark.parametrize("thinking", [None, False])
def test_render_suffix_of_a_template_that_rewrites_past_turns(tokenizer, thinking):
    policy = FakePolicy(["ok"], tokenizer=with_template(tokenizer, REWRITING_TEMPLATE))
    grown = [*TURN, {"role": "user", "content": "Again."}]
    head = policy.render(TURN, add_generation_prompt=False)
    assert policy.render(grown)[: len(head)] != head  # the template rewrote the turn
    suffix = policy.tokenizer.decode(policy.render_suffix(TURN, grown, thinking=thinking))
    expected = "<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n"
    assert suffix == expected + ("<think>\n\n</think>\n\n" if thinking is False else "")


def test_render_suffix_refuses_a_template_whose_suffix_cannot_be_told(tokenizer):
    policy = FakePolicy(["ok"], tokenizer=with_template(tokenizer, MERGING_TEMPLATE))
    with pytest.raises(PolicyError, match="prefix of its continuation"):
        policy.render_suffix(TURN, [*TURN, {"role": "user", "content": "Again."}])
