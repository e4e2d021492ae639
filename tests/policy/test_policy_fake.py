"""The scripted FakePolicy keeps the policy contract, so model-free tests elsewhere can trust it."""

from __future__ import annotations

from typing import Any

import pytest

from spade_rl.policy import FakePolicy, PolicyError, SamplingSettings
from spade_rl.policy.fake import BYTE_EOS

CHAT = [{"role": "user", "content": "Move."}]


def test_answers_in_turn_with_byte_tokens_then_raises_when_exhausted() -> None:
    policy = FakePolicy(["\\boxed{left}", "\\boxed{up}"])
    first, second = policy.generate([CHAT, CHAT], SamplingSettings(seed=1))
    assert (first.text, second.text) == ("\\boxed{left}", "\\boxed{up}")
    assert first.completion_token_ids == (*b"\\boxed{left}", BYTE_EOS)
    assert first.completion_logprobs == (-1.0,) * len(first.completion_token_ids)
    assert first.finish_reason == "stop"
    assert first.prompt_text == "<|user|>\nMove.\n<|assistant|>\n"
    assert first.prompt_token_ids == tuple(first.prompt_text.encode())
    assert policy.calls[0][1].seed == 1
    with pytest.raises(PolicyError, match="script exhausted after 2 answers"):
        policy.generate([CHAT], SamplingSettings())


def test_honours_stop_strings_length_and_n() -> None:
    policy = FakePolicy(lambda chat: "think</think> answer")
    [cut] = policy.generate([CHAT], SamplingSettings(stop=("</think>",)))
    assert (cut.text, cut.finish_reason) == ("think", "stop_string")
    [kept] = policy.generate([CHAT], SamplingSettings(stop=("</think>",), include_stop_string=True))
    assert kept.text == "think</think>"
    [short] = policy.generate([CHAT], SamplingSettings(max_new_tokens=4, logprobs=False))
    assert (short.text, short.finish_reason, short.completion_logprobs) == ("thin", "length", None)
    many = policy.generate([CHAT, CHAT], SamplingSettings(n=3))
    assert len(many) == 6


def test_with_a_real_tokenizer_uses_its_chat_template(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    policy = FakePolicy(["Paris."], tokenizer=tokenizer)
    [g] = policy.generate([CHAT], SamplingSettings())
    assert list(g.prompt_token_ids) == tokenizer.apply_chat_template(
        CHAT, add_generation_prompt=True, return_dict=False
    )
    assert g.completion_token_ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(g.completion_token_ids, skip_special_tokens=True) == "Paris."


def test_token_prompts_and_render_suffix() -> None:
    policy = FakePolicy(["a", "b"])
    [g] = policy.generate_tokens([[1, 2, 3]], SamplingSettings())
    assert g.prompt_token_ids == (1, 2, 3) and g.text == "a"
    turn = [*CHAT, {"role": "assistant", "content": "a"}]
    suffix = policy.render_suffix(turn, [*turn, {"role": "user", "content": "ok"}])
    assert bytes(suffix).decode() == "<|user|>\nok\n<|assistant|>\n"
    with pytest.raises(ValueError, match="previous must be the first messages"):
        policy.render_suffix([{"role": "user", "content": "other"}], turn)
    with pytest.raises(ValueError, match="script must be a list of texts"):
        FakePolicy("just one")  # type: ignore[arg-type]
