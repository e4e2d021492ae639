"""Records of the environment archive and the pure functions behind them.

- :class:`EnvRecord`: one proposed environment (code, hint, verdict, grounding, lineage, metadata);
- :class:`PlayStats`: what the agent did in one environment during one iteration;
- :func:`source_hash`: the content hash that recognises duplicates (formatting and comments do not count);
- :func:`merge_stats`: the episode-weighted merge of two :class:`PlayStats` of the same iteration;
- :class:`ArchiveError`, :class:`JsonlLineError`: what a bad file raises;
- ``check_*``: the checks of user-given values shared by ``Archive.add`` and JSONL import.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

SETTINGS = ("games", "tool_use")
ORIGINS = ("designer", "reference", "import")
VALID_REASON = "ok"


class ArchiveError(ValueError):
    """The archive file cannot be used: not an archive, a schema this version does not read, or a write
    to an archive opened read-only."""


class JsonlLineError(ArchiveError):
    """A line of a JSONL import is malformed; ``line`` is its 1-based number."""

    def __init__(self, path: object, line: int, problem: str):
        super().__init__(f"{path}:{line}: {problem}")
        self.line = line


def normalise_source(source: str) -> str:
    """The text whose hash identifies an environment.

    ``ast.unparse(ast.parse(source))`` when the source parses: comments, blank lines, quotes, spacing and
    redundant parentheses do not count, while any change of code or docstrings does. A source that does
    not parse falls back to its whitespace-collapsed text. The prefixes keep the two kinds apart.
    The unparsed form can change between Python versions, so hashes are compared within one version.
    """
    try:
        return "ast:" + ast.unparse(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError):  # ValueError: null bytes on 3.11
        return "text:" + " ".join(source.split())


def source_hash(source: str) -> str:
    """SHA-256 (hex) of :func:`normalise_source`."""
    return hashlib.sha256(normalise_source(source).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class PlayStats:
    """The agent's play of one environment in one iteration: K episodes without the hint, K with it.

    Win rates lie in [0, 1]; ``regret`` is as the rewards module computed it (SPADE: mean hint return
    minus mean no-hint return, floored at 0); ``mean_turns`` is over all episodes of both kinds.
    """

    episodes_nohint: int
    episodes_hint: int
    win_rate_nohint: float
    win_rate_hint: float
    regret: float
    mean_turns: float
    mean_return_nohint: float
    mean_return_hint: float

    def __post_init__(self) -> None:
        for name in ("episodes_nohint", "episodes_hint"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"play stats {name} must be an integer >= 0, got {value!r}")
        if self.episodes_nohint + self.episodes_hint == 0:
            raise ValueError("play stats need at least one episode (episodes_nohint + episodes_hint > 0)")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("episodes"):
                continue
            if type(value) not in (int, float) or not math.isfinite(value):
                raise ValueError(f"play stats {f.name} must be a finite number, got {value!r}")
            object.__setattr__(self, f.name, float(value))
        for name in ("win_rate_nohint", "win_rate_hint"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"play stats {name} must lie in [0, 1], got {getattr(self, name)!r}")
        if self.mean_turns < 0.0:
            raise ValueError(f"play stats mean_turns must be >= 0, got {self.mean_turns!r}")

    @property
    def episodes(self) -> int:
        return self.episodes_nohint + self.episodes_hint

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict) -> PlayStats:
        missing = [f.name for f in fields(cls) if f.name not in data]
        if missing:
            raise ValueError(f"play stats miss {missing}")
        return cls(**{f.name: data[f.name] for f in fields(cls)})


def _weighted_mean(a: float, n_a: int, b: float, n_b: int) -> float:
    return (a * n_a + b * n_b) / (n_a + n_b) if n_a + n_b else 0.0


def merge_stats(old: PlayStats, new: PlayStats) -> PlayStats:
    """Combine two batches of play of the same environment in the same iteration.

    Counts add; win rates and mean returns are means weighted by the episodes of their kind
    (``(x_a * n_a + x_b * n_b) / (n_a + n_b)``), ``mean_turns`` by all episodes. Regret is recomputed
    from the merged returns with SPADE's definition, ``max(0, mean_return_hint - mean_return_nohint)``,
    and is 0 while one of the two kinds has no episode.
    """
    nh_a, nh_b, h_a, h_b = old.episodes_nohint, new.episodes_nohint, old.episodes_hint, new.episodes_hint
    ret_nohint = _weighted_mean(old.mean_return_nohint, nh_a, new.mean_return_nohint, nh_b)
    ret_hint = _weighted_mean(old.mean_return_hint, h_a, new.mean_return_hint, h_b)
    both = nh_a + nh_b > 0 and h_a + h_b > 0
    return PlayStats(
        episodes_nohint=nh_a + nh_b,
        episodes_hint=h_a + h_b,
        win_rate_nohint=_weighted_mean(old.win_rate_nohint, nh_a, new.win_rate_nohint, nh_b),
        win_rate_hint=_weighted_mean(old.win_rate_hint, h_a, new.win_rate_hint, h_b),
        regret=max(0.0, ret_hint - ret_nohint) if both else 0.0,
        mean_turns=_weighted_mean(old.mean_turns, old.episodes, new.mean_turns, new.episodes),
        mean_return_nohint=ret_nohint,
        mean_return_hint=ret_hint,
    )


@dataclass(frozen=True)
class IterationStats:
    """One stored row of play statistics: an environment's :class:`PlayStats` in one iteration."""

    env_id: int
    iteration: int
    stats: PlayStats
    recorded_at: float


@dataclass(frozen=True)
class EnvRecord:
    """One environment of the archive, as first proposed (a duplicate proposal changes nothing here)."""

    env_id: int
    source: str
    source_hash: str
    hint: str
    valid: bool
    reason: str  # "ok" or the validator's reason code
    message: str
    class_name: str
    skill: str
    setting: str  # one of SETTINGS
    document_id: str | None  # the grounding corpus document
    iteration: int  # the iteration it was first proposed in
    origin: str  # one of ORIGINS
    created_at: float  # Unix time
    parents: tuple[int, ...] = ()  # the memory examples shown to the designer
    times_proposed: int = 1  # how often ``add`` proposed it here (duplicates included; 0 if imported)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def flagged(self) -> dict | None:
        """The play-time guard's flag (``{"iteration", "reason", "message"}``: it behaved otherwise in
        play than validation saw it, see :mod:`spade_rl.loop.guard`), or None. A flagged environment
        keeps its verdict and statistics and is never drawn into the pool or the memory again."""
        flag = self.metadata.get("flagged")
        return dict(flag) if isinstance(flag, dict) else None

    @property
    def env_kwargs(self) -> dict | None:
        """The constructor arguments it was validated with, to play it with the same (``None`` for a
        record written before they were recorded, or an environment that was never valid)."""
        kwargs = self.metadata.get("env_kwargs")
        return dict(kwargs) if isinstance(kwargs, dict) else None


@dataclass(frozen=True)
class AddResult:
    """What ``Archive.add`` did: the environment's id, and whether it was already there."""

    env_id: int
    duplicate: bool


def check_choice(what: str, value: object, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{what} is {value!r}; allowed: {list(allowed)}")
    return value  # type: ignore[return-value]


def check_iteration(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"iteration must be an integer >= 0, got {value!r}")
    return value


def check_verdict(valid: object, reason: object) -> tuple[bool, str]:
    """``valid`` is a bool; a valid environment has reason ``"ok"``, an invalid one any other code."""
    if type(valid) is not bool:
        raise ValueError(f"valid must be a bool, got {valid!r}")
    if type(reason) is not str or not reason:
        raise ValueError(f"reason must be a non-empty reason code such as 'ok' or 'timeout', got {reason!r}")
    if valid != (reason == VALID_REASON):
        raise ValueError(
            f"valid={valid} does not match reason {reason!r}: valid environments have reason "
            f"{VALID_REASON!r}, invalid ones the code of their first failed check"
        )
    return valid, reason


def check_text(what: str, value: object, *, empty: bool = True) -> str:
    if type(value) is not str or (not empty and not value):
        raise ValueError(f"{what} must be a {'' if empty else 'non-empty '}str, got {value!r}")
    return value


def check_parents(parents: object) -> tuple[int, ...]:
    if isinstance(parents, (str, bytes)) or not isinstance(parents, Sequence):
        raise ValueError(f"parents must be a list of environment ids, got {parents!r}")
    if any(type(p) is not int for p in parents):
        raise ValueError(f"parents must be integer environment ids, got {list(parents)!r}")
    if len(set(parents)) != len(parents):
        raise ValueError(f"parents must be distinct, got {list(parents)!r}")
    return tuple(parents)


def encode_metadata(metadata: object) -> str:
    """Metadata is a JSON object (str keys, finite numbers); returns its compact JSON text."""
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict (a JSON object), got {type(metadata).__name__}")
    try:
        return json.dumps(metadata, allow_nan=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata must be JSON-serialisable with finite numbers: {exc}") from None


@dataclass(frozen=True)
class MemoryExample:
    """One environment shown to the designer: ``role`` is ``"positive"`` or ``"negative"``; ``kind`` is
    ``"frontier"``, ``"reference"``, ``"too_easy"`` or ``"too_hard"``; ``stats`` its latest play."""

    record: EnvRecord
    role: str
    kind: str
    stats: PlayStats | None


@dataclass(frozen=True)
class MemorySample:
    """The memory for one designer prompt. ``fallback``: the positives are reference environments
    because no environment lies on the frontier; ``complete``: every requested example was found;
    ``message``: what was missing ("ok" when nothing was)."""

    examples: tuple[MemoryExample, ...]
    fallback: bool
    complete: bool
    message: str

    @property
    def positives(self) -> tuple[MemoryExample, ...]:
        return tuple(e for e in self.examples if e.role == "positive")

    @property
    def negatives(self) -> tuple[MemoryExample, ...]:
        return tuple(e for e in self.examples if e.role == "negative")

    @property
    def parent_ids(self) -> tuple[int, ...]:
        """The lineage to pass to ``Archive.add`` for environments designed from this memory."""
        return tuple(e.record.env_id for e in self.examples)


@dataclass(frozen=True)
class ReasonCount:
    """One row of ``Archive.reason_counts``: how many proposals (or environments) of a group got a verdict."""

    group: int | str
    valid: bool
    reason: str
    count: int


@dataclass(frozen=True)
class LineageNode:
    """An environment in a lineage: ``depth`` 0 is the environment asked about, 1 its parents, ..."""

    env_id: int
    depth: int
    parents: tuple[int, ...]


@dataclass(frozen=True)
class ImportResult:
    """What ``Archive.import_jsonl`` did. ``id_map`` maps the file's ids to this archive's ids (a
    duplicate maps to the environment already here); ``skipped`` lists ``(line number, why)``."""

    added: int
    duplicates: int
    stats_added: int
    stats_ignored: int  # rows for an (env, iteration) this archive already had, or for an invalid env
    dropped_parents: int  # parent ids that are not in the file
    skipped: tuple[tuple[int, str], ...]
    id_map: dict[int, int]
