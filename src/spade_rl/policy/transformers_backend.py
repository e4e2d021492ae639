"""The in-process Hugging Face backend: batched, left-padded, seeded sampling on CPU or GPU.

    policy = TransformersPolicy.from_pretrained(None)            # the offline default model
    policy = TransformersPolicy(model, tokenizer)                 # a model you hold (training updates it)
    [g] = policy.generate([[{"role": "user", "content": "Hi"}]], SamplingSettings(max_new_tokens=32, seed=1))

The decoding loop is written out here instead of calling ``model.generate``, so that each sample draws from
its own ``torch.Generator`` (seeded ``derive_seed(settings.seed, i)``: the same seed gives the same text on
CPU, whatever else is in the batch), and the log-probability of each chosen token comes from exactly the
distribution it was sampled from. One step: logits of the last position -> divide by the temperature ->
top-k, top-p -> log-softmax -> sample (or argmax when greedy) -> append; rows that finished keep feeding a
pad token until the whole batch is done. Prompts are left-padded with an attention mask and explicit
position ids, and the key/value cache carries the past.

``policy.model`` is the very module that generates: an optimiser stepping its parameters changes what the
next ``generate`` samples. Generation switches the model to eval mode and back.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spade_rl.policy.base import (
    Generation,
    Policy,
    PolicyError,
    SamplingSettings,
    check_token_prompts,
    cut_at_stop,
    derive_seed,
    stop_token_ids_of,
)
from spade_rl.policy.config import TransformersConfig
from spade_rl.policy.models import load_pretrained

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)


class TransformersPolicy(Policy):
    """Generates with a ``transformers`` causal language model held in this process.

    A model passed in stays where it is (device, dtype); ``config.device`` and ``config.dtype`` apply to
    :meth:`from_pretrained`. ``config.batch_size`` and ``config.attn_implementation`` apply to both.
    """

    supports_token_prompts = True

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: TransformersConfig | None = None,
    ) -> None:
        self.model = model
        self._tokenizer = tokenizer
        self.config = config if config is not None else TransformersConfig()
        if self.config.attn_implementation is not None:
            model.set_attn_implementation(self.config.attn_implementation)
        self.eos_token_ids = stop_token_ids_of(tokenizer, getattr(model, "generation_config", None))
        if not self.eos_token_ids:
            raise PolicyError(
                "neither the model's generation config nor the tokenizer names an end-of-sequence token"
            )
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else min(self.eos_token_ids)
        # transformers 5.x names the key/value cache argument ``cache``; 4.x and many remote models say
        # ``past_key_values`` (5.x still accepts it, with a deprecation warning per call).
        parameters = inspect.signature(model.forward).parameters
        self._cache_keyword = "cache" if "cache" in parameters else "past_key_values"

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | None = None, config: TransformersConfig | None = None
    ) -> TransformersPolicy:
        """Load a model by name, hub id or folder (``None``: the default model) onto the configured device."""
        config = config if config is not None else TransformersConfig()
        device = _pick_device(config.device)
        model, tokenizer = load_pretrained(name_or_path, device=device, dtype=config.dtype)
        return cls(model, tokenizer, config)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate_tokens(
        self, prompt_token_ids: Sequence[Sequence[int]], settings: SamplingSettings
    ) -> list[Generation]:
        prompts = check_token_prompts(prompt_token_ids)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for i, prompt in enumerate(prompts):
            if limit is not None and len(prompt) + settings.max_new_tokens > limit:
                raise ValueError(
                    f"prompt {i} has {len(prompt)} tokens; with max_new_tokens={settings.max_new_tokens} "
                    f"that exceeds the model's {limit} positions"
                )
        # Row i * n + j is sample j of prompt i, with its own seed.
        rows = [
            (prompt, derive_seed(settings.seed, i * settings.n + j))
            for i, prompt in enumerate(prompts)
            for j in range(settings.n)
        ]
        # Similar lengths share a forward pass (less padding); results go back to their rows after.
        order = sorted(range(len(rows)), key=lambda r: len(rows[r][0]), reverse=True)
        results: list[Generation | None] = [None] * len(rows)
        started, new_tokens = time.perf_counter(), 0
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(order), self.config.batch_size):
                chunk = order[start : start + self.config.batch_size]
                for r, generation in zip(
                    chunk, self._generate_batch([rows[r] for r in chunk], settings), strict=True
                ):
                    results[r] = generation
                    new_tokens += len(generation.completion_token_ids or ())
        finally:
            self.model.train(was_training)
        seconds = time.perf_counter() - started
        log.debug(
            "generated %d sequences, %d tokens in %.2f s (seed %d)",
            len(rows),
            new_tokens,
            seconds,
            settings.seed,
        )
        return [g for g in results if g is not None]

    def _generate_batch(
        self, rows: list[tuple[list[int], int]], settings: SamplingSettings
    ) -> list[Generation]:
        import torch

        device = self.device
        width = max(len(prompt) for prompt, _ in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for b, (prompt, _) in enumerate(rows):
            input_ids[b, width - len(prompt) :] = torch.tensor(prompt)
            attention[b, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        generators = None
        if not settings.greedy:
            generators = [torch.Generator(device=device).manual_seed(seed) for _, seed in rows]
        stop_ids = self.eos_token_ids | set(settings.stop_token_ids)

        tokens: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        finish: list[str | None] = [None] * len(rows)
        cache = _new_cache(self.model)
        with torch.inference_mode():
            for step in range(settings.max_new_tokens):
                out = self.model(
                    input_ids=input_ids,
                    attention_mask=attention,
                    position_ids=positions,
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_keyword: cache},
                )
                chosen, chosen_logprobs = choose_tokens(out.logits[:, -1, :].float(), settings, generators)
                chosen_list, logprob_list = chosen.tolist(), chosen_logprobs.tolist()
                for b in range(len(rows)):
                    if finish[b] is not None:
                        continue
                    tokens[b].append(chosen_list[b])
                    logprobs[b].append(logprob_list[b])
                    if chosen_list[b] in stop_ids:
                        finish[b] = "stop"
                    elif settings.stop and cut_at_stop(self._decode(tokens[b]), settings.stop, False)[1]:
                        finish[b] = "stop_string"
                    elif step == settings.max_new_tokens - 1:
                        finish[b] = "length"
                if all(f is not None for f in finish):
                    break
                next_ids = [self.pad_token_id if finish[b] else chosen_list[b] for b in range(len(rows))]
                input_ids = torch.tensor(next_ids, device=device).unsqueeze(1)
                attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=1)
                positions = positions[:, -1:] + 1
        return [
            self._finish(prompt, tokens[b], logprobs[b], finish[b] or "length", settings)
            for b, (prompt, _) in enumerate(rows)
        ]

    def _finish(
        self,
        prompt: list[int],
        tokens: list[int],
        logprobs: list[float],
        reason: str,
        settings: SamplingSettings,
    ) -> Generation:
        shown = tokens[:-1] if reason == "stop" else tokens
        text = self._decode(shown)
        if reason == "stop_string":
            text = cut_at_stop(text, settings.stop, settings.include_stop_string)[0]
        return Generation(
            text=text,
            prompt_token_ids=tuple(prompt),
            completion_token_ids=tuple(tokens),
            completion_logprobs=tuple(logprobs) if settings.logprobs else None,
            finish_reason=reason,  # type: ignore[arg-type]
        )

    def _decode(self, tokens: list[int]) -> str:
        return self._tokenizer.decode(tokens, skip_special_tokens=True)


def choose_tokens(
    logits: torch.Tensor, settings: SamplingSettings, generators: list[torch.Generator] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` [B, V] and give its log-probability, both [B].

    Greedy (temperature 0): argmax, with the log-prob under ``log_softmax(logits)``. Otherwise
    ``log_softmax(top_p(top_k(logits / T)))`` is the distribution sampled from, row ``b`` with
    ``generators[b]``, and the log-prob is read from it.
    """
    import torch

    if settings.greedy:
        chosen = logits.argmax(dim=-1)
        return chosen, torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None]).squeeze(-1)
    if generators is None or len(generators) != logits.shape[0]:
        raise ValueError("sampling needs one generator per row")
    scaled = filter_top_p(filter_top_k(logits / settings.temperature, settings.top_k), settings.top_p)
    logp = torch.log_softmax(scaled, dim=-1)
    probs = logp.exp()
    chosen = torch.stack([torch.multinomial(probs[b], 1, generator=g)[0] for b, g in enumerate(generators)])
    return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)


def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (ties at the k-th value are kept); 0 keeps all."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens of each row until their probability reaches ``p`` (always at least one)."""
    import torch

    if p >= 1.0:
        return logits
    ordered, index = logits.sort(dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop_sorted = mass_before >= p
    drop = drop_sorted.scatter(-1, index, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def _new_cache(model: PreTrainedModel) -> Any:
    """An empty dynamic key/value cache, filled in place by each forward pass."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers: no config argument
        return DynamicCache()


def _pick_device(device: str) -> str:
    import torch

    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"
