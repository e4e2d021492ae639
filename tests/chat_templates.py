"""Hand-written chat templates for the thinking tests (tests/policy, tests/loop): ChatML, and ChatML with
Qwen3's ``enable_thinking`` switch in its variants; ``with_template`` puts one on a copy of a tokenizer."""

from __future__ import annotations

import copy

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>\\n' }}{% endfor %}"
)
EMPTY_BLOCK = "<think>\n\n</think>\n\n"
# Qwen3's switch: false closes an empty block in the generation prompt; true (the default) leaves the
# model to open its own.
THINKING_TEMPLATE = CHATML + (
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '"
    + EMPTY_BLOCK.replace("\n", "\\n")
    + "' }}{% endif %}{% endif %}"
)
# The variant of thinking models whose generation prompt opens the block itself when thinking is on.
OPENING_TEMPLATE = THINKING_TEMPLATE.replace(
    "{% endif %}{% endif %}", "{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}"
)
# Like Qwen3's: the last assistant turn after the last user message is written with its thinking block
# (an empty one when it has none), earlier turns without: a conversation is not a prefix of its continuation.
REWRITING_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}"
    "{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{%- set content = m.content %}{%- set thought = '' %}"
    "{%- if '</think>' in content %}"
    "{%- set thought = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_user and (loop.last or thought) %}"
    "{{ '<|im_start|>assistant\\n<think>\\n' + thought + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)


def with_template(tokenizer, template):
    """A copy of ``tokenizer`` with another chat template (the session's tokenizer is left as it is)."""
    copied = copy.deepcopy(tokenizer)
    copied.chat_template = template
    return copied
