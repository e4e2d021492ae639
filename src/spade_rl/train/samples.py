"""Training samples of both roles, and the fixed-size batch of GRPO groups that one update consumes.

    sample = sample_from_episode(episode, advantage=0.8, group=3)          # agent: a no-hint episode
    sample = sample_from_generation(outcome.generation, advantage=-0.1, group=0)  # designer: one proposal
    batch = assemble_batch(samples, group_size=8, rows=32, filler_token_id=tokenizer.pad_token_id)

A :class:`Sample` is one sequence: the prompt the model was given, the completion that followed it, which
completion tokens the model wrote (``completion_mask`` 1) and which the environment or the chat template
added (0), the sampling log-probability of each completion token (0.0 where the mask is 0), the advantage
(already computed by the loop with :mod:`spade_rl.rewards`) and the group it was compared within.

Truncation rule (:meth:`Sample.truncated`): a completion longer than ``max_completion_length`` keeps its
first ``max_completion_length`` tokens, with their mask and log-probs; the tail is dropped. Keeping the head
leaves every kept token's context, hence its log-probability, exactly as sampled. Prompts are never cut:
cutting a prompt changes what every completion token was conditioned on.

The batch (:func:`assemble_batch`): TRL's GRPO forms groups from consecutive blocks of ``group_size``
(G) rows and subtracts each block's mean reward. Our groups are therefore laid out one per block, in the
order given; a group of fewer than G samples is completed with filler rows, and the batch is completed
with whole filler blocks up to ``rows``. A filler row has a one-token prompt and a one-token completion
with mask 0 and advantage 0.0: it contributes nothing to the loss and, since every group's advantages
sum to zero (checked here), it leaves each block's mean at zero, so TRL's centring changes nothing. Losses
normalised by trained tokens ("dapo", the default, "bnpo", "cispo", "vespo") are unchanged by fillers;
those averaged over rows ("grpo", "sapo", "luspo", and "dr_grpo" over rows x max length) count them in
the denominator, which scales the step by real rows / all rows. Fillers cost compute like real rows. A
batch with more than ``rows`` rows after this layout, a group of more than G samples, a group split into
two runs, a group mixing roles, or a group whose advantages are not centred is an error that says so.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spade_rl.policy import Generation
    from spade_rl.rollout import Episode

ROLES = ("designer", "agent")
CENTRING_TOLERANCE = 1e-6  # |sum of a group's advantages| allowed, per sample, relative to max(1, max |a|)


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


@dataclass
class Batch:
    """Rows in TRL's layout: block ``k`` (rows ``k*G .. k*G+G-1``) holds one group, then filler rows."""

    prompt_ids: list[list[int]] = field(default_factory=list)
    completion_ids: list[list[int]] = field(default_factory=list)
    completion_mask: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    filler: list[bool] = field(default_factory=list)
    truncated: int = 0  # samples whose completion was cut

    def __len__(self) -> int:
        return len(self.roles)

    def add(self, sample: Sample, filler: bool, filler_token_id: int) -> None:
        completion = list(sample.completion_ids)
        mask, logprobs = list(sample.completion_mask), list(sample.logprobs)
        if not completion:  # TRL needs at least one completion token: one that is not trained
            completion, mask, logprobs = [filler_token_id], [0], [0.0]
        self.prompt_ids.append(list(sample.prompt_ids))
        self.completion_ids.append(completion)
        self.completion_mask.append(mask)
        self.logprobs.append(logprobs)
        self.roles.append(sample.role)
        self.advantages.append(sample.advantage)
        self.filler.append(filler)

    @property
    def no_logprobs(self) -> int:
        """Rows with model tokens whose log-probs are all 0.0: sampled without log-probs, most likely."""
        return sum(
            1
            for mask, logprobs in zip(self.completion_mask, self.logprobs, strict=True)
            if any(mask) and all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m)
        )

    def counts(self) -> dict[str, float]:
        """Per-role numbers of samples, groups and trained tokens, and the filler rows."""
        out: dict[str, float] = {
            "filler_rows": float(sum(self.filler)),
            "no_logprobs": float(self.no_logprobs),
        }
        for role in ROLES:
            rows = [i for i, r in enumerate(self.roles) if r == role and not self.filler[i]]
            out[f"{role}/samples"] = float(len(rows))
            out[f"{role}/model_tokens"] = float(sum(sum(self.completion_mask[i]) for i in rows))
            out[f"{role}/advantage_abs_mean"] = (
                math.fsum(abs(self.advantages[i]) for i in rows) / len(rows) if rows else 0.0
            )
        return out


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


def check_group(group: Sequence[Sample], group_size: int) -> None:
    """Raise unless the group has one role, at most G samples and advantages that sum to zero."""
    gid, role = group[0].group, group[0].role
    if any(s.role != role for s in group):
        raise ValueError(f"group {gid} mixes roles: each group must hold samples of one role")
    if len(group) > group_size:
        raise ValueError(
            f"group {gid} has {len(group)} samples, more than group_size={group_size}: "
            "set train.group_size to the largest group"
        )
    advantages = [s.advantage for s in group]
    total = math.fsum(advantages)
    scale = max(1.0, max(abs(a) for a in advantages))
    if abs(total) > CENTRING_TOLERANCE * len(group) * scale:
        raise ValueError(
            f"the advantages of group {gid} ({role}) sum to {total:.6g}, not 0: TRL subtracts each group's "
            "mean, so groups must arrive centred (spade_rl.rewards.zscore_advantages / centred_advantages)"
        )


def filler_sample(role: str, token_id: int) -> Sample:
    """A row that trains nothing: one prompt token, one completion token with mask 0, advantage 0."""
    return Sample(role, (token_id,), (token_id,), (0,), (0.0,), 0.0, -1)


def assemble_batch(
    samples: Sequence[Sample],
    group_size: int,
    rows: int,
    filler_token_id: int,
    max_completion_length: int | None = None,
) -> Batch:
    """Lay ``samples`` out as ``rows`` rows in blocks of ``group_size`` (see the module docstring)."""
    if not samples:
        raise ValueError("no samples to train on")
    for sample in samples:
        if not isinstance(sample, Sample):
            raise TypeError(f"expected spade_rl.train.Sample records, got {type(sample).__name__}")
    if rows % group_size:
        raise ValueError(f"rows ({rows}) must be a multiple of group_size ({group_size})")
    groups = split_groups(samples)
    needed = len(groups) * group_size
    if needed > rows:
        raise ValueError(
            f"{len(samples)} samples in {len(groups)} groups need {needed} rows ({len(groups)} blocks of "
            f"group_size={group_size}), more than the {rows} rows of one update "
            "(per_device_train_batch_size * gradient_accumulation_steps * processes): raise those, or hand "
            "fewer groups per update"
        )
    batch = Batch()
    for group in groups:
        check_group(group, group_size)
        for sample in group:
            if max_completion_length is not None and len(sample.completion_ids) > max_completion_length:
                sample = sample.truncated(max_completion_length)
                batch.truncated += 1
            batch.add(sample, False, filler_token_id)
        for _ in range(group_size - len(group)):
            batch.add(filler_sample(group[0].role, filler_token_id), True, filler_token_id)
    while len(batch) < rows:
        batch.add(filler_sample("agent", filler_token_id), True, filler_token_id)
    return batch
