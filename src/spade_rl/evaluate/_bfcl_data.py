"""BFCL v4 data from the ``bfcl-eval`` wheel: test entries, possible answers, tools, prompts.

    entries = load_category("simple_python")         # [BfclEntry(id="simple_python_0", ...), ...]
    chat = first_chat(entries[0])                     # system prompt with the tools + the user's question

Only data files are read here (JSON lines shipped in ``bfcl_eval/data``); nothing of ``bfcl_eval`` is
imported but the empty package itself, so no vendor SDK, no ``BFCL_PROJECT_ROOT`` folder and no
checker code runs in the caller. The checkers run in the sandbox (``_bfcl_ast_env.py``,
``_bfcl_multi_turn_env.py``).

The prompt follows this project's tool-use convention (``<tool_call>{"name", "arguments"}</tool_call>``)
instead of BFCL's Python-call format: the tools are described as OpenAI-style JSON schemas (BFCL's
own type names mapped as its ``GORILLA_TO_OPENAPI`` table does, its Python hint appended to each
description) in the system prompt, and the calls come back as JSON, which is what BFCL's checkers
receive from function-calling models.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
from dataclasses import dataclass, field
from pathlib import Path

VERSION_PREFIX = "BFCL_v4"
# BFCL's single-turn categories in Python (scored by its AST checker; the (ir)relevance ones by whether
# any call decodes) and its multi-turn categories played as episodes (scored by its multi-turn checker).
AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_param", "multi_turn_long_context")
CATEGORIES = AST_CATEGORIES + RELEVANCE_CATEGORIES + MULTI_TURN_CATEGORIES
DEFAULT_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "multi_turn_base",
)

# BFCL's multi-turn function documents, one file per simulated API class
# (bfcl_eval.constants.executable_backend_config.MULTI_TURN_FUNC_DOC_FILE_MAPPING).
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
# bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI
GORILLA_TO_OPENAPI = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."  # BFCL adds it to every description

CALL_SYNTAX = (
    'Call a tool by writing <tool_call>{"name": TOOL_NAME, "arguments": {...}}</tool_call>; for several '
    "calls, write one <tool_call> block for each."
)
SINGLE_TURN_PROMPT = (
    "You are an expert in composing function calls. You are given a request and a set of tools. "
    f"{CALL_SYNTAX} Reply with the tool calls only. If none of the tools can be used, or the request "
    "lacks an argument a tool requires, call no tool and say so."
)
MULTI_TURN_PROMPT = (
    "You are an expert in composing function calls. You are given requests and a set of tools. "
    f"{CALL_SYNTAX} The results come back in the next message as <tool_response>...</tool_response>, "
    "one for each call, in order. At each turn, keep calling tools until you have done what the user "
    "asked, then reply without a tool call: the turn is over and the next request follows. If none of "
    "the tools can be used, or the request lacks an argument a tool requires, call no tool and say so."
)


@dataclass
class BfclEntry:
    id: str
    category: str
    question: list[list[dict]]  # turns, each a list of messages
    functions: list[dict]  # BFCL's function documents as shipped (what its checkers read)
    possible_answer: list | None = None  # AST: [{name: {param: [options]}}]; multi-turn: [[call, ...], ...]
    initial_config: dict = field(default_factory=dict)  # multi-turn: the simulated APIs' starting state
    involved_classes: list[str] = field(default_factory=list)

    @property
    def multi_turn(self) -> bool:
        return self.category in MULTI_TURN_CATEGORIES


def data_dir() -> Path:
    """The data folder of the installed ``bfcl-eval`` wheel."""
    return Path(str(importlib.resources.files("bfcl_eval").joinpath("data")))


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"bfcl-eval has no data file {path}; is the installed version a BFCL v4 one?")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_category(category: str) -> list[BfclEntry]:
    """Every entry of ``category`` (one of ``CATEGORIES``) in the wheel's order, with its possible answer."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; allowed: {', '.join(CATEGORIES)}")
    root = data_dir()
    rows = _read_jsonl(root / f"{VERSION_PREFIX}_{category}.json")
    answers: dict[str, list] = {}
    if category not in RELEVANCE_CATEGORIES:
        answers = {
            row["id"]: row["ground_truth"]
            for row in _read_jsonl(root / "possible_answer" / f"{VERSION_PREFIX}_{category}.json")
        }
    docs = _func_docs(root) if category in MULTI_TURN_CATEGORIES else {}
    entries = []
    for row in rows:
        entry = BfclEntry(
            id=row["id"],
            category=category,
            question=row["question"],
            functions=row.get("function", []),
            possible_answer=answers.get(row["id"]),
            initial_config=row.get("initial_config", {}),
            involved_classes=row.get("involved_classes", []),
        )
        if entry.multi_turn:
            # As bfcl_eval.utils.populate_test_cases_with_predefined_functions does.
            entry.functions = [doc for name in entry.involved_classes for doc in docs[name]]
        if category not in RELEVANCE_CATEGORIES and entry.possible_answer is None:
            raise ValueError(f"bfcl-eval ships no possible answer for {entry.id}")
        entries.append(entry)
    return entries


def _func_docs(root: Path) -> dict[str, list[dict]]:
    return {name: _read_jsonl(root / "multi_turn_func_doc" / file) for name, file in FUNC_DOC_FILES.items()}


def openai_tool(function: dict) -> dict:
    """A BFCL function document as an OpenAI-style tool schema, as BFCL presents it to function-calling
    models (its ``convert_to_tool``), names kept as they are (dots included)."""
    function = copy.deepcopy(function)
    parameters = function.get("parameters", {"type": "dict", "properties": {}})
    parameters["type"] = "object"
    parameters["properties"] = _cast_properties(parameters.get("properties", {}))
    return {
        "type": "function",
        "function": {
            "name": function["name"],
            "description": function.get("description", "") + PYTHON_HINT,
            "parameters": parameters,
        },
    }


def _cast_properties(properties: dict) -> dict:
    for schema in properties.values():
        _cast_schema(schema)
    return properties


def _cast_schema(schema: dict) -> None:
    kind = schema.get("type", "string")
    if kind == "float":
        schema["format"] = "float"
        schema["description"] = schema.get("description", "") + " This is a float type value."
    schema["type"] = GORILLA_TO_OPENAPI.get(kind, "string")
    if isinstance(schema.get("properties"), dict):
        _cast_properties(schema["properties"])
    if isinstance(schema.get("items"), dict):
        _cast_schema(schema["items"])


def system_prompt(entry: BfclEntry) -> str:
    tools = "\n".join(json.dumps(openai_tool(f), ensure_ascii=False) for f in entry.functions)
    intro = MULTI_TURN_PROMPT if entry.multi_turn else SINGLE_TURN_PROMPT
    return f"{intro}\n\nAvailable tools (JSON schemas, one per line):\n{tools}"


def first_chat(entry: BfclEntry) -> list[dict]:
    """The system prompt followed by the first turn's messages. A system message of the entry itself
    (some live entries have one) is appended to ours, as BFCL merges it with its own."""
    system = system_prompt(entry)
    messages = []
    for message in turn_messages(entry, 0):
        if message["role"] == "system":
            system += "\n\n" + message["content"]
        else:
            messages.append(message)
    return [{"role": "system", "content": system}, *messages]


def turn_messages(entry: BfclEntry, turn: int) -> list[dict]:
    return [{"role": m["role"], "content": m["content"]} for m in entry.question[turn]]
