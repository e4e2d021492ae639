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

**Prefix cache.** After a call, the keys and values of every row's sequence are kept, keyed by their token
ids, and the next call feeds only what a prompt adds to its longest cached prefix: see
:mod:`spade_rl.policy.prefix_cache` (the cache, and when it is dropped) and :mod:`spade_rl.policy.kv_cache`
(the batch's key/value cache). A training loop should call :meth:`TransformersPolicy.clear_prefix_cache`
after each update. Sampling itself is :func:`spade_rl.policy.sampling.choose_tokens`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from spade_rl.memory import release_unused_memory
from spade_rl.policy.base import (
    Generation,
    Policy,
    PolicyError,
    SamplingSettings,
    check_budgets,
    check_token_prompts,
    cut_at_stop,
    derive_seed,
    stop_token_ids_of,
)
from spade_rl.policy.config import TransformersConfig
from spade_rl.policy.decode_attention import decoding_attention, set_attention
from spade_rl.policy.kv_cache import (
    batch_chunks,
    check_batch_cache,
    fill_past,
    keep_rows,
    new_cache,
    padded_layout,
    why_no_prefix_cache,
)
from spade_rl.policy.models import choose_device, load_pretrained
from spade_rl.policy.packed_prefill import feed_packed, why_not_packed
from spade_rl.policy.packed_weights import PackedLinears
from spade_rl.policy.precision import autocast_dtype, generation_precision
from spade_rl.policy.prefix_cache import (
    NO_REUSE,
    SHARED_PREFIX_MIN_TOKENS,
    PrefixCache,
    Reuse,
    same_fingerprint,
    shared_prefixes,
    weights_fingerprint,
)
from spade_rl.policy.sampling import choose_tokens

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Finished rows leave the batch once they are at least 1 / COMPACT_SHARE of it (each compaction copies the
# cache of the rows that stay, about the cost of one decoding step's cache append).
COMPACT_SHARE = 4
# A prompt batch of more tokens than this (packed: its tokens; left-padded: rows x width) is fed in
# stretches (column chunks) of about as many (TransformersPolicy._prefill, _forward): the activations of a
# forward pass grow with its tokens.
PREFILL_TOKENS = 4096


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
        # The attention generation runs: as configured, or SDPA on the CPU, where spade-rl's own decoding and
        # packed-prompt variants of it apply (decode_attention, packed_prefill).
        if self.config.attn_implementation is not None:
            set_attention(model, self.config.attn_implementation)
        elif next(model.parameters()).device.type == "cpu":
            try:
                set_attention(model, "sdpa")
            except (ValueError, ImportError) as error:  # a model without SDPA keeps its own attention
                log.info("generation keeps the model's attention (no SDPA: %s)", error)
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
        self._packed_linears = PackedLinears()  # bfloat16 weights packed for the CPU's products
        self._weights: tuple[Any, Any] | None = None  # the fingerprint the cached keys/values belong to
        unsupported = why_no_prefix_cache(model)
        # Plain dynamic layers can be replaced by preallocated ones (the same interface, no copy per step).
        self._preallocate = not unsupported
        self.autocast_dtype = autocast_dtype(model, self.config.autocast)
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
        device = choose_device(config.device)
        model, tokenizer = load_pretrained(name_or_path, device=device, dtype=config.dtype)
        return cls(model, tokenizer, config)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def clear_prefix_cache(self) -> None:
        """Forget every cached key/value and packed weight: call it when the model's weights are about to
        change or have changed (each training update)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        self._weights = None
        self._packed_linears.clear()

    def close(self) -> None:
        self.clear_prefix_cache()
        super().close()

    def generate_tokens(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        settings: SamplingSettings,
        *,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        prompts = check_token_prompts(prompt_token_ids)
        limits = check_budgets(budgets, len(prompts), settings)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for i, prompt in enumerate(prompts):
            if limit is not None and len(prompt) + limits[i] > limit:
                raise ValueError(
                    f"prompt {i} has {len(prompt)} tokens; with max_new_tokens={limits[i]} "
                    f"that exceeds the model's {limit} positions"
                )
        # Row i * n + j is sample j of prompt i, with its own seed and prompt i's budget.
        rows = [
            (prompt, derive_seed(settings.seed, i * settings.n + j))
            for i, prompt in enumerate(prompts)
            for j in range(settings.n)
        ]
        row_budgets = [limits[i] for i in range(len(prompts)) for _ in range(settings.n)]
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
            lengths = [len(prompt) for prompt, _ in rows]
            for chunk in self._batches(order, lengths, settings.max_new_tokens):
                generations = self._generate_batch(
                    [rows[r] for r in chunk],
                    [reuse[r] for r in chunk],
                    settings,
                    [row_budgets[r] for r in chunk],
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

    def _batches(self, order: Sequence[int], lengths: list[int], new_tokens: int) -> list[list[int]]:
        """The rows ``order`` in batches of at most ``batch_size`` rows and ``batch_tokens`` positions."""
        return batch_chunks(order, lengths, new_tokens, self.config.batch_size, self.config.batch_tokens)

    def _prefix_cache_for_call(self) -> PrefixCache | None:
        """The prefix cache, emptied first if the weights changed since it was filled; ``None`` when off."""
        if self.prefix_cache is None:
            return None
        weights = weights_fingerprint(self.model)
        if self._weights is not None and not same_fingerprint(weights, self._weights):
            log.debug("the model's weights changed: prefix cache cleared")
            self.prefix_cache.clear()
        self._weights = weights
        return self.prefix_cache

    def _generate_batch(
        self,
        rows: list[tuple[list[int], int]],
        reuse: list[Reuse],
        settings: SamplingSettings,
        budgets: list[int],
    ) -> list[Generation]:
        """One batch of rows, each ending at its own budget of new tokens (``budgets``, one per row)."""
        import torch

        device = self.device
        generators = None
        if not settings.greedy:
            generators = [torch.Generator(device=device).manual_seed(seed) for _, seed in rows]
        stop_ids = self.eos_token_ids | set(settings.stop_token_ids)

        tokens: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        finish: list[str | None] = [None] * len(rows)
        batch = list(range(len(rows)))  # the row at each position of the batch (finished rows leave it)
        packed = self._packs()
        with self._computing() as dtype:
            cache, logits, attention, positions, slots = self._prefill(
                [prompt for prompt, _ in rows], reuse, max(budgets), dtype, packed
            )
            input_ids: Any = None  # each step's sampled tokens, fed at the next
            for step in range(max(budgets)):
                if step:
                    logits = self._forward(input_ids, attention, positions, cache)
                chosen, chosen_logprobs = choose_tokens(logits, settings, generators)
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
                    elif len(tokens[b]) >= budgets[b]:
                        finish[b] = "length"
                done = [i for i, b in enumerate(batch) if finish[b] is not None]
                if len(done) == len(batch):
                    break
                if self._preallocate and len(done) * COMPACT_SHARE >= len(batch):
                    # Finished rows leave the batch (their keys/values kept first): every later step costs
                    # only the rows still generating.
                    self._remember(batch, rows, reuse, tokens, cache, slots, attention.shape[1], done)
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
            everything = range(len(batch))
            self._remember(
                batch, rows, reuse, tokens, cache, slots, attention.shape[1], everything, last=True
            )
        return [
            self._finish(prompt, tokens[b], logprobs[b], finish[b] or "length", settings)
            for b, (prompt, _) in enumerate(rows)
        ]

    def _forward(self, input_ids: Any, attention: Any, positions: Any, cache: Any) -> Any:
        """Feed ``input_ids`` [rows, width] into ``cache`` and return the float32 logits of their last
        position [rows, vocab]. ``attention`` covers the cache's past and these ids.

        A wide prompt batch goes in column chunks of about :data:`PREFILL_TOKENS` tokens (each chunk attends
        to the cache the ones before it filled): the activations of one forward pass grow with its tokens,
        while the chunks cost one more read of the weights each, and the memory a chunk freed goes back to
        the system before the next one (:mod:`spade_rl.memory`). Results equal a single pass up to float
        rounding."""
        rows, width = input_ids.shape
        past = attention.shape[1] - width
        step = max(1, PREFILL_TOKENS // max(1, rows))
        for start in range(0, width, step):
            stop = min(width, start + step)
            if start:
                release_unused_memory()
            out = self.model(
                input_ids=input_ids[:, start:stop],
                attention_mask=attention[:, : past + stop],
                position_ids=positions[:, start:stop],
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_keyword: cache},
            )
        return out.logits[:, -1, :].float()

    @contextlib.contextmanager
    def _computing(self) -> Iterator[Any]:
        """The model's state for a forward pass of generation: :meth:`_precision`, and on the CPU attention
        over each row's own span when decoding (:mod:`spade_rl.policy.decode_attention`)."""
        with decoding_attention(self.model), self._precision() as dtype:
            yield dtype

    def _precision(self) -> contextlib.AbstractContextManager[Any]:
        """No gradients, in the precision of generation
        (:func:`~spade_rl.policy.precision.generation_precision`): yields the dtype the call's key/value
        caches hold (None: as computed)."""
        model, config = self.model, self.config
        return generation_precision(model, self.autocast_dtype, config.autocast, self._packed_linears)

    def _packs(self) -> bool:
        """Whether this call feeds its prompts packed (:mod:`spade_rl.policy.packed_prefill`)."""
        return self.config.packed_prefill and self._preallocate and not why_not_packed(self.model)

    def _prefill(
        self, prompts: list[list[int]], reuse: list[Reuse], new_tokens: int, dtype: Any, packed: bool
    ) -> tuple[Any, Any, Any, Any, list[tuple[int, int]]]:
        """Feed the prompts (what each adds to its reused prefix) into a new batch cache with room for
        ``new_tokens`` more positions. Returns the cache, the float32 logits of each row's last prompt
        token [rows, vocab], the attention mask over the cache [rows, positions], each row's last position
        id [rows, 1] and, per row, where its reused prefix ends and its other tokens start in the cache
        (:meth:`_remember`).

        Packed (``packed``): the new tokens of all rows as one sequence, row b's positions right-aligned in
        ``[width - len(prompt_b), width)`` without gaps; else left-padded: ``[pad | cached prefix | pad |
        rest of the prompt]`` (:func:`~spade_rl.policy.kv_cache.padded_layout`)."""

        if not packed:
            input_ids, attention, positions, past, width = padded_layout(prompts, reuse, self.pad_token_id)
            input_ids, attention, positions = (t.to(self.device) for t in (input_ids, attention, positions))
            cache = self._batch_cache(reuse, past, past + width + new_tokens, dtype)
            logits = self._forward(input_ids, attention, positions, cache)
            fed = [len(prompt) - r.length for prompt, r in zip(prompts, reuse, strict=True)]
            return cache, logits, attention, positions, [(past, past + width - n) for n in fed]
        lengths = [len(prompt) for prompt in prompts]
        fed = [length - r.length for length, r in zip(lengths, reuse, strict=True)]
        width = max(lengths)
        starts = [width - n for n in fed]
        past = width if any(r.length for r in reuse) else 0
        cache = self._batch_cache(reuse, past, width + new_tokens, dtype, ends=starts)
        logits, attention, positions = feed_packed(
            self.model, cache, prompts, reuse, width, PREFILL_TOKENS, self._cache_keyword
        )
        return cache, logits, attention, positions, [(s, s) for s in starts]

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
            for chunk in self._batches(range(len(ready)), [len(p) for p in ready], 0):
                self._encode_only([list(ready[i]) for i in chunk])

    def _encode_only(self, prompts: list[list[int]]) -> None:
        """Encode ``prompts`` (reusing what the prefix cache holds) and keep their keys/values there."""

        prefix = self.prefix_cache
        if prefix is None:  # turned off by a cache it could not read (logged)
            return
        prompts = [p for p in prompts if prefix.covered(p) < len(p)]
        if not prompts:
            return
        reuse = [prefix.lookup(prompt, whole=True) for prompt in prompts]
        rows = [(prompt, 0) for prompt in prompts]
        packed = self._packs()
        with self._computing() as dtype:
            cache, _, attention, _, slots = self._prefill(prompts, reuse, 0, dtype, packed)
            # Completions of one token each: `_remember` keeps prompt + completion[:-1], the whole prompt.
            # A shorter shared prefix stays: rows that share only it still read it.
            batch, tokens = list(range(len(rows))), [[0] for _ in rows]
            seen = attention.shape[1]
            self._remember(batch, rows, reuse, tokens, cache, slots, seen, batch, replace=False, last=True)

    def _batch_cache(
        self, reuse: list[Reuse], past: int, capacity: int, dtype: Any, ends: list[int] | None = None
    ) -> Any:
        """The key/value cache of one batch: row b's reused prefix in its first ``past`` positions, ending at
        ``ends[b]`` (None: right-aligned at ``past``); room for ``capacity`` positions when the model's
        layers allow it (no copy per step), keys and values held in ``dtype`` (None: as computed)."""
        cache = new_cache(self.model, capacity if self._preallocate else None, dtype)
        if past:
            fill_past(cache, reuse, past, ends)
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
        slots: list[tuple[int, int]],
        seen: int,
        store: Sequence[int],
        replace: bool = True,
        last: bool = False,
    ) -> None:
        """Keep the keys/values of the rows at batch positions ``store`` in the prefix cache
        (:func:`spade_rl.policy.kv_cache.keep_rows`); a batch cache it cannot read turns the cache off."""
        if self.prefix_cache is None:
            return
        problem = check_batch_cache(cache, len(batch), seen)
        if problem:
            log.warning("prefix cache off: %s", problem)
            self.prefix_cache = None
            return
        prompts = [rows[b][0] for b in batch]
        keep_rows(
            self.prefix_cache,
            cache,
            prompts,
            [reuse[b] for b in batch],
            [tokens[b] for b in batch],
            [slots[b] for b in batch],
            store,
            replace=replace,
            last=last,
        )

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
