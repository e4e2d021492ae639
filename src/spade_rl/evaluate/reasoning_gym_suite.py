"""Reasoning Gym: a fixed, seeded selection of procedurally generated tasks, scored by each task's own scorer.

    spade-rl eval --suite reasoning_gym --limit 20
    spade-rl eval --suite reasoning_gym --option reasoning_gym.logic=aiw,zebra_puzzles \
        --option reasoning_gym.math=        # an empty family is left out

    spade-rl eval --suite reasoning_gym --option reasoning_gym.split=paper_hard --limit 8 \
        --samples 8 --temperature 0.6   # the paper's hard split, pass@k beside greedy accuracy

    suite = ReasoningGymSuite(math=("basic_arithmetic", "gcd"), algorithmic=(), cognition=(), logic=())
    result = suite.run(policy, ctx)     # ctx.limit items per task (items_per_task without a limit)

Four families, as in the paper's evaluation (math, algorithmic, cognition, logic); each option names
the Reasoning Gym tasks of one family (comma-separated on the command line; empty leaves the family
out). Task ``t`` draws its items from ``create_dataset(t, seed=S, size=N)`` with ``S`` derived from
the evaluation seed and the task's name, so item ``i`` (id ``t/i/<hash>``) is the same in every run
with that seed, whatever the limit. The id holds a hash of the question because a few tasks
(isomorphic_strings, polynomial_multiplication, ransom_note, word_ladder) generate differently under
another hash seed, that is in another process: their items are then never paired by ``compare``.
The prompt asks for the final answer in ``\\boxed{}`` (or ``<answer>`` tags, ``answer_format="answer"``);
:func:`~spade_rl.evaluate.base.extract_answer` takes it out, and a whole-answer ``\\text{...}`` is
unwrapped. Only a score of 1.0 from the task's ``score_answer`` counts as correct; ``score`` keeps
its partial credit.

Scoring runs in the sandbox, never here: several scorers hand the model's text to ``eval`` or to
sympy's ``parse_expr`` (countdown, puzzle24, polynomial_multiplication, the integration tasks,
n_queens, spiral_matrix, string_insertion, binary_matrix, number_sorting), and even numeric parsers
can be made to hang (``Fraction("1e999999999")`` in coin_flip). A sandbox worker that has preloaded
``reasoning_gym`` builds the task's dataset object and scores the extracted answer against the item
(sent as JSON) under a deadline.

Wrong answers and errors (:mod:`spade_rl.evaluate.base`): no answer, a wrong one, and an answer that drives
the scorer past its deadline or memory (reason ``scorer_limit``: a right answer is scored in
milliseconds, and the known hangs are answers such as ``1e999999999``) are wrong answers. A scorer that
raises, returns no finite number, does not load in the sandbox, or whose worker crashes or is lost
(reason ``scorer_error``) has judged nothing: the item is an error, left out of accuracy.

The default tasks are procedural (no data download), have a single reference answer (so the
ground-truth test can check them) and short prompts (cheap to generate from on a CPU).

``split=paper_hard`` evaluates the hard split of the paper's appendix instead: 100 tasks, each generated
with its hard configuration, in the four families the paper rolls its results up into (the table and
where it comes from: :mod:`spade_rl.evaluate._rg_paper_hard`). A family option then selects tasks of
that family of the split (every task of it when not given); tasks the installed reasoning-gym lacks are
skipped with a warning naming them. codeio makes its items by running code snippets shipped with
reasoning-gym, so its items are generated in the sandbox (:data:`GENERATED_IN_SANDBOX`) like scoring.
The category of an item is its family, so the per-category
accuracy (and pass@k) are the Math / Algorithmic / Cognition / Logic roll-ups. The paper plays 8
episodes per task at temperature 0.6, each a question of its own: ``--limit 8 --temperature 0.6``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import zlib
from dataclasses import replace
from importlib import metadata
from typing import Any, ClassVar

import reasoning_gym
from reasoning_gym.factory import DATASETS

from spade_rl.evaluate._rg_paper_hard import PAPER_HARD, PAPER_HARD_CONFIGS
from spade_rl.evaluate._sandbox_jobs import INPUT_LIMITS
from spade_rl.evaluate.base import (
    EvalContext,
    ItemResult,
    Suite,
    SuiteResult,
    clip,
    extract_answer,
    generate_texts,
    matching_braces,
)
from spade_rl.policy import Policy
from spade_rl.sandbox import EnvHandle, Sandbox, SandboxConfig

log = logging.getLogger(__name__)

FAMILIES: dict[str, tuple[str, ...]] = {
    "math": ("basic_arithmetic", "chain_sum", "leg_counting"),
    "algorithmic": ("letter_counting", "spell_backward", "word_sorting"),
    "cognition": ("number_sequence", "color_cube_rotation", "needle_haystack"),
    "logic": ("aiw", "syllogism", "knights_knaves"),
}
ANSWER_FORMATS = ("boxed", "answer")
SPLITS = ("default", "paper_hard")  # default: FAMILIES, default configs; paper_hard: the paper's hard split
# Tasks whose item generation runs code: codeio executes code snippets shipped with reasoning-gym (rewritten
# by a language model, its docstring warns) to compute each item's answer. Their items are generated in
# the sandbox, like scoring, never in this process.
GENERATED_IN_SANDBOX = frozenset({"codeio"})
SYSTEM_PROMPTS = {
    "boxed": (
        "Solve the problem. Reason step by step if it helps, then give your final answer inside "
        "\\boxed{}, for example \\boxed{42}, written exactly in the format the problem asks for."
    ),
    "answer": (
        "Solve the problem. Reason step by step if it helps, then give your final answer between "
        "<answer> and </answer>, for example <answer>42</answer>, written exactly in the format the "
        "problem asks for."
    ),
}

# The scorer that runs in a sandbox worker (which preloads reasoning_gym before it hardens itself).
# One request per step: the task's dataset object (its config and any data its scorer needs) is built
# from (task, seed, size), and the item as the model saw it, sent as JSON, is scored with its
# score_answer. The item is sent rather than regenerated because a few tasks (isomorphic_strings,
# polynomial_multiplication, ransom_note, word_ladder, ...) generate different items under different
# hash seeds, that is in different processes. Every failure is answered, never raised (a raise would
# retire the worker).
SCORER_SOURCE = """
import json
import math

import reasoning_gym


class ReasoningGymScorerEnv:
    def __init__(self, max_turns: int = 1):
        self._datasets = {}

    def reset(self, seed=None):
        return "reasoning-gym scorer", {}

    def step(self, action):
        try:
            request = json.loads(action)
            config = request.get("config") or {}
            key = (request["task"], request["seed"], request["size"], json.dumps(config, sort_keys=True))
            if key not in self._datasets:
                self._datasets[key] = reasoning_gym.create_dataset(
                    request["task"], seed=request["seed"], size=request["size"], **config
                )
            if request.get("op") == "generate":
                entry = json.dumps(self._datasets[key][request["index"]], allow_nan=False)
                return "", 0.0, True, False, {"entry": entry}
            score = float(self._datasets[key].score_answer(request["answer"], request["entry"]))
            if not math.isfinite(score):
                return "", 0.0, True, False, {"error": f"the scorer returned {score}"}
            return "", 0.0, True, False, {"score": score}
        except Exception as exc:  # noqa: BLE001 - a scorer failure is the result of its item
            return "", 0.0, True, False, {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
"""


def version() -> str:
    return f"reasoning-gym {metadata.version('reasoning-gym')}"


class ReasoningGymSuite(Suite):
    name: ClassVar[str] = "reasoning_gym"
    OPTIONS: ClassVar[dict[str, Any]] = {
        **FAMILIES,
        "split": "default",  # default, or paper_hard: the 100 tasks of the paper's appendix, hard configs
        "items_per_task": 50,  # items per task when the evaluation has no limit
        "answer_format": "boxed",  # boxed: \boxed{...}; answer: <answer>...</answer>
        "score_timeout_s": 5.0,  # deadline of one scoring call in the sandbox
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.configs: dict[str, dict] = {}  # task -> keyword arguments of create_dataset
        self.skipped: list[str] = []  # tasks of the split that the installed reasoning-gym lacks
        if self.options["split"] not in SPLITS:
            raise ValueError(
                f"option reasoning_gym.split {self.options['split']!r} is not allowed; allowed: "
                f"{', '.join(SPLITS)}"
            )
        if self.options["split"] == "paper_hard":
            self._choose_paper_hard(given=set(options) & set(FAMILIES))
        seen: dict[str, str] = {}
        for family in FAMILIES:
            for task in self.options[family]:
                if task not in DATASETS:
                    raise ValueError(
                        f"option reasoning_gym.{family}: unknown Reasoning Gym task {task!r}; "
                        f"known tasks: {', '.join(sorted(DATASETS))}"
                    )
                if task in seen:
                    raise ValueError(f"task {task!r} is listed in both {seen[task]} and {family}")
                seen[task] = family
        if not seen:
            raise ValueError("option reasoning_gym: every family is empty; name at least one task")
        if self.options["answer_format"] not in ANSWER_FORMATS:
            raise ValueError(
                f"option reasoning_gym.answer_format {self.options['answer_format']!r} is not allowed; "
                f"allowed: {', '.join(ANSWER_FORMATS)}"
            )
        if self.options["items_per_task"] < 1 or self.options["score_timeout_s"] <= 0:
            raise ValueError("options reasoning_gym.items_per_task and score_timeout_s must be positive")

    def _choose_paper_hard(self, given: set[str]) -> None:
        """The families' tasks from the paper's hard split (a family option given selects from its
        family), with their hard configurations; tasks this reasoning-gym lacks are skipped, warned of."""
        for family in FAMILIES:
            split = PAPER_HARD[family]
            chosen = self.options[family] if family in given else split
            foreign = [task for task in chosen if task not in split]
            if foreign:
                raise ValueError(
                    f"option reasoning_gym.{family}: {foreign} not in the {family} family of the paper_hard "
                    f"split; its tasks: {', '.join(split)}"
                )
            missing = [task for task in chosen if task not in DATASETS]
            self.skipped += missing
            self.options[family] = tuple(task for task in chosen if task in DATASETS)
        if self.skipped:
            log.warning(
                "reasoning_gym split paper_hard: the installed %s lacks %d task(s), skipped: %s",
                version(),
                len(self.skipped),
                ", ".join(self.skipped),
            )
        self.configs = {task: PAPER_HARD_CONFIGS[task] for _, task in self.tasks()}

    def version(self) -> str:
        return version()

    def tasks(self) -> list[tuple[str, str]]:
        """(family, task) pairs in a fixed order."""
        return [(family, task) for family in FAMILIES for task in self.options[family]]

    def items(self, ctx: EvalContext) -> list[dict]:
        """The evaluation's items: family, task, seed, size, index and the dataset entry of each."""
        size = ctx.limit or self.options["items_per_task"]
        out = []
        sandboxed = [task for _, task in self.tasks() if task in GENERATED_IN_SANDBOX]
        generated = self._generate_in_sandbox(sandboxed, size, ctx) if sandboxed else {}
        for family, task in self.tasks():
            seed = task_seed(ctx.seed, task)
            if task in generated:
                entries = generated[task]
            else:
                try:
                    config = self.configs.get(task, {})
                    dataset = reasoning_gym.create_dataset(task, seed=seed, size=size, **config)
                    entries = [dataset[i] for i in range(size)]
                except Exception as exc:
                    raise ValueError(f"Reasoning Gym task {task!r} could not generate items: {exc}") from exc
            for index, entry in enumerate(entries):
                out.append(
                    {
                        "family": family,
                        "task": task,
                        "seed": seed,
                        "size": size,
                        "index": index,
                        "entry": entry,
                        "config": self.configs.get(task, {}),
                    }
                )
        return out

    def _generate_in_sandbox(self, tasks: list[str], size: int, ctx: EvalContext) -> dict[str, list[dict]]:
        """The entries of ``tasks`` (those of GENERATED_IN_SANDBOX), generated by a sandbox worker; a task
        that cannot generate there is a ``ValueError``, as in :meth:`items`."""
        out: dict[str, list[dict]] = {}
        timeout = max(self.options["score_timeout_s"], 30.0)  # the first call loads the task's data
        with Sandbox(scorer_config(ctx.sandbox.config)) as sandbox:
            scorer = _Scorer(sandbox, timeout)
            try:
                for task in tasks:
                    seed, config = task_seed(ctx.seed, task), self.configs.get(task, {})
                    entries = []
                    for index in range(size):
                        request = {"op": "generate", "task": task, "seed": seed, "size": size, "index": index}
                        info, error, _ = scorer.call({**request, "config": config})
                        if error or not isinstance(info.get("entry"), str):
                            raise ValueError(
                                f"Reasoning Gym task {task!r} could not generate items in the sandbox: "
                                f"{error or 'no entry'}"
                            )
                        entries.append(json.loads(info["entry"]))
                    out[task] = entries
            finally:
                scorer.close()
        return out

    def run(self, policy: Policy, ctx: EvalContext) -> SuiteResult:
        started = time.perf_counter()
        items = self.items(ctx)
        system = SYSTEM_PROMPTS[self.options["answer_format"]]
        chats = [
            [{"role": "system", "content": system}, {"role": "user", "content": item["entry"]["question"]}]
            for item in items
        ]
        texts = generate_texts(policy, chats, ctx)
        answers = [normalise(extract_answer(text)) for text, _ in texts]
        scores = self._score(items, answers, ctx)
        results = []
        for item, (text, finish), answer, (score, reason, error) in zip(
            items, texts, answers, scores, strict=True
        ):
            detail = {
                "category": item["family"],
                "task": item["task"],
                "expected": item["entry"]["answer"],
                "extracted": answer,
                "finish_reason": finish,
            }
            if answer is None:
                detail["reason"] = "no_answer"
            if reason:
                detail["reason"] = reason
                detail["error"] = error
            unscored = error if reason == "scorer_error" else ""
            results.append(ItemResult(item_id(item), score == 1.0, score, clip(text), detail, error=unscored))
        return SuiteResult(
            self.name,
            self.version(),
            results,
            metrics=_metrics(results),
            config={
                **{
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in self.options.items()
                    if (k, v) != ("split", "default")  # as in results written before the option
                },
                **({"skipped": list(self.skipped)} if self.skipped else {}),
                "seed": ctx.seed,
                "limit": ctx.limit,
                "items_per_task": ctx.limit or self.options["items_per_task"],
            },
            seconds=time.perf_counter() - started,
        )

    def _score(
        self, items: list[dict], answers: list[str | None], ctx: EvalContext
    ) -> list[tuple[float, str, str]]:
        """(score, reason, error) per item (:meth:`_Scorer.score`; ``(0.0, "", "")`` without an answer);
        the scorers run in a sandbox of their own (it preloads reasoning_gym), configured like the
        evaluation's sandbox."""
        out: list[tuple[float, str, str]] = [(0.0, "", "")] * len(items)
        todo = [i for i, answer in enumerate(answers) if answer is not None]
        if not todo:
            return out
        with Sandbox(scorer_config(ctx.sandbox.config)) as sandbox:
            scorer = _Scorer(sandbox, self.options["score_timeout_s"])
            try:
                for i in todo:
                    out[i] = scorer.score(items[i], answers[i])
            finally:
                scorer.close()
        return out


def item_id(item: dict) -> str:
    """``task/index/q`` with ``q`` a short hash of the question: the same in every run that asks the same
    question, so that a task that generates differently in another process is never wrongly paired."""
    question = item["entry"]["question"].encode("utf-8", "surrogatepass")
    return f"{item['task']}/{item['index']}/{hashlib.sha256(question).hexdigest()[:8]}"


def task_seed(seed: int, task: str) -> int:
    """The dataset seed of ``task`` in an evaluation seeded with ``seed``."""
    return (seed * 1_000_003 + zlib.crc32(task.encode())) % 2**31


def scorer_config(base: SandboxConfig) -> SandboxConfig:
    """``base`` with reasoning_gym preloaded, one warm worker, and room for its imports."""
    preload = base.preload if "reasoning_gym" in base.preload else (*base.preload, "reasoning_gym")
    return replace(base, preload=preload, pool_size=1, start_timeout_s=max(base.start_timeout_s, 60.0))


class _Scorer:
    """One scorer instance in the sandbox, reopened when a scoring call kills its worker."""

    def __init__(self, sandbox: Sandbox, timeout_s: float):
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.handle: EnvHandle | None = None

    def _open(self) -> tuple[EnvHandle | None, str]:
        if self.handle is not None and self.handle.alive:
            return self.handle, ""
        opened = self.sandbox.open(SCORER_SOURCE, timeout_s=max(self.timeout_s, 30.0))
        if not opened.ok:
            return None, f"the sandboxed scorer did not load: {opened.reason}: {opened.error[:300]}"
        self.handle = opened.value
        return self.handle, ""

    def call(self, request: dict) -> tuple[dict, str, bool]:
        """``(info, "", False)``: the worker's answer to ``request``; or ``({}, error, at_limit)``, with
        ``at_limit`` when the call was stopped at its deadline or memory limit (``INPUT_LIMITS``).
        Never raises."""
        handle, error = self._open()
        if handle is None:
            return {}, error, False
        try:
            action = json.dumps(request, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return {}, f"the item cannot be sent to the scorer as JSON: {exc}", False
        result = handle.step(action, timeout_s=self.timeout_s)
        if not result.ok:
            return {}, f"scorer {result.reason}: {result.error[:300]}", result.status in INPUT_LIMITS
        info = result.value[4] if isinstance(result.value, list) and len(result.value) == 5 else None
        if not isinstance(info, dict):
            return {}, "the scorer answered a malformed value", False
        if "error" in info:
            return {}, str(info["error"])[:500], False
        return info, "", False

    def score(self, item: dict, answer: str) -> tuple[float, str, str]:
        """``(score, "", "")``; ``(0.0, "scorer_limit", why)`` when the answer drove the scorer past a
        limit (a wrong answer); ``(0.0, "scorer_error", why)`` when the scorer failed (an error)."""
        request = {
            "task": item["task"],
            "seed": item["seed"],
            "size": item["size"],
            "entry": item["entry"],
            "answer": answer,
            "config": item.get("config", {}),
        }
        info, error, at_limit = self.call(request)
        if error:
            return 0.0, "scorer_limit" if at_limit else "scorer_error", error
        score = info.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            return 0.0, "scorer_error", f"the scorer returned {score!r}"
        return min(1.0, max(0.0, float(score))), "", ""

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def normalise(answer: str | None) -> str | None:
    """The extracted answer with a whole-answer ``\\text{...}`` (or ``\\textbf``, ``\\mathrm``) unwrapped."""
    while answer is not None:
        for command in ("\\text{", "\\textbf{", "\\mathrm{"):
            if (
                answer.startswith(command)
                and matching_braces(answer).get(len(command) - 1) == len(answer) - 1
            ):
                answer = answer[len(command) : -1].strip() or None
                break
        else:
            return answer
    return None


def _metrics(results: list[ItemResult]) -> dict[str, float]:
    """Mean score, the rate of answers not found, and accuracy per family and per task, over the scored
    items (a family or task with none scored has no accuracy)."""
    metrics: dict[str, float] = {}
    results = [r for r in results if not r.error]
    if not results:
        return metrics
    metrics["mean_score"] = sum(r.score for r in results) / len(results)
    metrics["no_answer_rate"] = sum(r.detail.get("extracted") is None for r in results) / len(results)
    groups: dict[str, list[ItemResult]] = {}
    for r in results:
        groups.setdefault(f"accuracy/{r.detail['category']}", []).append(r)
        groups.setdefault(f"task_accuracy/{r.detail['task']}", []).append(r)
    for key, group in groups.items():
        metrics[key] = sum(r.correct for r in group) / len(group)
    return metrics
