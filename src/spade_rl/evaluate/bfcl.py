"""BFCL v4 (the Berkeley Function-Calling Leaderboard) offline, from the ``bfcl-eval`` wheel.

    suite = get_suite("bfcl", categories="simple_python,irrelevance,multi_turn_base")
    result = suite.run(policy, EvalContext(limit=5, seed=0, sampling=GREEDY, sandbox=sandbox))
    result.accuracy, result.metrics["accuracy/multi_turn_base"]

Single-turn categories (``simple_python``, ``multiple``, ``parallel``, ``parallel_multiple`` and their
``live_`` variants): one generation per entry, its tool calls checked by BFCL's AST checker.
``irrelevance`` / ``live_irrelevance``: correct when no call decodes (BFCL counts text that fails to
decode as no call); ``live_relevance``: correct when any call decodes. Multi-turn categories
(``multi_turn_base``, ``multi_turn_miss_param``, ``multi_turn_long_context``) are played as episodes
against BFCL's simulated APIs: at each turn the user's request is added, the model calls tools and
sees their results until it answers without a call (or its text fails to decode), for at most
``max_steps_per_turn`` steps per turn (BFCL's limit, 20; past it the entry fails, as in BFCL); the
calls of every step are then scored by BFCL's multi-turn checker (state and results against the
ground truth, turn by turn).

The prompt is this project's tool-use convention (see ``_bfcl_data.py``); the answer is
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (``_bfcl_parse.py``). The checkers
and the simulated APIs run in the sandbox (``_bfcl_ast_env.py``, ``_bfcl_multi_turn_env.py``):
they compare and ``eval`` text that comes from the model. A conversation that would outgrow
``max_context_tokens`` (or the model's positions) stops and is scored incorrect (reason ``context``).

Wrong answers and errors (:mod:`spade_rl.evaluate.base`): text that decodes to no call or to wrong calls,
a conversation past the context or step limits, and calls that drive a checker past its deadline or
memory (reason ``sandbox_timeout``/``sandbox_memory``) are wrong answers. The item is an error, left out
of accuracy, when the judge failed: BFCL's checker raised (reason ``checker_error``; its asserts are
about its own state, not the model's calls), its sandbox job never ran, crashed or answered something
malformed, or the simulated APIs failed to execute a step (``stop`` "env_error: ..."). Accuracy per
category and the category mean are over the scored items.

Install: ``pip install --no-deps bfcl-eval==2026.3.23`` plus the ``eval`` extra (``mpmath``, which
its math API imports); none of its vendor SDKs is needed.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import bfcl_eval  # noqa: F401 - fail at import (SuiteUnavailable) when bfcl-eval is not installed

from spade_rl.evaluate._bfcl_data import (
    AST_CATEGORIES,
    CATEGORIES,
    DEFAULT_CATEGORIES,
    BfclEntry,
    first_chat,
    load_category,
    turn_messages,
)
from spade_rl.evaluate._bfcl_parse import ParsedCalls, parse_tool_calls
from spade_rl.evaluate._sandbox_jobs import INPUT_LIMITS, Job, never_ran, run_jobs, step_value
from spade_rl.evaluate.base import EvalContext, ItemResult, Suite, SuiteResult, clip, generate_texts
from spade_rl.policy import Policy
from spade_rl.sandbox import Sandbox, SandboxConfig

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
AST_SOURCE = (HERE / "_bfcl_ast_env.py").read_text(encoding="utf-8")
MULTI_TURN_SOURCE = (HERE / "_bfcl_multi_turn_env.py").read_text(encoding="utf-8")
MAXIMUM_STEP_LIMIT = 20  # bfcl_eval.constants.default_prompts.MAXIMUM_STEP_LIMIT


def checker_config(base: SandboxConfig) -> SandboxConfig:
    """``base`` with BFCL's checkers and simulated APIs preloaded (``_bfcl_preload.py``), so that its
    runners import nothing after a worker's uid drop, and room for those imports at start."""
    preload = base.preload if PRELOAD in base.preload else (*base.preload, PRELOAD)
    return replace(base, preload=preload, start_timeout_s=max(base.start_timeout_s, 60.0))


PRELOAD = "spade_rl.evaluate._bfcl_preload"


class BFCLSuite(Suite):
    name = "bfcl"
    OPTIONS: ClassVar[dict[str, Any]] = {
        "categories": DEFAULT_CATEGORIES,
        "max_steps_per_turn": MAXIMUM_STEP_LIMIT,
        "max_context_tokens": 8192,  # prompt + max_new_tokens; also capped by the model's own positions
        "max_tool_response_chars": 8000,  # each tool result shown to the model is cut to this
        "timeout_s": 10.0,  # deadline of one sandboxed check or execution step
    }

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        unknown = [c for c in self.options["categories"] if c not in CATEGORIES]
        if unknown or not self.options["categories"]:
            raise ValueError(
                f"option bfcl.categories: unknown or no categories {unknown}; "
                f"allowed: {', '.join(CATEGORIES)}"
            )
        self.options["categories"] = tuple(dict.fromkeys(self.options["categories"]))
        for key in ("max_steps_per_turn", "max_context_tokens", "max_tool_response_chars", "timeout_s"):
            if self.options[key] <= 0:
                raise ValueError(f"option bfcl.{key} must be positive, got {self.options[key]!r}")

    def version(self) -> str:
        return f"bfcl-eval {importlib.metadata.version('bfcl-eval')}"

    def run(self, policy: Policy, ctx: EvalContext) -> SuiteResult:
        with Sandbox(checker_config(ctx.sandbox.config)) as sandbox:
            return self._run(policy, replace(ctx, sandbox=sandbox))

    def _run(self, policy: Policy, ctx: EvalContext) -> SuiteResult:
        started = time.monotonic()
        items: list[ItemResult] = []
        metrics: dict[str, float] = {}
        for category in self.options["categories"]:
            entries = select(load_category(category), ctx.limit, ctx.seed, category)
            log.info("bfcl %s: %d entries", category, len(entries))
            results = self.run_entries(policy, ctx, entries)
            items.extend(results)
            scored = [r for r in results if not r.error]
            if scored:  # a category of errors alone has no accuracy
                metrics[f"accuracy/{category}"] = sum(r.correct for r in scored) / len(scored)
            metrics[f"n/{category}"] = float(len(results))
        accuracies = [metrics[k] for c in self.options["categories"] if (k := f"accuracy/{c}") in metrics]
        if accuracies:
            metrics["accuracy/category_mean"] = sum(accuracies) / len(accuracies)  # BFCL's unweighted mean
        config = {**self.options, "categories": list(self.options["categories"])}
        config.update(limit=ctx.limit, seed=ctx.seed, max_new_tokens=ctx.sampling.max_new_tokens)
        return SuiteResult(
            self.name, self.version(), items, metrics, config, seconds=time.monotonic() - started
        )

    def run_entries(self, policy: Policy, ctx: EvalContext, entries: list[BfclEntry]) -> list[ItemResult]:
        """One result per entry, in order (entries of any categories; ``ctx.limit`` is not applied)."""
        context = _context_limit(policy, self.options["max_context_tokens"])
        single = [e for e in entries if not e.multi_turn]
        multi = [e for e in entries if e.multi_turn]
        by_entry = {}
        if single:
            by_entry.update(
                zip(map(id, single), self._run_single_turn(policy, ctx, single, context), strict=True)
            )
        if multi:
            by_entry.update(
                zip(map(id, multi), self._run_multi_turn(policy, ctx, multi, context), strict=True)
            )
        return [by_entry[id(e)] for e in entries]

    # --- single turn ------------------------------------------------------------------------------
    def _run_single_turn(
        self, policy: Policy, ctx: EvalContext, entries: list[BfclEntry], context: int
    ) -> list[ItemResult]:
        chats = [first_chat(entry) for entry in entries]
        fits = [_fits(policy, chat, context, ctx.sampling.max_new_tokens) for chat in chats]
        generated = iter(generate_texts(policy, [c for c, ok in zip(chats, fits, strict=True) if ok], ctx))
        texts = [next(generated)[0] if ok else None for ok in fits]
        parsed = [parse_tool_calls(text) if text is not None else ParsedCalls() for text in texts]
        checks = [
            i
            for i, entry in enumerate(entries)
            if texts[i] is not None and parsed[i].ok and entry.category in AST_CATEGORIES
        ]
        jobs = [Job(json.dumps(_ast_case(entries[i], parsed[i]))) for i in checks]
        verdicts = dict(
            zip(checks, run_jobs(ctx.sandbox, AST_SOURCE, jobs, self.options["timeout_s"]), strict=True)
        )
        results = []
        for i, entry in enumerate(entries):
            detail: dict = {"category": entry.category, "expected": entry.possible_answer}
            error = ""
            if texts[i] is None:
                correct = False
                detail["reason"] = "context"
            elif entry.category not in AST_CATEGORIES:  # (ir)relevance: does any call decode?
                called = parsed[i].ok and bool(parsed[i].calls)
                correct = called if entry.category == "live_relevance" else not called
                detail["reason"] = "called a tool" if called else "no tool call decoded"
            elif not parsed[i].ok:
                correct = False
                detail.update(reason="decode", error=parsed[i].error)
            else:
                correct, verdict, error = _ast_verdict(verdicts[i])
                detail.update(verdict)
            if texts[i] is not None and parsed[i].calls:
                detail["calls"] = [[name, args] for name, args in parsed[i].calls]
            response = clip(texts[i] or "")
            results.append(ItemResult(entry.id, correct, float(correct), response, detail, error=error))
        return results

    # --- multi turn -------------------------------------------------------------------------------
    def _run_multi_turn(
        self, policy: Policy, ctx: EvalContext, entries: list[BfclEntry], context: int
    ) -> list[ItemResult]:
        episodes = [_Episode(entry, first_chat(entry)) for entry in entries]
        for round_ in range(1, 1 << 30):
            live = [e for e in episodes if not e.stop]
            if not live:
                break
            for episode in live:
                if not _fits(policy, episode.messages, context, ctx.sampling.max_new_tokens):
                    episode.stop = "context"
            live = [e for e in live if not e.stop]
            round_ctx = replace(ctx, seed=(ctx.seed * 1_000_003 + round_ * 7_919) % 2**31)
            texts = generate_texts(policy, [e.messages for e in live], round_ctx)
            calling = []
            for episode, (text, _) in zip(live, texts, strict=True):
                episode.messages.append({"role": "assistant", "content": text})
                episode.responses[-1].append(text)
                parsed = parse_tool_calls(text)
                if parsed.ok and parsed.calls:
                    calling.append((episode, parsed.calls))
                else:  # no call (or undecodable text): the turn is over, as in BFCL
                    episode.next_turn()
            self._execute(ctx, calling)
        done = [e for e in episodes if e.stop == "done"]
        jobs = [Job(json.dumps(e.check_request()), {"entry": e.entry_json()}) for e in done]
        verdicts = dict(
            zip(
                map(id, done),
                run_jobs(ctx.sandbox, MULTI_TURN_SOURCE, jobs, self.options["timeout_s"]),
                strict=True,
            )
        )
        results = []
        for episode in episodes:
            entry = episode.entry
            detail: dict = {
                "category": entry.category,
                "stop": episode.stop,
                "turns_played": len(episode.responses),
                "steps": [len(steps) for steps in episode.turns],
                "expected": entry.possible_answer,
            }
            correct, error = False, ""
            if id(episode) in verdicts:
                correct, verdict, error = _ast_verdict(verdicts[id(episode)])
                detail.update(verdict)
            else:
                detail["reason"] = episode.stop
                if episode.stop.startswith("env_error"):
                    error = "BFCL's simulated APIs failed: " + episode.stop.removeprefix("env_error: ")
            transcript = clip(episode.transcript())
            results.append(ItemResult(entry.id, correct, float(correct), transcript, detail, error=error))
        return results

    def _execute(self, ctx: EvalContext, calling: list[tuple[_Episode, list[tuple[str, dict]]]]) -> None:
        """Run each episode's new calls on its simulated APIs (replaying its earlier steps first)."""
        cut = self.options["max_tool_response_chars"]  # the runner cuts each result, saying so
        jobs = [
            Job(
                json.dumps({"op": "execute", "history": e.history(), "calls": calls, "max_chars": cut}),
                {"entry": e.entry_json()},
            )
            for e, calls in calling
        ]
        for (episode, calls), result in zip(
            calling, run_jobs(ctx.sandbox, MULTI_TURN_SOURCE, jobs, self.options["timeout_s"]), strict=True
        ):
            outputs = _execution_outputs(result, len(calls))
            if outputs is None:
                episode.stop = f"env_error: {result.reason}: {result.error}"[:500]
                continue
            episode.turns[-1].append([[name, args] for name, args in calls])
            episode.messages.append(
                {
                    "role": "user",
                    "content": "\n".join(f"<tool_response>{out}</tool_response>" for out in outputs),
                }
            )
            if len(episode.turns[-1]) > self.options["max_steps_per_turn"]:
                episode.stop = "force_quit"  # BFCL: past MAXIMUM_STEP_LIMIT steps the entry fails


@dataclass
class _Episode:
    entry: BfclEntry
    messages: list[dict]
    turns: list[list] = field(default_factory=lambda: [[]])  # per turn: executed steps, each [[name, args]]
    responses: list[list[str]] = field(default_factory=lambda: [[]])  # per turn: the model's texts
    stop: str = ""  # "" while playing; done, force_quit, context, env_error: ...

    def next_turn(self) -> None:
        if len(self.turns) == len(self.entry.question):
            self.stop = "done"
            return
        self.messages.extend(turn_messages(self.entry, len(self.turns)))
        self.turns.append([])
        self.responses.append([])

    def history(self) -> list:
        return [step for steps in self.turns for step in steps]

    def entry_json(self) -> dict:
        return {
            "id": self.entry.id,
            "initial_config": self.entry.initial_config,
            "involved_classes": self.entry.involved_classes,
        }

    def check_request(self) -> dict:
        return {"op": "check", "turns": self.turns, "ground_truth": self.entry.possible_answer}

    def transcript(self) -> str:
        return "\n".join(
            f"[turn {t} step {s}] {text}"
            for t, texts in enumerate(self.responses)
            for s, text in enumerate(texts)
        )


def select(entries: list[BfclEntry], limit: int | None, seed: int, category: str) -> list[BfclEntry]:
    """At most ``limit`` entries, drawn with a generator seeded by ``seed`` and the category, kept in
    the wheel's order; the same arguments always give the same entries."""
    if limit is None or limit >= len(entries):
        return list(entries)
    chosen = sorted(random.Random(f"spade-rl/bfcl/{category}/{seed}").sample(range(len(entries)), limit))
    return [entries[i] for i in chosen]


def _ast_case(entry: BfclEntry, parsed: ParsedCalls) -> dict:
    return {
        "functions": entry.functions,
        "calls": [{name: args} for name, args in parsed.calls],
        "possible_answer": entry.possible_answer,
        "language": "python",
        "category": entry.category,
    }


def _ast_verdict(result) -> tuple[bool, dict, str]:
    """(valid, detail, error) from a checker job (AST or multi-turn). ``error`` is set when the checker
    gave no verdict: it raised, its job never ran or crashed, or it answered something malformed. A job
    stopped at its deadline or memory limit was stopped by the model's calls: a wrong answer."""
    step = step_value(result)
    if step is None:
        detail = {"reason": f"sandbox_{result.reason}", "error": result.error[:500]}
        if result.status in INPUT_LIMITS and not never_ran(result):
            return False, detail, ""
        return False, detail, f"the checker gave no verdict ({result.reason}): {result.error[:300]}"
    observation, reward, _ = step
    try:
        verdict = json.loads(observation)
    except ValueError:
        verdict = None
    if not isinstance(verdict, dict):
        detail = {"reason": "checker_output", "error": observation[:500]}
        return False, detail, "the checker answered something that is not a verdict"
    valid = verdict.get("valid") is True and reward == 1.0
    detail = {k: v for k, v in verdict.items() if k != "valid" and v not in ("", None)}
    if verdict.get("error_type") == "checker_exception":
        message = verdict.get("error") or verdict.get("error_message") or "the checker raised"
        return False, {"reason": "checker_error", **detail}, str(message)[:500]
    return valid, {"reason": "checker", **detail}, ""


def _execution_outputs(result, expected: int) -> list[str] | None:
    step = step_value(result)
    if step is None:
        return None
    try:
        outputs = json.loads(step[0])
    except ValueError:
        return None
    if (
        not isinstance(outputs, list)
        or len(outputs) != expected
        or not all(isinstance(o, str) for o in outputs)
    ):
        return None
    return outputs


def _context_limit(policy: Policy, configured: int) -> int:
    """``configured``, or the model's own number of positions where the policy exposes a smaller one."""
    config = getattr(getattr(policy, "model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    return min(configured, positions) if isinstance(positions, int) and positions > 0 else configured


def _fits(policy: Policy, chat: list[dict], limit: int, max_new_tokens: int) -> bool:
    """Whether the chat plus a full generation fits in ``limit`` tokens (always, without a tokenizer)."""
    if policy.tokenizer is None:
        return True
    return len(policy.render(chat, add_generation_prompt=True)) + max_new_tokens <= limit
