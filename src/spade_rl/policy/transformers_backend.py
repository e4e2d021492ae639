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

**Prefix cache.** A multi-turn rollout sends each conversation again every turn, grown by the last
completion and the next observation. After a call, the keys and values of every row's sequence (the prompt
and the completion but its last token, which was sampled and never fed) are kept, keyed by their token ids
(:class:`PrefixCache`, ``config.prefix_cache_tokens`` tokens at most, least recently used dropped first).
The next call looks up the longest cached prefix of each prompt (any common prefix counts, up to all but
the prompt's last token), lays the rows' cached keys/values out as ``[padding | cached prefix]`` up to a
common past width, and feeds only the uncached rest, left-padded; the attention mask has zeros on every
padding position (also the padding between a row's past and its rest) and the position ids continue from
each row's true length. Results equal those without the cache up to float rounding (the cached keys/values
were computed in another batch). The cache holds keys/values of the current weights only: each call compares
a cheap fingerprint of the parameters (their storage, version counters and a strided sample of values; fused
optimisers do not bump version counters) and drops the cache when it changed. A training loop should still
call :meth:`TransformersPolicy.clear_prefix_cache` after each update; so should code that changes what the
model computes without touching its parameters (PEFT's ``disable_adapter()``, another attention
implementation). Models whose cache is not made of plain ``DynamicLayer``s (sliding windows, linear
attention) run without a prefix cache (logged once).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from spade_rl.memory import release_unused_memory
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
from spade_rl.policy.models import cpu_has_fast_bf16, load_pretrained

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)


class TransformersPolicy(Policy):
    """Generates with a ``transformers`` causal language model held in this process.

    A model passed in stays where it is (device, dtype); ``config.device`` and ``config.dtype`` apply to
    :meth:`from_pretrained`. ``config.batch_size``, ``config.attn_implementation`` and
    ``config.prefix_cache_tokens`` apply to both. ``prefix_cache`` is the :class:`PrefixCache` (``None``:
    off). One call at a time: the policy is not thread-safe.
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
        self.prefix_cache: PrefixCache | None = None
        self._weights: tuple[Any, Any] | None = None  # the fingerprint the cached keys/values belong to
        unsupported = _why_no_prefix_cache(model)
        # Plain dynamic layers can be replaced by preallocated ones (the same interface, no copy per step).
        self._preallocate = not unsupported
        self.autocast_dtype = _autocast_dtype(model, self.config.autocast)
        if self.config.prefix_cache_tokens > 0:
            if unsupported:
                log.info("prefix cache off: %s", unsupported)
            else:
                self.prefix_cache = PrefixCache(self.config.prefix_cache_tokens)

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

    def clear_prefix_cache(self) -> None:
        """Forget every cached key/value: call it after the model's weights change (each training update)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        self._weights = None

    def close(self) -> None:
        self.clear_prefix_cache()
        super().close()

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
        was_training = self.model.training
        self.model.eval()
        prefix = self._prefix_cache_for_call()
        started, new_tokens = time.perf_counter(), 0
        try:
            if prefix is not None:
                self._prefill_shared([prompt for prompt, _ in rows])
                prefix = self.prefix_cache  # None if a cache it could not read turned it off
            reuse = [prefix.lookup(prompt) if prefix is not None else NO_REUSE for prompt, _ in rows]
            # Rows that reuse a cached prefix go together (they prefill little), then the others; within each,
            # similar lengths share a forward pass (less padding). Results go back to their rows after.
            order = sorted(range(len(rows)), key=lambda r: (reuse[r].length == 0, -len(rows[r][0])))
            results: list[Generation | None] = [None] * len(rows)
            for start in range(0, len(order), self.config.batch_size):
                chunk = order[start : start + self.config.batch_size]
                generations = self._generate_batch(
                    [rows[r] for r in chunk], [reuse[r] for r in chunk], settings
                )
                for r, generation in zip(chunk, generations, strict=True):
                    results[r] = generation
                    new_tokens += len(generation.completion_token_ids or ())
        finally:
            self.model.train(was_training)
            if prefix is not None:
                prefix.unpin_all()
            release_unused_memory()  # the batch caches, freed in pieces of every size (spade_rl.memory)
        seconds = time.perf_counter() - started
        log.debug(
            "generated %d sequences, %d tokens in %.2f s (seed %d); %d prompt tokens from the prefix cache",
            len(rows),
            new_tokens,
            seconds,
            settings.seed,
            sum(r.length for r in reuse),
        )
        return [g for g in results if g is not None]

    def _prefix_cache_for_call(self) -> PrefixCache | None:
        """The prefix cache, emptied first if the weights changed since it was filled; ``None`` when off."""
        if self.prefix_cache is None:
            return None
        weights = _weights_fingerprint(self.model)
        if self._weights is not None and not _same_fingerprint(weights, self._weights):
            log.debug("the model's weights changed: prefix cache cleared")
            self.prefix_cache.clear()
        self._weights = weights
        return self.prefix_cache

    def _generate_batch(
        self, rows: list[tuple[list[int], int]], reuse: list[Reuse], settings: SamplingSettings
    ) -> list[Generation]:
        import torch

        device = self.device
        input_ids, attention, positions, past, width = self._layout([prompt for prompt, _ in rows], reuse)
        generators = None
        if not settings.greedy:
            generators = [torch.Generator(device=device).manual_seed(seed) for _, seed in rows]
        stop_ids = self.eos_token_ids | set(settings.stop_token_ids)

        tokens: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        finish: list[str | None] = [None] * len(rows)
        batch = list(range(len(rows)))  # the row at each position of the batch (finished rows leave it)
        with self._computing() as dtype:
            cache = self._batch_cache(reuse, past, past + width + settings.max_new_tokens, dtype)
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
                for i, b in enumerate(batch):
                    if finish[b] is not None:
                        continue
                    tokens[b].append(chosen_list[i])
                    logprobs[b].append(logprob_list[i])
                    if chosen_list[i] in stop_ids:
                        finish[b] = "stop"
                    elif settings.stop and cut_at_stop(self._decode(tokens[b]), settings.stop, False)[1]:
                        finish[b] = "stop_string"
                    elif step == settings.max_new_tokens - 1:
                        finish[b] = "length"
                done = [i for i, b in enumerate(batch) if finish[b] is not None]
                if len(done) == len(batch):
                    break
                if self._preallocate and len(done) * COMPACT_SHARE >= len(batch):
                    # Finished rows leave the batch (their keys/values kept first): every later step costs
                    # only the rows still generating.
                    self._remember(batch, rows, reuse, tokens, cache, past, attention.shape[1], done)
                    keep = [i for i, b in enumerate(batch) if finish[b] is None]
                    index = torch.tensor(keep, device=device)
                    for layer in cache.layers:
                        layer.batch_select_indices(index)
                    attention, positions = attention[index], positions[index]
                    if generators is not None:
                        generators = [generators[i] for i in keep]
                    chosen_list = [chosen_list[i] for i in keep]
                    batch = [batch[i] for i in keep]
                next_ids = [self.pad_token_id if finish[b] else chosen_list[i] for i, b in enumerate(batch)]
                input_ids = torch.tensor(next_ids, device=device).unsqueeze(1)
                attention = torch.cat([attention, attention.new_ones((len(batch), 1))], dim=1)
                positions = positions[:, -1:] + 1
            self._remember(batch, rows, reuse, tokens, cache, past, attention.shape[1], range(len(batch)))
        return [
            self._finish(prompt, tokens[b], logprobs[b], finish[b] or "length", settings)
            for b, (prompt, _) in enumerate(rows)
        ]

    @contextlib.contextmanager
    def _computing(self) -> Iterator[Any]:
        """No gradients, in the precision of generation: bfloat16 autocast when ``autocast_dtype`` is set,
        with the output head in float32 (the log-probs keep float32 precision; one position per row).
        Yields the dtype the call's key/value caches hold (None: as computed).

        Autocast casts a weight once per context and reuses the copy only for parameters that require
        gradients, and never under ``inference_mode``: ``no_grad`` here (under ``inference_mode`` a
        forward pass of the default model took 104 ms against 26 ms, and 57 ms in float32), also without
        autocast of ours, since a model trained with ``train.bf16`` has its forward wrapped in autocast by
        accelerate. With frozen weights (LoRA's base model) every pass would cast them again: "auto"
        computes in float32 then."""
        import torch

        dtype = self.autocast_dtype
        if dtype is not None and self.config.autocast == "auto":
            if not all(p.requires_grad for p in self.model.parameters() if p.is_floating_point()):
                dtype = None
        if dtype is None:
            with torch.no_grad():
                yield None
            return
        device = self.device.type
        head = self.model.get_output_embeddings()
        if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
            with torch.no_grad(), torch.autocast(device, dtype=dtype):
                yield dtype
            return
        forward = head.forward

        def float32_head(hidden: torch.Tensor) -> torch.Tensor:
            with torch.autocast(device, enabled=False):
                return forward(hidden.to(head.weight.dtype))

        own = head.__dict__.get("forward")  # a forward set on the instance (accelerate's hooks do)
        head.forward = float32_head
        try:
            with torch.no_grad(), torch.autocast(device, dtype=dtype):
                yield dtype
        finally:
            if own is None:
                del head.forward  # the class's forward again
            else:
                head.forward = own

    def _layout(self, prompts: list[list[int]], reuse: list[Reuse]) -> tuple[Any, Any, Any, int, int]:
        """The first forward pass of a batch: input ids, attention mask, position ids, ``past``, ``width``.

        Row b, ``past + width`` wide: [pad | its cached prefix | pad | the rest of its prompt]; the mask is 0
        on both paddings and the positions of the rest continue from the cached length."""
        import torch

        cached = [r.length for r in reuse]
        fresh = [len(prompt) - c for prompt, c in zip(prompts, cached, strict=True)]
        past, width = max(cached), max(fresh)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), past + width), dtype=torch.long)
        positions = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, (prompt, c, n) in enumerate(zip(prompts, cached, fresh, strict=True)):
            input_ids[b, width - n :] = torch.tensor(prompt[c:])
            attention[b, past - c : past] = 1
            attention[b, past + width - n :] = 1
            positions[b, width - n :] = torch.arange(c, c + n)
        device = self.device
        return input_ids.to(device), attention.to(device), positions.to(device), past, width

    def _prefill_shared(self, prompts: list[list[int]]) -> None:
        """Encode once what several prompts of this call share, into the prefix cache.

        A call's rows often begin alike: the system prompt of every episode, the same prompt sampled ``n``
        times, a GRPO group's designer prompt up to its document. Without this each row encodes its whole
        prompt. Here the shared prefixes (:func:`shared_prefixes`) that the cache does not hold yet are
        encoded first, shortest first (a longer one reuses the shorter it extends), and kept as entries:
        each row's lookup then finds its longest shared prefix and feeds only its own rest. Results equal
        those of separate encoding up to float rounding, as for any prefix-cache hit.
        """
        prefix = self.prefix_cache
        if prefix is None or len(prompts) < 2:
            return
        # Prefixes that would crowd the cache out are not worth their entry; `_encode_only` skips those the
        # cache holds already.
        limit = prefix.max_tokens // 4
        pending = [p for p in shared_prefixes(prompts, SHARED_PREFIX_MIN_TOKENS) if len(p) <= limit]
        while pending:
            # Prefixes none of the pending ones extend go first; then those extending them reuse them.
            ready = [p for p in pending if not any(len(q) < len(p) and p[: len(q)] == q for q in pending)]
            pending = [p for p in pending if p not in ready]
            for start in range(0, len(ready), self.config.batch_size):
                chunk = [list(p) for p in ready[start : start + self.config.batch_size]]
                self._encode_only(chunk)

    def _encode_only(self, prompts: list[list[int]]) -> None:
        """Encode ``prompts`` (reusing what the prefix cache holds) and keep their keys/values there."""

        prefix = self.prefix_cache
        if prefix is None:  # turned off by a cache it could not read (logged)
            return
        prompts = [p for p in prompts if prefix.covered(p) < len(p)]
        if not prompts:
            return
        reuse = [prefix.lookup(prompt, whole=True) for prompt in prompts]
        input_ids, attention, positions, past, width = self._layout(prompts, reuse)
        rows = [(prompt, 0) for prompt in prompts]
        with self._computing() as dtype:
            cache = self._batch_cache(reuse, past, past + width, dtype)
            self.model(
                input_ids=input_ids,
                attention_mask=attention,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_keyword: cache},
            )
            # Completions of one token each: `_remember` keeps prompt + completion[:-1], the whole prompt.
            # A shorter shared prefix stays: rows that share only it still read it.
            batch, tokens = list(range(len(rows))), [[0] for _ in rows]
            self._remember(batch, rows, reuse, tokens, cache, past, past + width, batch, replace=False)

    def _batch_cache(self, reuse: list[Reuse], past: int, capacity: int, dtype: Any) -> Any:
        """The key/value cache of one batch: row b's reused prefix right-aligned in its first ``past``
        positions; room for ``capacity`` positions when the model's layers allow it (no copy per step),
        keys and values held in ``dtype`` (None: as computed)."""
        cache = _new_cache(self.model, capacity if self._preallocate else None, dtype)
        if past:
            _fill_past(cache, reuse, past)
            if self.prefix_cache is not None:
                # An entry that only this row reads and that its longer sequence will replace is now in the
                # batch cache: dropped at once, the call does not hold two copies of every conversation.
                for r in reuse:
                    if r.entry is not None and r.entry.pins == 1 and r.length == len(r.entry.tokens):
                        self.prefix_cache.discard(r.entry)
        return cache

    def _remember(
        self,
        batch: list[int],
        rows: list[tuple[list[int], int]],
        reuse: list[Reuse],
        tokens: list[list[int]],
        cache: Any,
        past: int,
        seen: int,
        store: Sequence[int],
        replace: bool = True,
    ) -> None:
        """Keep the keys/values (prompt + completion but the last token) of the rows at batch positions
        ``store`` in the prefix cache; ``batch[i]`` is the row at position ``i``.

        In the batch cache, a row with ``c`` reused tokens holds them at ``[past - c, past)``, then the ``n``
        other tokens of its prompt up to ``past + width`` and its fed completion tokens after; the copies
        leave all padding out. An entry a row extends is dropped (``replace``) once no other row of the call
        still reads it.
        """
        prefix = self.prefix_cache
        if prefix is None:
            return
        problem = _check_batch_cache(cache, len(batch), seen)
        if problem:
            log.warning("prefix cache off: %s", problem)
            self.prefix_cache = None
            return
        layers = cache.layers
        width = max(len(prompt) - r.length for (prompt, _), r in zip(rows, reuse, strict=True))
        first = layers[0].keys
        for i in store:
            (prompt, _), used = rows[batch[i]], reuse[batch[i]]
            prefix.release(used.entry)
            known = tuple(prompt) + tuple(tokens[batch[i]][:-1])  # the last token was sampled, never fed
            if len(known) > prefix.max_tokens:
                continue
            c, rest = used.length, len(known) - used.length
            start = past + width - (len(prompt) - c)
            kv = first.new_empty((len(layers), 2, first.shape[1], len(known), first.shape[3]))
            for j, layer in enumerate(layers):
                for k, states in enumerate((layer.keys, layer.values)):
                    kv[j, k, :, :c] = states[i, :, past - c : past]
                    kv[j, k, :, c:] = states[i, :, start : start + rest]
            full = replace and used.entry is not None and c == len(used.entry.tokens)
            prefix.add(known, kv, replaces=used.entry if full else None)

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
    # Inverse transform sampling: one uniform number per row from its generator, located in the row's
    # cumulative distribution (float64: 49k float32 probabilities would sum with visible rounding). Filtered
    # tokens have probability 0, a flat step that `right=True` never lands on. torch.multinomial draws one
    # random number per vocabulary entry instead (4% of a batch's generation time, torch profiler).
    cdf = logp.double().exp().cumsum(dim=-1)
    uniform = torch.cat([torch.rand(1, generator=g, device=g.device, dtype=cdf.dtype) for g in generators])
    target = (uniform * cdf[:, -1]).unsqueeze(-1)
    chosen = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=logits.shape[-1] - 1)
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


class _Entry:
    """The keys/values of one token sequence: ``kv`` [layers, 2 (keys, values), heads, len(tokens), dim]."""

    __slots__ = ("kv", "pins", "tokens")

    def __init__(self, tokens: tuple[int, ...], kv: torch.Tensor) -> None:
        self.tokens = tokens
        self.kv = kv
        self.pins = 0  # rows of the current call that will read this entry: it is not evicted meanwhile


class Reuse(NamedTuple):
    """What a row takes from the prefix cache: the first ``length`` positions of ``entry`` (0: nothing)."""

    entry: _Entry | None
    length: int


NO_REUSE = Reuse(None, 0)


class PrefixCache:
    """Keys/values of past sequences, keyed by their token ids, at most ``max_tokens`` tokens in all.

    ``lookup(prompt)`` finds the entry sharing the longest prefix with ``prompt`` (at most all but its last
    token, whose logits the model must still compute) and pins it until :meth:`release` or
    :meth:`unpin_all`; ``add`` stores an entry, dropping the one it extends and then the least recently used
    unpinned entries until it fits (it is not stored if it cannot fit). Entries are stored on the model's
    device, without padding. ``stats`` counts rows looked up, rows that reused a prefix and tokens reused.
    A lookup compares the prompt with every entry (C-speed tuple slices, a binary search on a partial match):
    cheap for the hundreds of entries a budget of tokens allows.
    """

    def __init__(self, max_tokens: int) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"prefix cache max_tokens must be a positive integer, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.tokens = 0
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()  # least recently used first
        self.stats = {"rows": 0, "hits": 0, "reused_tokens": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0

    def lookup(self, prompt: Sequence[int], *, whole: bool = False) -> Reuse:
        """The longest cached prefix of ``prompt``, pinned; all of it when ``whole`` (for a prompt that is
        only encoded, not continued), else at most all but its last token."""
        best, best_length = self._longest(tuple(prompt), len(prompt) if whole else len(prompt) - 1)
        self.stats["rows"] += 1
        if best is None:
            return NO_REUSE
        self._entries.move_to_end(best.tokens)
        best.pins += 1
        self.stats["hits"] += 1
        self.stats["reused_tokens"] += best_length
        return Reuse(best, best_length)

    def covered(self, prompt: Sequence[int]) -> int:
        """How many first tokens of ``prompt`` an entry holds (nothing is pinned or counted)."""
        return self._longest(tuple(prompt), len(prompt))[1]

    def _longest(self, key: tuple[int, ...], limit: int) -> tuple[_Entry | None, int]:
        best: _Entry | None = None
        best_length = 0
        for entry in reversed(self._entries.values()):  # most recent first: a continuation is usually there
            length = _common_prefix_length(key, entry.tokens, limit, best_length)
            if length > best_length:
                best, best_length = entry, length
        return best, best_length

    def release(self, entry: _Entry | None) -> None:
        if entry is not None and entry.pins > 0:
            entry.pins -= 1

    def unpin_all(self) -> None:
        for entry in self._entries.values():
            entry.pins = 0

    def add(self, tokens: tuple[int, ...], kv: torch.Tensor, replaces: _Entry | None = None) -> bool:
        """Store ``kv`` for ``tokens``; ``replaces`` (an entry ``tokens`` extend) is dropped unless pinned."""
        if replaces is not None and replaces.pins == 0 and self._entries.get(replaces.tokens) is replaces:
            self._drop(replaces.tokens)
        if tokens in self._entries:
            self._entries.move_to_end(tokens)
            return True
        pinned = sum(len(e.tokens) for e in self._entries.values() if e.pins > 0)
        if pinned + len(tokens) > self.max_tokens:
            return False  # it could not fit without dropping an entry a row of this call still reads
        for key in [k for k, e in self._entries.items() if e.pins == 0]:
            if self.tokens + len(tokens) <= self.max_tokens:
                break
            self._drop(key)
        self._entries[tokens] = _Entry(tokens, kv)
        self.tokens += len(tokens)
        return True

    def discard(self, entry: _Entry) -> None:
        """Forget ``entry`` now (its reader holds a copy of what it needs)."""
        if self._entries.get(entry.tokens) is entry:
            self._drop(entry.tokens)

    def _drop(self, key: tuple[int, ...]) -> None:
        self.tokens -= len(self._entries.pop(key).tokens)


# Finished rows leave the batch once they are at least 1 / COMPACT_SHARE of it (each compaction copies the
# cache of the rows that stay, about the cost of one decoding step's cache append).
COMPACT_SHARE = 4
SHARED_PREFIX_MIN_TOKENS = 32  # shorter shared prefixes are not worth a forward pass of their own


def shared_prefixes(prompts: Sequence[Sequence[int]], min_tokens: int) -> list[tuple[int, ...]]:
    """The prefixes of at least ``min_tokens`` tokens that two or more of ``prompts`` share, shortest
    first: the longest common prefix of each pair of neighbours in sorted order (every pair's longest
    common prefix is one of them or a prefix of one), at most all but the last token of the shorter prompt
    (its logits must still be computed)."""
    counts = Counter(tuple(p) for p in prompts)
    # The same prompt more than once: all but its last token.
    found = {p[:-1] for p, n in counts.items() if n > 1 and len(p) - 1 >= min_tokens}
    for a, b in itertools.pairwise(sorted(counts)):
        limit = min(len(a), len(b)) - 1
        length = _common_prefix_length(a, b, limit, 0)
        if length >= min_tokens:
            found.add(a[:length])
    return sorted(found, key=lambda p: (len(p), p))


def _common_prefix_length(a: tuple[int, ...], b: tuple[int, ...], limit: int, floor: int) -> int:
    """The length of the longest common prefix of ``a`` and ``b``, at most ``limit``; 0 when it is not longer
    than ``floor`` (the caller has one that long already)."""
    high = min(len(a), len(b), limit)
    if high <= floor or a[: floor + 1] != b[: floor + 1]:
        return 0
    if a[:high] == b[:high]:
        return high
    low = floor + 1  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


def _why_no_prefix_cache(model: PreTrainedModel) -> str:
    """Why the model's key/value cache cannot be rebuilt from stored tensors, or "" when it can."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return "this transformers version has no DynamicLayer"
    cache = _new_cache(model)
    layers = getattr(cache, "layers", None)
    if layers is None:
        return f"{type(cache).__name__} has no layers"
    if not layers:
        replicated = getattr(cache, "layer_class_to_replicate", None)
        return "" if replicated is DynamicLayer else f"cache layers of type {replicated!r}"
    kinds = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    return f"the model's cache has {', '.join(kinds)} layers (only DynamicLayer works)" if kinds else ""


def _check_batch_cache(cache: Any, rows: int, seen: int) -> str:
    """What is wrong with a filled batch cache for the prefix cache ("" when every layer holds [rows, heads,
    seen, dim] tensors of one shape and dtype)."""
    layers = getattr(cache, "layers", None)
    first = getattr(layers[0], "keys", None) if layers else None
    if first is None or first.dim() != 4:
        return "the model's cache does not hold [batch, heads, positions, head_dim] keys per layer"
    shape = (rows, first.shape[1], seen, first.shape[3])
    for layer in layers:
        for states in (layer.keys, layer.values):
            if states is None or states.dim() != 4 or tuple(states.shape) != shape:
                found = None if states is None else tuple(states.shape)
                return f"a cache layer holds {found}, not {shape} (batch, heads, positions, head_dim)"
            if states.dtype != first.dtype:
                return "cache layers of different dtypes"
    return ""


def _fill_past(cache: Any, reuse: list[Reuse], past: int) -> None:
    """Fill an empty cache with, per layer, row b's reused keys/values right-aligned in ``past`` positions
    (zeros before them: masked padding)."""
    sample = next(r.entry.kv for r in reuse if r.entry is not None)
    layers, _, heads, _, dim = sample.shape
    for i in range(layers):  # one layer at a time: the padded copy is transient
        kv = sample.new_zeros((2, len(reuse), heads, past, dim))
        for b, r in enumerate(reuse):
            if r.entry is not None and r.length:
                kv[:, b, :, past - r.length :] = r.entry.kv[i, :, :, : r.length]
        cache.update(kv[0], kv[1], i)


@functools.cache
def _growing_layer_class() -> type:
    """:class:`GrowingLayer` (defined on first use: this module imports transformers lazily)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values are views of buffers with room for ``capacity`` positions.

        ``DynamicLayer.update`` concatenates: every decoding step copies the whole cache of every layer (a
        quarter of the CPU time of a batch of 32 at 64 new tokens, measured with the torch profiler). Here
        ``update`` writes the new positions in place and the buffers double when full. ``keys``/``values``
        are always the filled part ``[batch, heads, :length, dim]``, so what reads a ``DynamicLayer`` reads
        this one alike.
        """

        def __init__(self, capacity: int, dtype: torch.dtype | None = None) -> None:
            super().__init__()
            self.capacity = max(1, capacity)
            self.dtype = dtype  # keys and values are stored in it (None: as they come)
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
            self._length = 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            # Under bfloat16 autocast (ours, or accelerate's around a model trained with bf16) keys arrive in
            # float32 (rotary embeddings promote them) and values in bfloat16; attention computes in bfloat16
            # all the same, so both are kept in it.
            dtype = self.dtype or (value_states.dtype if key_states.dtype != value_states.dtype else None)
            if dtype is not None:
                key_states, value_states = key_states.to(dtype), value_states.to(dtype)
            if not self.is_initialized:
                self.device = key_states.device
                self.is_initialized = True
            end = self._length + key_states.shape[-2]
            if self._buffers is None or end > self._buffers[0].shape[-2]:
                self._reserve(key_states, value_states, max(end, self.capacity, 2 * self._length))
            keys, values = self._buffers
            keys[:, :, self._length : end].copy_(key_states)
            values[:, :, self._length : end].copy_(value_states)
            self._length = end
            self.keys, self.values = keys[:, :, :end], values[:, :, :end]
            return self.keys, self.values

        def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, room: int) -> None:
            def buffer(states: torch.Tensor, old: torch.Tensor | None) -> torch.Tensor:
                batch, heads, _, dim = states.shape
                new = states.new_empty((batch, heads, room, dim))
                if old is not None and self._length:
                    new[:, :, : self._length].copy_(old[:, :, : self._length])
                return new

            old = self._buffers or (None, None)
            self._buffers = (buffer(key_states, old[0]), buffer(value_states, old[1]))

        def get_seq_length(self) -> int:
            return self._length

        def reset(self) -> None:
            self._buffers, self._length = None, 0
            super().reset()

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes the negative number of positions to remove")
            if tokens_to_remove and self._buffers is not None:
                self._length = max(0, self._length + tokens_to_remove)
                self.keys, self.values = (b[:, :, : self._length] for b in self._buffers)

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self._buffers is not None:
                self._buffers = tuple(b[indices] for b in self._buffers)  # type: ignore[assignment]
                self.keys, self.values = (b[:, :, : self._length] for b in self._buffers)

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self._buffers is not None:
                self._buffers = tuple(b.repeat_interleave(repeats, dim=0) for b in self._buffers)  # type: ignore[assignment]
                self.keys, self.values = (b[:, :, : self._length] for b in self._buffers)

    return GrowingLayer


def _weights_fingerprint(model: PreTrainedModel) -> tuple[Any, Any]:
    """A cheap identity of the weights: each parameter's storage and version counter, and a strided sample of
    its values (fused optimisers update in place without bumping version counters). About 4 ms for 135M
    parameters on a CPU."""
    import torch

    params = [p for p in model.parameters() if p.device.type != "meta"]
    identity = tuple((p.data_ptr(), p._version, p.dtype) for p in params)
    with torch.no_grad():
        values = [p.detach().reshape(-1)[:: max(1, p.numel() // 16)].float() for p in params]
        sample = torch.cat(values) if values else torch.zeros(0)
    return identity, sample


def _same_fingerprint(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    import torch

    return a[0] == b[0] and a[1].shape == b[1].shape and bool(torch.equal(a[1], b[1]))


def _new_cache(model: PreTrainedModel, capacity: int | None = None, dtype: Any = None) -> Any:
    """An empty dynamic key/value cache, filled in place by each forward pass; with ``capacity``, its layers
    are ``GrowingLayer`` s (:func:`_growing_layer_class`) with room for that many positions (only for a
    cache of plain ``DynamicLayer`` s: the caller checks with :func:`_why_no_prefix_cache`), holding keys
    and values in ``dtype`` (None: as they come)."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # older transformers: no config argument
        cache = DynamicCache()
    if capacity is not None:
        if cache.layers:
            cache.layers = [_growing_layer_class()(capacity, dtype) for _ in cache.layers]
        else:
            cache.layer_class_to_replicate = functools.partial(_growing_layer_class(), capacity, dtype)
    return cache


def _autocast_dtype(model: PreTrainedModel, setting: str) -> Any:
    """The dtype generation autocasts to (None: none), from ``TransformersConfig.autocast``."""
    import torch

    first = next(model.parameters(), None)
    if setting == "off" or first is None or first.dtype != torch.float32:
        return None  # weights already in a lower precision compute in it
    if setting == "bfloat16":
        return torch.bfloat16
    return torch.bfloat16 if first.device.type == "cpu" and cpu_has_fast_bf16() else None


def _pick_device(device: str) -> str:
    import torch

    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"
