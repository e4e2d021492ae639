"""Thinking mode: the chat template's thinking switch, per role, and the thinking text cut from what is read.

    flag = thinking_flag(policy, "on", key="rollout.thinking")   # True (refused: a template with no switch)
    ids = policy.render(messages, add_generation_prompt=True, thinking=flag)
    action = strip_thinking(generation.text, opened=opens_thinking(policy, flag))

Some chat templates (Qwen3's) read a template variable ``enable_thinking``: false makes the generation prompt
close an empty ``<think></think>`` block so that the model answers at once; true (or unset, the template's
default) lets the model write ``<think>...</think>`` before its answer. The designer and the agent choose
separately (``design.thinking``, ``rollout.thinking``), each one of :data:`THINKING_MODES`:

- ``"template"``: the variable is not passed; the template's default (the behaviour before this setting);
- ``"on"`` / ``"off"``: ``enable_thinking=True`` / ``False`` is passed to the template. Only a template that
  uses the variable (its text names ``enable_thinking``) can take it; any other is refused with a message that
  names the key and the model, because a silently ignored switch would train something else than asked.

The thinking is the model's own text: its tokens stay in the generation (``completion_token_ids``, and so in
an episode's token ids and mask: they are trained), and the transcript keeps the whole text. Only what is
*read* loses it: :func:`strip_thinking` gives the action the environment receives and the text the design
parser reads. A server that renders chats itself (the ``openai`` backend without a local tokenizer) cannot be
checked here: the variable is sent as vLLM's and SGLang's ``chat_template_kwargs`` and the server's template
decides.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spade_rl.policy.base import PolicyError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from spade_rl.policy.base import Policy

THINKING_MODES: tuple[str, ...] = ("template", "on", "off")
SWITCH = "enable_thinking"  # the template variable (Qwen3's name for it)
OPEN, CLOSE = "<think>", "</think>"
_BLOCK = re.compile(re.escape(OPEN) + r".*?(?:" + re.escape(CLOSE) + r"|\Z)", re.S)


def check_thinking_mode(key: str, value: object) -> None:
    """Refuse a value that is not one of :data:`THINKING_MODES` (for the config dataclasses)."""
    if value not in THINKING_MODES:
        raise ValueError(f"{key} must be one of {list(THINKING_MODES)}, got {value!r}")


def has_thinking_switch(tokenizer: PreTrainedTokenizerBase | None) -> bool:
    """Whether the tokenizer's chat template reads ``enable_thinking`` (any of its templates, when it has
    several by name)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = "\n".join(str(t) for t in template.values())
    return isinstance(template, str) and SWITCH in template


def thinking_flag(policy: Policy, mode: str, *, key: str) -> bool | None:
    """The value to pass as ``enable_thinking`` for ``mode`` (``None``: pass nothing, the template's default).

    ``mode`` "on" or "off" with a tokenizer whose template has no switch raises ``PolicyError`` naming ``key``
    (the config key, e.g. "rollout.thinking") and the model. A policy without a local tokenizer (a server
    that renders chats itself) is not checked: the server's template decides."""
    check_thinking_mode(key, mode)
    if mode == "template":
        return None
    tokenizer = policy.tokenizer
    if tokenizer is not None and not has_thinking_switch(tokenizer):
        model = getattr(tokenizer, "name_or_path", "") or type(policy).__name__
        raise PolicyError(
            f"{key} = {mode!r}, but the chat template of {model!r} has no thinking switch (no "
            f"{SWITCH!r} variable): set {key} = 'template', or use a model whose template has one (Qwen3)"
        )
    return mode == "on"


def opens_thinking(policy: Policy, thinking: bool | None) -> bool:
    """Whether the generation prompt itself opens a ``<think>`` block that it leaves open (some templates end
    the prompt with ``<think>\\n``): the completion then starts inside the thinking. False where the policy
    cannot render locally."""
    tokenizer = policy.tokenizer
    if tokenizer is None:
        return False
    probe = [{"role": "user", "content": "a"}]
    try:
        head = policy.render(probe, add_generation_prompt=False, thinking=thinking)
        full = policy.render(probe, add_generation_prompt=True, thinking=thinking)
    except PolicyError:
        return False
    added = full[len(head) :] if full[: len(head)] == head else full
    text = tokenizer.decode(added, skip_special_tokens=False)
    return text.rfind(OPEN) > text.rfind(CLOSE)


def strip_thinking(text: str, *, opened: bool = False) -> str:
    """``text`` without its thinking: every ``<think>...</think>`` block, an unclosed ``<think>`` to the end
    (a generation that hit its token limit while thinking), and, when the text closes a block it never
    opened (the prompt opened it: ``opened``, or a server that left the opening tag out), everything up to
    that first ``</think>``. Whitespace around what is left is trimmed where a block was cut. A text
    with no tags, and ``opened`` False, comes back unchanged."""
    first_close, first_open = text.find(CLOSE), text.find(OPEN)
    cut = first_close >= 0 and (opened or first_open < 0 or first_close < first_open)
    if cut:
        text = text[first_close + len(CLOSE) :]
    elif opened:
        return ""  # the prompt opened the thinking and the model never closed it
    stripped = _BLOCK.sub("", text)
    if stripped == text and not cut:
        return text
    return stripped.strip()
