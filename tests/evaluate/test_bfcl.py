"""The BFCL suite: BFCL's own ground truth scores full marks, corrupted answers and garbage score zero,
nothing a model writes reaches the host, selection is deterministic; and the real default model runs."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval==2026.3.23")

from spade_rl.evaluate import EvalContext, bfcl, get_suite
from spade_rl.evaluate._bfcl_data import (
    AST_CATEGORIES,
    CATEGORIES,
    MULTI_TURN_CATEGORIES,
    BfclEntry,
    first_chat,
    load_category,
)
from spade_rl.evaluate._bfcl_parse import MAX_CALLS, parse_tool_calls
from spade_rl.evaluate.base import SuiteResult
from spade_rl.evaluate.bfcl import BFCLSuite, select
from spade_rl.policy import FakePolicy, SamplingSettings, default_tokenizer
from spade_rl.sandbox import CallResult, Sandbox, SandboxConfig, Status

LONG = SamplingSettings(max_new_tokens=1 << 20, temperature=0.0)  # the fake's answers are never cut

# Entries whose possible answer BFCL's own AST checker rejects, whatever the call: the upstream data
# (bfcl-eval 2026.3.23) cannot be reproduced.
UNREPRODUCIBLE = {
    # required array parameters whose list of acceptable values is empty ([]): leaving them out is
    # "missing_required", and no value is in the empty list
    "live_simple_106-63-0": "empty option list for required 'auto_loan_payment_start', 'bank_hours_start'",
    "live_simple_112-68-0": "empty option lists for five required parameters",
    # the answer needs a parameter that the function document does not declare
    "live_multiple_862-181-3": "'journey_start_time' is not a parameter of Trains_1_FindTrains",
    # the answer passes 'question', the document requires 'statement' and has no 'question'
    "live_multiple_964-207-0": "answer uses 'question'; transfer_to_human_agent requires 'statement'",
}
TOUCHED = Path("/tmp/spade-rl-bfcl-pwned")


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2)) as p:
        yield p


def ctx_for(pool, limit=None, seed=0, sampling=LONG):
    return EvalContext(limit=limit, seed=seed, sampling=sampling, sandbox=pool, batch_size=64)


# --- ground truth as a policy ---------------------------------------------------------------------
def pick(options: list, required: bool) -> tuple[bool, object]:
    """(include the parameter?, value) from a possible-answer option list, where "" means "may be
    left out": a required parameter takes its first real option (or "" when that is all there is)."""
    real = [o for o in options if o != ""]
    if required:
        return (True, resolve(real[0])) if real else (bool(options), "")
    if "" in options or not real:
        return False, None
    return True, resolve(real[0])


def resolve(value):
    """Nested dicts in possible answers map each key to its own option list."""
    if isinstance(value, dict):
        out = {}
        for key, options in value.items():
            real = [o for o in options if o != ""] if isinstance(options, list) else [options]
            if real:
                out[key] = resolve(real[0])
        return out
    if isinstance(value, list):
        return [resolve(v) for v in value]
    return value


def ground_truth_calls(entry: BfclEntry) -> list[dict]:
    docs = {f["name"]: f for f in entry.functions}
    calls = []
    for call in entry.possible_answer:
        ((name, params),) = call.items()
        required = docs[name]["parameters"].get("required", []) if name in docs else []
        arguments = {}
        for key, options in params.items():
            keep, value = pick(options, key in required)
            if keep:
                arguments[key] = value
        calls.append({"name": name, "arguments": arguments})
    return calls


def multi_turn_calls(entry: BfclEntry, turn: int) -> list[dict]:
    """BFCL's ground-truth call texts of one turn as tool calls (positional arguments get the names
    of the function document's parameters, in order)."""
    docs = {f["name"]: f for f in entry.functions}
    calls = []
    for text in entry.possible_answer[turn]:
        node = ast.parse(text, mode="eval").body
        names = list(docs[node.func.id]["parameters"]["properties"])
        arguments = {names[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
        arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
        calls.append({"name": node.func.id, "arguments": arguments})
    return calls


def tagged(calls: list[dict]) -> str:
    return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


def replay_policy(entries: list[BfclEntry], answer) -> FakePolicy:
    """A fake that recognises its entry by the first messages of the chat and answers
    ``answer(entry, turn, answered_this_turn)``."""
    by_chat = {json.dumps(first_chat(e)): e for e in entries}
    assert len(by_chat) == len(entries), "entries with identical prompts cannot be told apart"

    def script(chat):
        for n in range(2, len(chat) + 1):
            entry = by_chat.get(json.dumps(chat[:n]))
            if entry is not None:
                break
        else:
            raise AssertionError("a chat of no entry")
        turn, answered = -1, False
        for message in chat[1:]:
            if message["role"] == "user" and not message["content"].startswith("<tool_response>"):
                turn, answered = turn + 1, False
            elif message["role"] == "assistant":
                answered = True
        return answer(entry, turn, answered)

    return FakePolicy(script)


def ground_truth(entry, turn, answered):
    if entry.category in ("irrelevance", "live_irrelevance"):
        return "None of the tools can do this."
    if entry.category == "live_relevance":
        return tagged([{"name": entry.functions[0]["name"], "arguments": {}}])
    if not entry.multi_turn:
        return tagged(ground_truth_calls(entry))
    if answered or not entry.possible_answer[turn]:
        return "Done."  # no call: the turn is over
    return tagged(multi_turn_calls(entry, turn))


def distinct_groups(entries: list[BfclEntry]) -> list[list[BfclEntry]]:
    """Entries split so that no group holds two identical prompts (a fake tells them apart)."""
    groups: list[list[BfclEntry]] = []
    seen: list[set[str]] = []
    for entry in entries:
        key = json.dumps(first_chat(entry))
        for group, keys in zip(groups, seen, strict=True):
            if key not in keys:
                group.append(entry)
                keys.add(key)
                break
        else:
            groups.append([entry])
            seen.append({key})
    return groups


def run_groups(pool, entries, answer, **options):
    suite = BFCLSuite(**options)
    results = []
    for group in distinct_groups(entries):
        results += suite.run_entries(replay_policy(group, answer), ctx_for(pool), group)
    return results


@pytest.mark.parametrize(
    "category",
    [pytest.param(c, marks=pytest.mark.slow) if c.startswith(("live_m", "multi")) else c for c in CATEGORIES],
)
def test_ground_truth_scores_full_marks(pool, category):
    entries = load_category(category)
    results = run_groups(pool, entries, ground_truth)
    failed = {r.id: r.detail for r in results if not r.correct}
    expected = {i for i in UNREPRODUCIBLE if i.startswith(category + "_")}
    assert set(failed) == expected, {i: failed[i] for i in list(set(failed) - expected)[:3]}
    assert all(r.score == (1.0 if r.correct else 0.0) for r in results)


# --- corrupted answers ---------------------------------------------------------------------------
def renamed(entry, turn, answered):
    """The right calls with every function name changed."""
    if entry.multi_turn:
        if answered or not entry.possible_answer[turn]:
            return "Done."
        calls = multi_turn_calls(entry, turn)
    elif entry.category in ("irrelevance", "live_irrelevance"):
        calls = [{"name": entry.functions[0]["name"], "arguments": {}}]  # a call where none is wanted
        return tagged(calls)
    elif entry.category == "live_relevance":
        return "I would rather not call anything."
    else:
        calls = ground_truth_calls(entry)
    return tagged([{**c, "name": c["name"] + "_v2"} for c in calls])


def silent(entry, turn, answered):
    return "I have done everything you asked."


@pytest.mark.slow
@pytest.mark.parametrize("answer", [renamed, silent])
def test_corrupted_answers_score_zero(pool, answer):
    entries = [e for c in CATEGORIES for e in select(load_category(c), 25, 1, c)]
    if answer is silent:  # saying nothing is right for irrelevance
        entries = [e for e in entries if e.category not in ("irrelevance", "live_irrelevance")]
    results = run_groups(pool, entries, answer)
    assert len(results) == len(entries) and not any(r.correct for r in results)


def test_wrong_argument_values_fail_the_ast_check(pool):
    entries = select(load_category("simple_python"), 10, 0, "simple_python")

    def wrong_values(entry, turn, answered):
        calls = ground_truth_calls(entry)
        for call in calls:
            for key, value in call["arguments"].items():
                call["arguments"][key] = [value, "extra"] if isinstance(value, list) else f"not {value!r}"
        return tagged(calls)

    results = run_groups(pool, entries, wrong_values)
    assert not any(r.correct for r in results)
    assert {r.detail["error_type"].split(":")[0] for r in results} <= {"type_error", "value_error"}


def test_multi_turn_needs_every_turn(pool):
    """Right calls in every turn but the last fail: BFCL checks the state turn by turn."""
    entries = [
        e for e in select(load_category("multi_turn_base"), 10, 2, "multi_turn_base") if e.possible_answer[-1]
    ]

    def all_but_last(entry, turn, answered):
        if turn == len(entry.question) - 1:
            return "Done."
        return ground_truth(entry, turn, answered)

    results = run_groups(pool, entries, all_but_last)
    assert results and not any(r.correct for r in results)
    assert all(r.detail["stop"] == "done" and r.detail["reason"] == "checker" for r in results)


def test_long_tool_results_are_cut_for_the_model_not_for_the_checker(pool):
    entries = select(load_category("multi_turn_base"), 8, 4, "multi_turn_base")
    policy = replay_policy(entries, ground_truth)
    results = BFCLSuite(max_tool_response_chars=12).run_entries(policy, ctx_for(pool), entries)
    assert all(r.correct for r in results)
    shown = [m["content"] for chats, _ in policy.calls for chat in chats for m in chat]
    responses = [c for c in shown if c.startswith("<tool_response>")]
    assert responses and any("characters cut]</tool_response>" in c for c in responses)


# --- garbage and hostile output -------------------------------------------------------------------
GARBAGE = [
    "",
    "lorem ipsum dolor sit amet " * 40,
    "x" * 2_000_000,
    "<tool_call>",
    "<tool_call>{not json</tool_call>",
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    '<tool_call>{"name": 42, "arguments": {}}</tool_call>',
    '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>',
    tagged([{"name": "f", "arguments": {}}] * (MAX_CALLS + 1)),
    tagged([{"name": f"__import__('os').system('touch {TOUCHED}')", "arguments": {}}]),
    tagged([{"name": "ls", "arguments": {f"a=__import__('os').system('touch {TOUCHED}'),b": 1}}]),
    tagged(
        [
            {
                "name": "execute_multi_turn_func_call",
                "arguments": {"func_call_list": [f"open('{TOUCHED}', 'w')"]},
            }
        ]
    ),
    tagged([{"name": "open", "arguments": {"file": str(TOUCHED), "mode": "w"}}]),
    tagged([{"name": "echo", "arguments": {"content": "y" * 100_000, "file_name": "big.txt"}}]),
    tagged([{"name": "cd", "arguments": {"folder": [[[[["deep"]]]]] * 50}}]),
    tagged([{"name": "mean", "arguments": {"numbers": [1e308, float("inf")]}}]),
]


@pytest.mark.slow
def test_garbage_is_scored_and_never_reaches_the_host(pool):
    TOUCHED.unlink(missing_ok=True)
    # (live_relevance is left out: there, any call that decodes is right, whatever it calls)
    categories = (*AST_CATEGORIES[:4], *MULTI_TURN_CATEGORIES[:1])
    entries = [e for c in categories for e in select(load_category(c), 4, 3, c)]
    for number, text in enumerate(GARBAGE):
        # A garbage answer at every step, the same one each time (the multi-turn episodes run on).
        policy = FakePolicy(lambda chat, text=text: text)
        results = BFCLSuite(categories=",".join(categories), max_steps_per_turn=3).run_entries(
            policy, ctx_for(pool), entries
        )
        assert len(results) == len(entries), number
        assert not any(r.correct for r in results), number
        assert not any(r.error for r in results), number  # garbage is a wrong answer, never an error
        assert all(len(r.response) < 3000 for r in results)
        json.dumps([r.to_dict() for r in results])  # the result file can hold them
    assert not TOUCHED.exists()


def test_irrelevance_counts_undecodable_text_as_no_call(pool):
    entries = select(load_category("irrelevance"), 6, 0, "irrelevance")
    for text in ("", "<tool_call>{broken</tool_call>", "no tool fits"):
        results = BFCLSuite().run_entries(FakePolicy(lambda chat, text=text: text), ctx_for(pool), entries)
        assert all(r.correct for r in results)


# --- errors: the checker or the simulated APIs failed, not the model --------------------------------
def test_a_checker_that_raises_makes_an_error_not_a_wrong_answer(pool, monkeypatch):
    """BFCL's AST checker raising (here on one entry's calls) gives no verdict: that entry is an error,
    left out of the accuracy; the others are scored."""
    raising = bfcl.AST_SOURCE.replace(
        "            verdict = ast_checker(",
        "            if 'boom' in action:\n"
        "                raise RuntimeError('the checker broke')\n"
        "            verdict = ast_checker(",
    )
    assert raising != bfcl.AST_SOURCE
    monkeypatch.setattr(bfcl, "AST_SOURCE", raising)
    entries = select(load_category("simple_python"), 3, 0, "simple_python")

    def answer(entry, turn, answered):
        calls = ground_truth_calls(entry)
        if entry is entries[0]:
            calls[0]["arguments"]["boom"] = 1  # a wrong call, which the broken checker cannot judge
        return tagged(calls)

    results = BFCLSuite().run_entries(replay_policy(entries, answer), ctx_for(pool), entries)
    broken, *scored = results
    assert broken.error.startswith('["the checker raised RuntimeError: the checker broke')
    assert broken.detail["reason"] == "checker_error" and not broken.correct
    assert all(r.correct and not r.error for r in scored)
    suite = SuiteResult("bfcl", "v", results)
    assert (suite.errors, suite.scored, suite.accuracy) == (1, 2, 1.0)


def test_simulated_apis_that_fail_make_errors(pool, monkeypatch):
    """The simulated APIs raising when they execute the model's calls end the episode as an error."""
    raising = bfcl.MULTI_TURN_SOURCE.replace(
        '        if request.get("op") == "execute":\n',
        '        if request.get("op") == "execute":\n'
        '            raise RuntimeError("the simulated APIs broke")\n',
    )
    assert raising != bfcl.MULTI_TURN_SOURCE
    monkeypatch.setattr(bfcl, "MULTI_TURN_SOURCE", raising)
    entries = [
        e for e in select(load_category("multi_turn_base"), 6, 0, "multi_turn_base") if e.possible_answer[0]
    ]
    results = BFCLSuite().run_entries(replay_policy(entries[:2], ground_truth), ctx_for(pool), entries[:2])
    assert len(results) == 2
    for result in results:
        assert result.detail["stop"].startswith("env_error") and not result.correct
        assert (
            result.error.startswith("BFCL's simulated APIs failed: ")
            and "the simulated APIs broke" in result.error
        )


@pytest.mark.parametrize(
    "result, wrong_answer",
    [
        (CallResult(Status.TIMEOUT, reason="timeout", error="past 10 s"), True),  # the calls kept it busy
        (CallResult(Status.MEMORY, reason="memory", error="out of memory"), True),
        (CallResult(Status.CRASHED, reason="crashed", error="signal 11"), False),
        (CallResult(Status.TIMEOUT, reason="not_opened_timeout", error="load timed out"), False),  # never ran
        (CallResult(Status.WORKER_LOST, reason="worker_lost"), False),
        (CallResult(Status.OK, ["not json", 0.0, True, False, {}]), False),
        (
            CallResult(
                Status.OK,
                [json.dumps({"valid": False, "error_type": "checker_exception"}), 0.0, True, False, {}],
            ),
            False,
        ),
        (
            CallResult(
                Status.OK, [json.dumps({"valid": False, "error_type": "type_error"}), 0.0, True, False, {}]
            ),
            True,
        ),
    ],
)
def test_checker_outcomes_are_wrong_answers_or_errors(result, wrong_answer):
    valid, detail, error = bfcl._ast_verdict(result)
    assert not valid and detail["reason"]
    assert (error == "") is wrong_answer, (detail, error)


def test_parser_reads_the_convention_and_rejects_the_rest():
    parsed = parse_tool_calls(
        'Sure.\n<tool_call>\n```json\n{"name": "a", "arguments": {"x": 1}}\n```\n</tool_call>'
        '<tool_call>[{"name": "b", "parameters": {"y": [2]}}, {"name": "c", "arguments": "{\\"z\\": 3}"}]'
        '</tool_call><tool_call>{"name": "d"}'
    )
    assert parsed.ok and parsed.calls == [("a", {"x": 1}), ("b", {"y": [2]}), ("c", {"z": 3}), ("d", {})]
    assert parse_tool_calls("no calls here") == parse_tool_calls("") and parse_tool_calls("").calls == []
    for bad in ('<tool_call>{"name": "a"} trailing</tool_call>', '<tool_call>{"arguments": {}}</tool_call>'):
        parsed = parse_tool_calls(bad)
        assert not parsed.ok and parsed.calls == [] and parsed.error.startswith("tool call 1")
    parsed = parse_tool_calls(tagged([{"name": "ok", "arguments": {}}]) + "<tool_call>oops</tool_call>")
    assert not parsed.ok and "tool call 2" in parsed.error  # one bad block fails the whole answer


# --- selection, options, context ------------------------------------------------------------------
def test_selection_is_seeded_and_per_category(pool):
    entries = load_category("parallel")
    first = [e.id for e in select(entries, 7, 5, "parallel")]
    assert first == [e.id for e in select(entries, 7, 5, "parallel")]
    assert first != [e.id for e in select(entries, 7, 6, "parallel")]
    assert len(set(first)) == 7 and first == sorted(first, key=[e.id for e in entries].index)
    assert [e.id for e in select(entries, None, 5, "parallel")] == [e.id for e in entries]

    suite = get_suite("bfcl", categories="simple_python,irrelevance")
    policy = FakePolicy(lambda chat: "no idea")
    runs = [suite.run(policy, ctx_for(pool, limit=3, seed=9)) for _ in range(2)]
    assert [i.id for i in runs[0].items] == [i.id for i in runs[1].items]
    assert runs[0].n == 6 and runs[0].metrics["n/simple_python"] == 3.0
    assert runs[0].metrics["accuracy/irrelevance"] == 1.0 and runs[0].metrics["accuracy/simple_python"] == 0.0
    assert runs[0].metrics["accuracy/category_mean"] == 0.5
    assert runs[0].config["categories"] == ["simple_python", "irrelevance"] and runs[0].config["seed"] == 9
    assert runs[0].version.startswith("bfcl-eval ")


def test_options_are_checked():
    with pytest.raises(ValueError, match="allowed: simple_python"):
        get_suite("bfcl", categories="simple_python,simple_cobol")
    with pytest.raises(ValueError, match="max_steps_per_turn must be positive"):
        get_suite("bfcl", max_steps_per_turn=0)
    with pytest.raises(ValueError, match="unknown option"):
        get_suite("bfcl", turns=3)
    assert get_suite("bfcl", categories="irrelevance,irrelevance").options["categories"] == ("irrelevance",)


@pytest.mark.slow
def test_conversations_too_long_for_the_context_are_scored_without_generating(pool):
    entries = select(load_category("multi_turn_base"), 2, 0, "multi_turn_base")
    entries += select(load_category("simple_python"), 2, 0, "simple_python")
    policy = FakePolicy(lambda chat: "unused", tokenizer=default_tokenizer())
    sampling = SamplingSettings(max_new_tokens=64, temperature=0.0)
    results = BFCLSuite(max_context_tokens=200).run_entries(policy, ctx_for(pool, sampling=sampling), entries)
    assert [r.detail["reason"] for r in results] == ["context"] * 4 and not policy.calls


# --- the real default model -----------------------------------------------------------------------
@pytest.mark.slow
def test_default_model_through_the_sandbox(pool):
    from spade_rl.policy import PolicyConfig, make_policy

    policy = make_policy(PolicyConfig(seed=0))
    suite = get_suite("bfcl", categories="simple_python,irrelevance,multi_turn_base", max_steps_per_turn=2)
    sampling = SamplingSettings(max_new_tokens=48, temperature=0.0, logprobs=False)
    result = suite.run(policy, EvalContext(limit=1, seed=0, sampling=sampling, sandbox=pool, batch_size=4))
    assert result.n == 3 and 0.0 <= result.accuracy <= 1.0
    assert [i.detail["category"] for i in result.items] == ["simple_python", "irrelevance", "multi_turn_base"]
    assert all(i.response or i.detail.get("reason") == "context" for i in result.items)
    json.dumps(result.to_dict())
