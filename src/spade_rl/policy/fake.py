"""A scripted policy: model-free unit tests of the layers above (rollouts, design, the loop), and the replay
of recorded designer outputs (``spade-rl design --from-jsonl``), which is why it lives in the package.

    policy = FakePolicy(["\\\\boxed{left}", "\\\\boxed{up}"])            # answers in turn, then raises
    policy = FakePolicy(lambda chat: "<answer>42</answer>")              # answers from the chat
    # Token prompts (the rollout layer's path) reach a function as one message holding the decoded
    # prompt: [{"role": "prompt", "content": "<|im_start|>system..."}].
    policy = FakePolicy(["Hi"], tokenizer=default_tokenizer())           # real token ids and chat template
    [g] = policy.generate([[{"role": "user", "content": "Hi"}]], SamplingSettings())
    policy.calls                                                      # every (chats, settings) it was given
    policy.budget_calls                                               # each token call's per-prompt budgets

It honours what the contract promises: ``n`` samples per chat, ``stop`` strings (finish "stop_string"),
``max_new_tokens`` and per-prompt ``budgets`` (finish "length"), otherwise an end-of-sequence token (finish
"stop"). Without a tokenizer the "tokens" are the UTF-8 bytes of the text (ids 0-255; end of sequence 256)
and prompts are rendered by a simple fixed template ``<|role|>\\ncontent\\n``; every log-prob is ``logprob``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from spade_rl.policy.base import (
    Chat,
    Generation,
    Policy,
    PolicyError,
    SamplingSettings,
    check_budgets,
    check_chats,
    check_token_prompts,
    cut_at_stop,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BYTE_EOS = 256  # the end-of-sequence id of the byte "tokenizer"

Script = Sequence[str] | Callable[[list[dict[str, Any]]], str]


class FakePolicy(Policy):
    """Answers from a script: a list of texts used in turn, or a function of the chat."""

    supports_token_prompts = True

    def __init__(
        self, script: Script, *, tokenizer: PreTrainedTokenizerBase | None = None, logprob: float = -1.0
    ) -> None:
        if isinstance(script, str) or not (callable(script) or isinstance(script, Sequence)):
            raise ValueError("FakePolicy script must be a list of texts or a function chat -> text")
        self._script = script
        self._next = 0
        self._tokenizer = tokenizer
        self.logprob = logprob
        self.calls: list[tuple[list[list[dict[str, Any]]] | list[list[int]], SamplingSettings]] = []
        self.budget_calls: list[list[int]] = []  # per generate_tokens call: each prompt's token budget

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase | None:
        return self._tokenizer

    def generate(
        self, chats: Sequence[Chat], settings: SamplingSettings, *, thinking: bool | None = None
    ) -> list[Generation]:
        checked = check_chats(chats)
        self.calls.append((checked, settings))
        out = []
        for chat in checked:
            prompt_text, prompt_ids = self._render(chat, add_generation_prompt=True, thinking=thinking)
            for _ in range(settings.n):
                out.append(self._answer(self._text_for(chat), prompt_ids, prompt_text, settings))
        return out

    def generate_tokens(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        settings: SamplingSettings,
        *,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        prompts = check_token_prompts(prompt_token_ids)
        limits = check_budgets(budgets, len(prompts), settings)
        self.calls.append((prompts, settings))
        self.budget_calls.append(limits)
        out = []
        for prompt, limit in zip(prompts, limits, strict=True):
            as_chat = (
                [{"role": "prompt", "content": self._decode(prompt)}] if callable(self._script) else None
            )
            out.extend(
                self._answer(self._text_for(as_chat), prompt, None, settings, limit)
                for _ in range(settings.n)
            )
        return out

    def _text_for(self, chat: list[dict[str, Any]] | None) -> str:
        if callable(self._script):
            if chat is None:
                raise PolicyError(
                    "a FakePolicy scripted by a function of the chat cannot answer token prompts"
                )
            return self._script(chat)
        if self._next >= len(self._script):
            raise PolicyError(f"FakePolicy script exhausted after {len(self._script)} answers")
        self._next += 1
        return self._script[self._next - 1]

    def _answer(
        self,
        text: str,
        prompt_ids: list[int],
        prompt_text: str | None,
        settings: SamplingSettings,
        budget: int | None = None,
    ) -> Generation:
        limit = settings.max_new_tokens if budget is None else budget
        text, stopped = cut_at_stop(text, settings.stop, settings.include_stop_string)
        ids = self._encode(text)
        finish = "stop_string" if stopped else "stop"
        if len(ids) + (finish == "stop") > limit:
            ids, finish = ids[:limit], "length"
            text = self._decode(ids)
        elif finish == "stop":
            ids.append(self._eos())
        return Generation(
            text=text,
            prompt_token_ids=tuple(prompt_ids),
            completion_token_ids=tuple(ids),
            completion_logprobs=(self.logprob,) * len(ids) if settings.logprobs else None,
            finish_reason=finish,  # type: ignore[arg-type]
            prompt_text=prompt_text,
        )

    def _render(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool, thinking: bool | None = None
    ) -> tuple[str, list[int]]:
        if self._tokenizer is not None:
            return super()._render(messages, add_generation_prompt=add_generation_prompt, thinking=thinking)
        if thinking is not None:
            raise PolicyError("the FakePolicy's own template (no tokenizer) has no thinking switch")
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        text += "<|assistant|>\n" if add_generation_prompt else ""
        return text, list(text.encode())

    def _encode(self, text: str) -> list[int]:
        if self._tokenizer is None:
            return list(text.encode())
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def _decode(self, ids: list[int]) -> str:
        if self._tokenizer is None:
            return bytes(i for i in ids if i < 256).decode(errors="ignore")
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def _eos(self) -> int:
        if self._tokenizer is None or self._tokenizer.eos_token_id is None:
            return BYTE_EOS
        return self._tokenizer.eos_token_id
