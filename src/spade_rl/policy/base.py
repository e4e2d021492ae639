"""The policy interface: one way to generate text, with token ids and log-probabilities, for a batch of chats.

A *chat* is a list of messages ``{"role": ..., "content": ...}`` (extra keys are passed to the chat template
untouched). Every backend (``transformers``, ``openai``, ``vllm``, and the scripted ``FakePolicy``) answers

    generations = policy.generate(chats, SamplingSettings(max_new_tokens=64, temperature=0.6, seed=7))

with one :class:`Generation` per chat and sample, in order: chat 0 sample 0 .. n-1, chat 1 sample 0 ..

Prompts are rendered by the tokenizer's own chat template (``apply_chat_template``), never by hand-written
special tokens. The rollout layer builds multi-turn token sequences itself with ``policy.tokenizer``,
``policy.render(messages, add_generation_prompt=True)`` and ``policy.render_suffix(previous, messages)``, and
backends that accept token prompts (``supports_token_prompts``) continue such a sequence exactly with
``policy.generate_tokens(prompt_token_ids, settings)``, so no re-tokenisation ever changes what the model saw.

Log-probabilities (``Generation.completion_logprobs``) are, per completion token, the log-probability of the
chosen token under the distribution it was sampled from: ``log_softmax(logits / temperature)`` after top-k and
top-p filtering. With ``temperature == 0`` (greedy) they are the model's unscaled ``log_softmax(logits)``.
A backend that cannot give them returns ``None``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

Message = Mapping[str, Any]
Chat = Sequence[Message]
FinishReason = Literal["stop", "stop_string", "length"]
# "stop": the model ended the sequence (an end-of-sequence token, or one of ``stop_token_ids``);
# "stop_string": one of ``SamplingSettings.stop`` appeared in the text; "length": ``max_new_tokens`` reached.
FINISH_REASONS: tuple[str, ...] = ("stop", "stop_string", "length")


class PolicyError(RuntimeError):
    """A policy could not do what was asked: a server failed, a backend lacks a feature, no such model."""


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample one batch. Validated on construction; every field is a plain value.

    ``temperature`` 0 means greedy decoding (top_p/top_k/seed are then ignored). ``top_k`` 0 turns top-k off.
    ``seed`` makes sampling reproducible: sample ``i`` of a call draws from its own generator seeded with
    ``derive_seed(seed, i)``: on CPU the same call gives the same text, and a sample does not depend on
    what else is in its batch (up to float rounding across different padding).
    ``stop`` strings end a completion (the text is cut before the string unless ``include_stop_string``;
    the token ids keep every sampled token, the last of which completed the string). ``stop_token_ids``
    end a completion like the end-of-sequence token does (the ending token is in the ids, not the text).
    ``n`` samples are drawn per chat. ``logprobs`` False lets a backend skip computing them (then ``None``).
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stop: tuple[str, ...] = ()
    include_stop_string: bool = False
    stop_token_ids: tuple[int, ...] = ()
    n: int = 1
    logprobs: bool = True

    def __post_init__(self) -> None:
        _check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        _check_int("top_k", self.top_k, minimum=0)
        _check_int("seed", self.seed, minimum=0)
        _check_int("n", self.n, minimum=1)
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                raise ValueError(f"sampling setting {name} must be a number, got {value!r}")
        if self.temperature < 0:
            raise ValueError(
                f"sampling setting temperature must be >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling setting top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.stop, str) or not isinstance(self.stop, Sequence):
            raise ValueError(
                f"sampling setting stop must be a tuple of strings, got {self.stop!r}; "
                "write stop=('</answer>',)"
            )
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"sampling setting stop must hold non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(self.stop))
        if isinstance(self.stop_token_ids, str | bytes) or not isinstance(self.stop_token_ids, Sequence):
            raise ValueError(
                f"sampling setting stop_token_ids must be a tuple of ints, got {self.stop_token_ids!r}"
            )
        for token in self.stop_token_ids:
            _check_int("stop_token_ids[...]", token, minimum=0)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for name in ("include_stop_string", "logprobs"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"sampling setting {name} must be True or False, got {getattr(self, name)!r}"
                )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Generation:
    """One sampled completion of one prompt.

    ``completion_token_ids`` are every token the model sampled, including a final end-of-sequence or stop
    token; ``text`` is their decoding without special tokens, cut at a stop string. ``completion_logprobs``
    has one entry per completion token (see the module docstring for which distribution), or is ``None``.
    Token ids are ``None`` only from a server that gives none and with no local tokenizer configured.
    """

    text: str
    prompt_token_ids: tuple[int, ...] | None
    completion_token_ids: tuple[int, ...] | None
    completion_logprobs: tuple[float, ...] | None
    finish_reason: FinishReason
    prompt_text: str | None = None

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason {self.finish_reason!r} is not one of {list(FINISH_REASONS)}")
        for name in ("prompt_token_ids", "completion_token_ids", "completion_logprobs"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        ids, logprobs = self.completion_token_ids, self.completion_logprobs
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            raise ValueError(f"{len(logprobs)} log-probabilities for {len(ids)} completion tokens")


def derive_seed(seed: int, index: int) -> int:
    """The seed of sample ``index`` of a call made with ``seed``: well mixed, the same on every machine."""
    return random.Random(f"spade-rl/{seed}/{index}").getrandbits(63)


def check_chats(chats: object) -> list[list[dict[str, Any]]]:
    """Validate a batch of chats and return it as plain lists of dicts; say what is wrong otherwise."""
    if isinstance(chats, str | Mapping) or not isinstance(chats, Sequence):
        raise ValueError(
            f"chats must be a list of chats (each a list of messages), got {type(chats).__name__}"
        )
    checked = []
    for i, chat in enumerate(chats):
        if isinstance(chat, str | Mapping) or not isinstance(chat, Sequence) or not chat:
            raise ValueError(f"chat {i} must be a non-empty list of messages, got {chat!r:.80}")
        messages = []
        for j, message in enumerate(chat):
            if not isinstance(message, Mapping):
                raise ValueError(
                    f"chat {i} message {j} must be a dict with 'role' and 'content', got {message!r:.80}"
                )
            for key in ("role", "content"):
                if not isinstance(message.get(key), str):
                    raise ValueError(
                        f"chat {i} message {j} needs a string {key!r}, got {message.get(key)!r:.80}"
                    )
            messages.append(dict(message))
        checked.append(messages)
    return checked


def check_token_prompts(prompts: object) -> list[list[int]]:
    """Validate a batch of token prompts (lists of non-negative ints, none empty)."""
    if not isinstance(prompts, Sequence) or isinstance(prompts, str | bytes):
        raise ValueError(f"prompt_token_ids must be a list of token-id lists, got {type(prompts).__name__}")
    checked = []
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, Sequence) or isinstance(prompt, str | bytes) or not prompt:
            raise ValueError(f"token prompt {i} must be a non-empty list of token ids, got {prompt!r:.80}")
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise ValueError(f"token prompt {i} must hold non-negative ints, got {list(prompt)[:8]!r}...")
        checked.append(list(prompt))
    return checked


def check_budgets(budgets: object, count: int, settings: SamplingSettings) -> list[int]:
    """Per-prompt token budgets (``Policy.generate_tokens``): ``count`` ints in
    [1, ``settings.max_new_tokens``], or, for ``None``, ``settings.max_new_tokens`` for each prompt."""
    if budgets is None:
        return [settings.max_new_tokens] * count
    if isinstance(budgets, str | bytes) or not isinstance(budgets, Sequence):
        raise ValueError(f"budgets must be a list of ints, one per prompt, got {type(budgets).__name__}")
    if len(budgets) != count:
        raise ValueError(f"budgets has {len(budgets)} entries for {count} prompts; give one per prompt")
    most = settings.max_new_tokens
    for budget in budgets:
        if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= most:
            raise ValueError(f"each budget must be an int from 1 to max_new_tokens={most}, got {budget!r}")
    return list(budgets)


def cut_at_stop(text: str, stop: Sequence[str], include: bool) -> tuple[str, bool]:
    """``text`` cut at the earliest stop string (kept when ``include``), and whether one was found."""
    found = [(i, s) for s in stop if (i := text.find(s)) >= 0]
    if not found:
        return text, False
    index, string = min(found)
    return text[: index + len(string) if include else index], True


def render_messages(
    tokenizer: PreTrainedTokenizerBase,
    messages: Chat,
    *,
    add_generation_prompt: bool = True,
    thinking: bool | None = None,
) -> tuple[str, list[int]]:
    """The chat template's text for ``messages`` and its token ids (special tokens come from the template).

    ``thinking`` True/False is passed to the template as ``enable_thinking`` (``None``: not passed, the
    template's default); a template that does not read that variable is refused (see ``policy.thinking``).
    """
    name = getattr(tokenizer, "name_or_path", "?")
    template = getattr(tokenizer, "chat_template", None)
    if template is None:
        raise PolicyError(
            f"tokenizer {name!r} has no chat template; use an instruct "
            "model, or give the tokenizer one (tokenizer.chat_template = ...)"
        )
    switch: dict[str, bool] = {}
    if thinking is not None:
        if "enable_thinking" not in (template if isinstance(template, str) else str(template)):
            raise PolicyError(f"the chat template of {name!r} has no thinking switch (enable_thinking)")
        switch["enable_thinking"] = thinking
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=add_generation_prompt, tokenize=False, **switch
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)


def stop_token_ids_of(tokenizer: PreTrainedTokenizerBase | None, generation_config: Any = None) -> set[int]:
    """Every end-of-sequence id the model or tokenizer declares (the generation config may list several)."""
    ids: set[int] = set()
    for source in (generation_config, tokenizer):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, Sequence):
            ids.update(int(v) for v in value)
    return ids


class Policy:
    """Generates completions for a batch of chats. See the module docstring for the contract.

    Subclasses implement :meth:`generate`, or set ``supports_token_prompts = True`` and implement
    :meth:`generate_tokens` (then :meth:`generate` renders the chats and calls it).
    """

    supports_token_prompts: bool = False

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase | None:
        """The tokenizer whose chat template renders prompts, or ``None`` where the backend has none."""
        return None

    def generate(
        self, chats: Sequence[Chat], settings: SamplingSettings, *, thinking: bool | None = None
    ) -> list[Generation]:
        """One :class:`Generation` per chat and sample: chat-major, ``len(chats) * settings.n`` in all.
        ``thinking``: the template's ``enable_thinking`` (``None``: its default; see ``policy.thinking``)."""
        checked = check_chats(chats)
        if not self.supports_token_prompts:
            raise NotImplementedError(f"{type(self).__name__} must implement generate() or generate_tokens()")
        rendered = [self._render(chat, add_generation_prompt=True, thinking=thinking) for chat in checked]
        generations = self.generate_tokens([ids for _, ids in rendered], settings)
        return [replace(g, prompt_text=rendered[i // settings.n][0]) for i, g in enumerate(generations)]

    def generate_tokens(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        settings: SamplingSettings,
        *,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Like :meth:`generate`, from prompts already in token ids (the rollout layer's multi-turn path).

        ``budgets``: per prompt, the most new tokens its samples may have (each between 1 and
        ``settings.max_new_tokens``; :func:`check_budgets`), so that one prompt near the end of its context
        does not cut the others; ``None``: ``settings.max_new_tokens`` for every prompt."""
        raise PolicyError(
            f"the {type(self).__name__} backend takes chats, not token prompts; use generate(chats, ...), "
            "or a backend with supports_token_prompts (transformers, vllm)"
        )

    def check_context(self, max_context_tokens: int, key: str) -> None:
        """Refuse, before anything runs, a context limit (the configuration's ``key``) that the backend's
        model or servers cannot hold; a backend that checks on every call, or has no limit, accepts it."""
        log.debug("%s does not check %s = %d at start", type(self).__name__, key, max_context_tokens)

    def render(
        self, messages: Chat, *, add_generation_prompt: bool = True, thinking: bool | None = None
    ) -> list[int]:
        """Token ids of ``messages`` under the chat template (with the assistant header when asked);
        ``thinking`` as in :meth:`generate`."""
        checked = check_chats([messages])[0]
        return self._render(checked, add_generation_prompt=add_generation_prompt, thinking=thinking)[1]

    def render_suffix(
        self,
        previous: Chat,
        messages: Chat,
        *,
        add_generation_prompt: bool = True,
        thinking: bool | None = None,
    ) -> list[int]:
        """The tokens the template adds after ``previous`` (rendered without a generation prompt) when the
        chat grows to ``messages``: what the rollout layer appends after a turn. ``previous`` must be a prefix
        of ``messages``.

        A template that rewrites earlier turns (Qwen3's drops the thinking of past turns, and writes an empty
        ``<think></think>`` block only in the last one) renders ``previous`` differently once it grows. Then
        the added messages (no assistant turn among them) are rendered after the first message alone, and
        those tokens are taken when they are also how the whole conversation ends (a template that moves the
        first message into the next, as Gemma's does with a system prompt, fails that check); otherwise
        ``PolicyError``.
        """
        before, after = check_chats([previous, messages])
        if after[: len(before)] != before:
            raise ValueError("render_suffix: previous must be the first messages of messages")
        head = self._render(before, add_generation_prompt=False, thinking=thinking)[1]
        full = self._render(after, add_generation_prompt=add_generation_prompt, thinking=thinking)[1]
        if full[: len(head)] == head:
            return full[len(head) :]
        added = after[len(before) :]
        if before and added and all(m["role"] != "assistant" for m in added):
            anchor = self._render(after[:1], add_generation_prompt=False, thinking=thinking)[1]
            grown = self._render(
                after[:1] + added, add_generation_prompt=add_generation_prompt, thinking=thinking
            )
            suffix = grown[1][len(anchor) :]
            if grown[1][: len(anchor)] == anchor and suffix and full[-len(suffix) :] == suffix:
                return suffix
        raise PolicyError(
            "this chat template does not render a conversation as a prefix of its continuation; "
            "re-render whole chats instead of appending suffixes"
        )

    def _render(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool, thinking: bool | None = None
    ) -> tuple[str, list[int]]:
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise PolicyError(f"{type(self).__name__} has no tokenizer to render chats with; configure one")
        return render_messages(
            tokenizer, messages, add_generation_prompt=add_generation_prompt, thinking=thinking
        )

    def close(self) -> None:
        """Release what the backend holds (engines, connections). Idempotent."""
        log.debug("closing %s", type(self).__name__)

    def __enter__(self) -> Policy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"sampling setting {name} must be an integer >= {minimum}, got {value!r}")
