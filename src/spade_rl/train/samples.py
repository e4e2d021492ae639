"""Training samples of both roles: what the loop hands the learner for one step.

    sample = sample_from_episode(episode, advantage=0.8, group=3)          # agent: a no-hint episode
    sample = sample_from_generation(outcome.generation, advantage=-0.1, group=0)  # designer: one proposal

A :class:`Sample` is one sequence: the prompt the model was given, the completion that followed it, which
completion tokens the model wrote (``completion_mask`` 1) and which the environment or the chat template
added (0), the sampling log-probability of each completion token (0.0 where the mask is 0), the advantage
(already computed by the loop with :mod:`spade_rl.rewards`: the learner uses it as it is) and the group it
was compared within. The samples of one group are consecutive (:func:`split_groups`).

Truncation rule (:meth:`Sample.truncated`): a completion longer than ``max_completion_length`` keeps its
first ``max_completion_length`` tokens, with their mask and log-probs; the tail is dropped. Keeping the head
leaves every kept token's context, hence its log-probability, exactly as sampled. Prompts are never cut:
cutting a prompt changes what every completion token was conditioned on.

**The padded batch** (:func:`pad_samples`, :class:`TokenBatch`): the one reshape between the loop's records
and the loss. A row is the sample's prompt followed by its completion, right-padded to the widest row.
Column ``t`` of every per-token tensor describes the token ``input_ids[:, t]``: ``trained`` is 1 where that
token was written by the model and is trained (never the prompt, the environment's tokens, the chat
template's, or padding), ``sampling_logps`` the sampler's log-probability of it (0 elsewhere). The
model's prediction of the token at ``t`` comes from position ``t - 1``
(:func:`spade_rl.train.scoring.trained_logps` does that shift). There are no filler rows: a batch holds
exactly its samples. :meth:`TokenBatch.micro_batches` cuts it into row slices of similar length, each
trimmed to its widest row.

    batch = pad_samples(samples, pad_id=tokenizer.pad_token_id, max_completion_length=4096)
    for micro in batch.micro_batches(rows=2):      # micro.input_ids [B, W], micro.trained [B, W], ...
        ...
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from spade_rl.policy import Generation
    from spade_rl.rollout import Episode

ROLES = ("designer", "agent")


@dataclass(frozen=True)
class Sample:
    """One training sequence of one role. Token sequences are stored as tuples (the record is frozen).

    ``completion_ids`` may be empty (an episode that ended before the model wrote anything): the sample
    then trains nothing but still belongs to its group, whose advantages were computed with it.
    """

    role: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    advantage: float
    group: int

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"sample role {self.role!r} is not one of {list(ROLES)}")
        for name in ("prompt_ids", "completion_ids", "completion_mask", "logprobs"):
            value = getattr(self, name)
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                raise ValueError(f"sample {name} must be a sequence, got {type(value).__name__}")
            object.__setattr__(self, name, tuple(value))
        if not self.prompt_ids:
            raise ValueError(
                "sample prompt_ids must not be empty (the first completion token needs a context)"
            )
        if any(not isinstance(t, numbers.Integral) or t < 0 for t in self.prompt_ids + self.completion_ids):
            raise ValueError("sample prompt_ids and completion_ids must be non-negative ints")
        n = len(self.completion_ids)
        if len(self.completion_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"sample completion_mask ({len(self.completion_mask)}) and logprobs ({len(self.logprobs)}) "
                f"must have one entry per completion token ({n})"
            )
        if any(m not in (0, 1) for m in self.completion_mask):
            raise ValueError(
                "sample completion_mask must hold only 0 (environment token) and 1 (model token)"
            )
        if not all(math.isfinite(x) for x in self.logprobs):
            raise ValueError("sample logprobs must be finite")
        if not math.isfinite(self.advantage):
            raise ValueError(f"sample advantage must be finite, got {self.advantage}")
        object.__setattr__(self, "advantage", float(self.advantage))
        if not isinstance(self.group, numbers.Integral):
            raise ValueError(f"sample group must be an int, got {type(self.group).__name__}")
        object.__setattr__(self, "group", int(self.group))

    @property
    def model_tokens(self) -> int:
        """Completion tokens that are trained (mask 1)."""
        return sum(self.completion_mask)

    def truncated(self, max_completion_length: int) -> Sample:
        """The sample with its completion cut to its first ``max_completion_length`` tokens (or itself)."""
        if max_completion_length < 1:
            raise ValueError(f"max_completion_length must be at least 1, got {max_completion_length}")
        if len(self.completion_ids) <= max_completion_length:
            return self
        keep = slice(0, max_completion_length)
        return replace(
            self,
            completion_ids=self.completion_ids[keep],
            completion_mask=self.completion_mask[keep],
            logprobs=self.logprobs[keep],
        )


def sample_from_episode(episode: Episode, advantage: float, group: int) -> Sample:
    """An agent sample from an :class:`~spade_rl.rollout.Episode`, split at ``episode.prompt_length``:
    the prompt is ``token_ids[:prompt_length]``, the completion (with its mask and log-probs) the rest."""
    cut = episode.prompt_length
    if not 0 < cut <= len(episode.token_ids):
        raise ValueError(f"episode prompt_length {cut} is outside its {len(episode.token_ids)} tokens")
    return Sample(
        role="agent",
        prompt_ids=tuple(episode.token_ids[:cut]),
        completion_ids=tuple(episode.token_ids[cut:]),
        completion_mask=tuple(episode.mask[cut:]),
        logprobs=tuple(episode.logprobs[cut:]),
        advantage=advantage,
        group=group,
    )


def sample_from_generation(
    generation: Generation, advantage: float, group: int, role: str = "designer"
) -> Sample:
    """A sample from one :class:`~spade_rl.policy.Generation` (a designer proposal by default): the prompt
    is ``prompt_token_ids``, the completion ``completion_token_ids``, every completion token trained."""
    if generation.prompt_token_ids is None or generation.completion_token_ids is None:
        raise ValueError("the generation carries no token ids (the backend did not return them)")
    if generation.completion_logprobs is None:
        raise ValueError("the generation carries no log-probabilities (sample with logprobs=True)")
    n = len(generation.completion_token_ids)
    return Sample(
        role=role,
        prompt_ids=tuple(generation.prompt_token_ids),
        completion_ids=tuple(generation.completion_token_ids),
        completion_mask=(1,) * n,
        logprobs=tuple(generation.completion_logprobs),
        advantage=advantage,
        group=group,
    )


def split_groups(samples: Sequence[Sample]) -> list[list[Sample]]:
    """The samples cut into their groups, in order; a group id met again after another group is an error."""
    groups: list[list[Sample]] = []
    seen: set[int] = set()
    for sample in samples:
        if groups and groups[-1][0].group == sample.group:
            groups[-1].append(sample)
            continue
        if sample.group in seen:
            raise ValueError(
                f"group {sample.group} appears in two places: the samples of one group must be consecutive"
            )
        seen.add(sample.group)
        groups.append([sample])
    return groups


@dataclass(frozen=True)
class TokenBatch:
    """Rows of token ids with what the loss needs of each (shapes: B rows, W columns)."""

    input_ids: torch.Tensor  # [B, W] long: prompt + completion, then padding
    attention_mask: torch.Tensor  # [B, W] long: 1 on the row's tokens
    trained: torch.Tensor  # [B, W] float: 1 on the tokens the loss trains
    sampling_logps: torch.Tensor  # [B, W] float: the sampler's log-prob of each trained token
    advantages: torch.Tensor  # [B] float
    roles: tuple[str, ...]
    truncated: int = 0  # samples whose completion was cut to max_completion_length

    def __len__(self) -> int:
        return len(self.roles)

    @property
    def lengths(self) -> torch.Tensor:
        return self.attention_mask.sum(1)

    def to(self, device: torch.device | str) -> TokenBatch:
        move = {k: getattr(self, k).to(device) for k in _TENSORS}
        return TokenBatch(**move, roles=self.roles, truncated=self.truncated)

    def select(self, rows: Sequence[int]) -> TokenBatch:
        """The given rows, cut to the widest of them."""
        import torch

        index = torch.tensor(list(rows), dtype=torch.long)
        width = max(1, int(self.lengths[index].max())) if len(index) else 1
        taken = {k: getattr(self, k)[index] for k in _TENSORS}
        for key in ("input_ids", "attention_mask", "trained", "sampling_logps"):
            taken[key] = taken[key][:, :width]
        return TokenBatch(**taken, roles=tuple(self.roles[i] for i in rows))

    def micro_batches(self, rows: int) -> list[TokenBatch]:
        """Micro-batches of at most ``rows`` rows, longest rows first, each cut to its own widest row: a
        600-token designer row does not make every short agent row in the batch cost 600 tokens."""
        if rows < 1:
            raise ValueError(f"rows per micro-batch must be at least 1, got {rows}")
        lengths = self.lengths.tolist()
        order = sorted(range(len(self)), key=lambda r: (-lengths[r], r))
        return [self.select(order[i : i + rows]) for i in range(0, len(order), rows)]

    def counts(self) -> dict[str, float]:
        """Per role: samples, trained tokens and the mean |advantage| (``<role>/samples`` ...)."""
        out: dict[str, float] = {}
        tokens = self.trained.sum(1)
        for role in ROLES:
            rows = [i for i, r in enumerate(self.roles) if r == role]
            out[f"{role}/samples"] = float(len(rows))
            out[f"{role}/model_tokens"] = float(tokens[rows].sum()) if rows else 0.0
            out[f"{role}/advantage_abs_mean"] = float(self.advantages[rows].abs().mean()) if rows else 0.0
        return out


_TENSORS = ("input_ids", "attention_mask", "trained", "sampling_logps", "advantages")


def pad_samples(
    samples: Sequence[Sample], pad_id: int, max_completion_length: int | None = None
) -> TokenBatch:
    """The samples as one right-padded :class:`TokenBatch` (see the module docstring)."""
    import torch

    truncated = 0
    rows = []
    for sample in samples:
        if not isinstance(sample, Sample):
            raise TypeError(f"expected spade_rl.train.Sample records, got {type(sample).__name__}")
        if max_completion_length is not None and len(sample.completion_ids) > max_completion_length:
            sample = sample.truncated(max_completion_length)
            truncated += 1
        rows.append(sample)
    width = max((len(s.prompt_ids) + len(s.completion_ids) for s in rows), default=1)
    count = len(rows)
    input_ids = torch.full((count, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((count, width), dtype=torch.long)
    trained = torch.zeros((count, width))
    sampling = torch.zeros((count, width))
    for i, s in enumerate(rows):
        start, end = len(s.prompt_ids), len(s.prompt_ids) + len(s.completion_ids)
        input_ids[i, :end] = torch.tensor(s.prompt_ids + s.completion_ids, dtype=torch.long)
        attention_mask[i, :end] = 1
        if end > start:
            trained[i, start:end] = torch.tensor(s.completion_mask, dtype=torch.float)
            sampling[i, start:end] = torch.tensor(s.logprobs, dtype=torch.float) * trained[i, start:end]
    return TokenBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        trained=trained,
        sampling_logps=sampling,
        advantages=torch.tensor([s.advantage for s in rows], dtype=torch.float),
        roles=tuple(s.role for s in rows),
        truncated=truncated,
    )


def sft_rows(rows: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int) -> TokenBatch:
    """(prompt ids, target ids) pairs as a :class:`TokenBatch` whose trained tokens are the targets (the
    warm-up's supervised rows; advantages 0, role "designer")."""
    samples = []
    for prompt, target in rows:
        target = tuple(target)
        samples.append(
            Sample("designer", tuple(prompt), target, (1,) * len(target), (0.0,) * len(target), 0.0, 0)
        )
    return pad_samples(samples, pad_id)
