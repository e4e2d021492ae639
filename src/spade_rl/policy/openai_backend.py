"""A policy served by any OpenAI-compatible server (vLLM, SGLang, llama.cpp, OpenAI), through ``openai``.

    policy = OpenAIPolicy(OpenAIConfig(base_url="http://127.0.0.1:8000/v1", tokenizer="Qwen/Qwen3-8B",
                                       server_token_ids=True), model="Qwen/Qwen3-8B")
    generations = policy.generate(chats, SamplingSettings(max_new_tokens=256, temperature=0.6, seed=3))

One chat-completions request per chat (``n`` samples in it), ``concurrency`` requests at a time. Request
``i`` carries the seed ``derive_seed(settings.seed, i)``; whether a server honours seeds is up to it.
``top_k``, ``stop_token_ids``, ``include_stop_str_in_output`` and the token-id fields are extensions that
vLLM and SGLang accept; they are sent only when used, because OpenAI's own API rejects unknown fields.

Where the token ids come from, in order of preference:

1. the server's own (``server_token_ids=True``): vLLM returns ``prompt_token_ids`` and per-choice
   ``token_ids`` (``return_token_ids``), or, in older versions, ``token_id:N`` strings in the log-probs
   (``return_tokens_as_token_ids``);
2. a local tokenizer (``OpenAIConfig.tokenizer``): the prompt is rendered with its chat template, the
   completion re-tokenised from its text (plus the end-of-sequence token when the server says it stopped).
   Re-tokenised ids can differ from what the server sampled; log-probs are then kept only where their count
   matches the ids (otherwise ``None``);
3. neither: ids are ``None`` (text and log-probs only: fine for evaluation, not for training).

Log-probs are whatever the server reports (for vLLM, its ``logprobs_mode``; for OpenAI, the model's
distribution), or ``None`` when it reports none.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from spade_rl.policy.base import (
    Chat,
    Generation,
    Policy,
    PolicyError,
    SamplingSettings,
    check_chats,
    derive_seed,
    render_messages,
)
from spade_rl.policy.config import OpenAIConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "stop",
    "function_call": "stop",
    "content_filter": "stop",
}


class OpenAIPolicy(Policy):
    """Chat completions from an OpenAI-compatible server; see the module docstring for token ids."""

    def __init__(
        self,
        config: OpenAIConfig | None = None,
        model: str | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        try:
            import openai
        except ImportError as error:
            raise PolicyError("the openai backend needs the openai package: pip install openai") from error
        self.config = config if config is not None else OpenAIConfig()
        api_key = self.config.api_key or os.environ.get(self.config.api_key_env) or "EMPTY"
        self._client = openai.OpenAI(
            base_url=self.config.base_url,
            api_key=api_key,
            timeout=self.config.timeout_s,
            max_retries=self.config.max_retries,
        )
        self._openai = openai
        if tokenizer is None and self.config.tokenizer is not None:
            from spade_rl.policy.models import load_tokenizer

            tokenizer = load_tokenizer(self.config.tokenizer)
        self._tokenizer = tokenizer
        self._model = model

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase | None:
        return self._tokenizer

    @property
    def model(self) -> str:
        """The served model's name: the configured one, else the first the server lists (asked once)."""
        if self._model is None:
            try:
                listed = [m.id for m in self._client.models.list()]
            except self._openai.APIError as error:
                raise self._server_error("listing models", error) from error
            if not listed:
                raise PolicyError(f"the server at {self.config.base_url} serves no model")
            self._model = listed[0]
        return self._model

    def generate(
        self, chats: Sequence[Chat], settings: SamplingSettings, *, thinking: bool | None = None
    ) -> list[Generation]:
        """``thinking`` True/False is sent as ``chat_template_kwargs = {"enable_thinking": ...}`` (vLLM and
        SGLang pass it to their template; ``None`` sends nothing); whether the server's template has the
        switch is checked only against a local tokenizer (``spade_rl.policy.thinking``)."""
        checked = check_chats(chats)
        model = self.model
        # Threads only wait on HTTP; tokenizing stays on this thread (a fast tokenizer shared between threads
        # can fail with "Already borrowed").
        with ThreadPoolExecutor(max_workers=min(self.config.concurrency, max(1, len(checked)))) as pool:
            responses = list(
                pool.map(
                    lambda i: self._request(model, i, checked[i], settings, thinking), range(len(checked))
                )
            )
        generations = []
        for chat, response in zip(checked, responses, strict=True):
            prompt_text, local_prompt = None, None
            if self._tokenizer is not None:
                prompt_text, local_prompt = render_messages(
                    self._tokenizer, chat, add_generation_prompt=True, thinking=thinking
                )
            server_prompt = getattr(response, "prompt_token_ids", None)
            prompt_ids = server_prompt if server_prompt is not None else local_prompt
            for choice in sorted(response.choices, key=lambda c: c.index):
                generations.append(self._generation(choice, prompt_ids, prompt_text))
        return generations

    def close(self) -> None:
        self._client.close()

    def _request(
        self,
        model: str,
        index: int,
        chat: list[dict[str, Any]],
        settings: SamplingSettings,
        thinking: bool | None = None,
    ) -> Any:
        request: dict[str, Any] = {
            "model": model,
            "messages": chat,
            "max_tokens": settings.max_new_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "n": settings.n,
            "seed": derive_seed(settings.seed, index) % (2**31),
            "logprobs": settings.logprobs,
        }
        if settings.stop:
            request["stop"] = list(settings.stop)
        extra: dict[str, Any] = {}
        if settings.top_k:
            extra["top_k"] = settings.top_k
        if settings.stop_token_ids:
            extra["stop_token_ids"] = list(settings.stop_token_ids)
        if settings.include_stop_string:
            extra["include_stop_str_in_output"] = True
        if thinking is not None:
            extra["chat_template_kwargs"] = {"enable_thinking": thinking}
        if self.config.server_token_ids:
            extra["return_token_ids"] = True
            extra["return_tokens_as_token_ids"] = settings.logprobs
        try:
            return self._client.chat.completions.create(**request, extra_body=extra or None)
        except self._openai.APIError as error:
            raise self._server_error(f"chat {index}", error) from error

    def _generation(self, choice: Any, prompt_ids: list[int] | None, prompt_text: str | None) -> Generation:
        text = choice.message.content or ""
        stop_reason = getattr(choice, "stop_reason", None)
        finish = _FINISH.get(choice.finish_reason or "stop", "stop")
        if finish == "stop" and isinstance(stop_reason, str):
            finish = "stop_string"  # vLLM names the stop string that ended the completion
        entries = list(choice.logprobs.content or []) if choice.logprobs is not None else []
        logprobs = [float(e.logprob) for e in entries] or None
        ids = getattr(choice, "token_ids", None)
        if ids is None and entries and all(e.token.startswith("token_id:") for e in entries):
            ids = [int(e.token.removeprefix("token_id:")) for e in entries]
        if ids is None and self._tokenizer is not None:
            ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
            eos = self._tokenizer.eos_token_id
            if finish == "stop" and eos is not None and not isinstance(stop_reason, int):
                ids = [*ids, eos]
            elif isinstance(stop_reason, int):
                ids = [*ids, stop_reason]
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            log.debug("dropping %d log-probs that do not align with %d token ids", len(logprobs), len(ids))
            logprobs = None
        return Generation(
            text=text,
            prompt_token_ids=tuple(prompt_ids) if prompt_ids is not None else None,
            completion_token_ids=tuple(ids) if ids is not None else None,
            completion_logprobs=tuple(logprobs) if logprobs is not None else None,
            finish_reason=finish,  # type: ignore[arg-type]
            prompt_text=prompt_text,
        )

    def _server_error(self, what: str, error: Exception) -> PolicyError:
        status = getattr(error, "status_code", None)
        detail = f"HTTP {status}: {error}" if status else f"{type(error).__name__}: {error}"
        return PolicyError(
            f"the OpenAI-compatible server at {self.config.base_url} failed on {what} ({detail})"
        )
