# --- spade-rl kit "tool_use": the boilerplate of a tool-use environment (standard library only) ---
# A design subclasses ToolUseTask (also named ToolUseBaseEnv, as in the SPADE reference,
# spade/core/envs/tool_use_base_env.py) and writes: `tools` (name -> (description, {parameter: type})),
# one tool_<name>(...) method per tool, make(rng) that builds the data and returns the task, and
# plan() -> the tool calls that solve it. The task is either (question, answer), answered with
# <answer>...</answer>, or a list of (instruction, check) steps shown one at a time, BFCL-style, each
# done when its check() is true after a tool call, the last answered with <answer>done</answer>.
# The kit writes the tool schemas (OpenAI function format) into the first observation and the reset
# info, parses <tool_call> blocks (JSON, or <function=...><parameter=...> as Qwen3 writes them),
# checks arguments against the schemas, runs the tools, judges the answer and plays plan() as its
# solution. A malformed action or a failing tool gives an error observation, never an exception.
import inspect
import json
import random
import re

MAX_CALLS_PER_TURN = 10
MAX_RESPONSE_CHARS = 2000
_TYPES = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
}
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
CALL_FORMAT = '<tool_call>{"name": TOOL_NAME, "arguments": {...}}</tool_call>'
PROTOCOL = (
    'To call a tool, write <tool_call>{"name": TOOL_NAME, "arguments": {...}}</tool_call>; several calls '
    "in one message are answered in order, each by a <tool_response>. Then write "
    "<answer>YOUR ANSWER</answer>."
)


def _tagged(text, tag):
    """The contents of every complete <tag>...</tag>, in order (a linear scan, no regex backtracking)."""
    opening, closing, found, at = f"<{tag}>", f"</{tag}>", [], 0
    while (start := text.find(opening, at)) != -1:
        end = text.find(closing, start + len(opening))
        if end == -1:
            break
        found.append(text[start + len(opening) : end])
        at = end + len(closing)
    return found


def _parse_call(text):
    """(name, arguments) from one <tool_call> body, or a string saying what is wrong."""
    text = text.strip()
    if text.startswith("<function="):  # <function=name><parameter=key>value</parameter></function>
        name_end = text.find(">")
        name, arguments = text[len("<function=") : name_end].strip(), {}
        for part in text[name_end + 1 :].split("<parameter=")[1:]:
            key, _, rest = part.partition(">")
            value = rest.split("</parameter>")[0].strip()
            try:
                arguments[key.strip()] = json.loads(value)
            except (ValueError, RecursionError):
                arguments[key.strip()] = value
        return name, arguments
    try:
        call = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"invalid JSON in tool call ({exc})"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return 'a tool call is a JSON object {"name": ..., "arguments": {...}}'
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI style: the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return "arguments is a string that is not valid JSON"
    return call["name"], arguments


def _schema(name, spec):
    """One tool's OpenAI function schema from (description, {parameter: type or schema}) or from
    {"description": ..., "parameters": JSON schema}. A parameter name ending in "?" is optional."""
    if isinstance(spec, dict) and "parameters" in spec:
        description, parameters = spec.get("description", ""), spec["parameters"]
    elif isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[1], dict):
        description, properties, required = spec[0], {}, []
        for key, kind in spec[1].items():
            plain = key.rstrip("?")
            properties[plain] = {"type": kind} if isinstance(kind, str) else {"type": "string", **kind}
            if not key.endswith("?"):
                required.append(plain)
        parameters = {"type": "object", "properties": properties, "required": required}
    else:
        raise ValueError(f"tool {name!r}: write (description, {{parameter: type}}), got {spec!r:.80}")
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties", {}), dict):
        raise ValueError(f"tool {name!r}: parameters must be a JSON schema object with properties")
    for key, prop in parameters.get("properties", {}).items():
        if not isinstance(prop, dict) or prop.get("type", "string") not in _TYPES:
            raise ValueError(f"tool {name!r} parameter {key!r}: type must be one of {', '.join(_TYPES)}")
    return {
        "type": "function",
        "function": {"name": name, "description": str(description), "parameters": parameters},
    }


def _argument_errors(parameters, arguments):
    if not isinstance(arguments, dict):
        return ["arguments must be a JSON object"]
    properties = parameters.get("properties", {})
    errors = [f"missing argument {k!r}" for k in parameters.get("required", []) if k not in arguments]
    for key, value in arguments.items():
        prop = properties.get(key)
        if prop is None:
            errors.append(f"unexpected argument {key!r}; allowed: {', '.join(properties) or 'none'}")
            continue
        kind = prop.get("type", "string")
        if not isinstance(value, _TYPES[kind]) or (isinstance(value, bool) and kind in ("integer", "number")):
            errors.append(f"argument {key!r} must be of type {kind}")
        elif "enum" in prop and value not in prop["enum"]:
            errors.append(f"argument {key!r} must be one of {', '.join(map(str, prop['enum']))}")
    return errors


def _normalise(text):
    return " ".join(str(text).strip().strip(".\"'`").lower().split())


class ToolUseTask:
    tools = {}  # noqa: RUF012 - a design's class attribute, read, never changed
    hint = ""
    intro = "You are an assistant with tools."
    answer_attempts = 1  # wrong answers that end a question task (the reference lets it go on: more guessing)

    def __init__(self, max_turns: int = 10):
        self.max_turns = max_turns
        self._turn, self._done, self._steps, self._step = 0, True, [], 0

    def make(self, rng):
        raise NotImplementedError(
            "a subclass writes make(rng) -> (question, answer) or [(instruction, check)]"
        )

    def plan(self):
        raise NotImplementedError(
            "a subclass writes plan() -> [(tool name, {arguments}), ...] that solves it"
        )

    # --- the episode -----------------------------------------------------------------------------
    def reset(self, seed=None):
        self.state = {}
        task = self.make(random.Random(0 if seed is None else seed))
        self._schemas = [
            _schema(name, spec) for name, spec in dict(self.tools or getattr(self, "_tools", {})).items()
        ]
        if not self._schemas:
            raise ValueError(
                "the environment declares no tools: set tools = {name: (description, {parameter: type})}"
            )
        for schema in self._schemas:
            self._check_method(schema["function"])
        if (
            isinstance(task, (tuple, list))
            and len(task) == 2
            and isinstance(task[0], str)
            and not callable(task[1])
        ):
            self._question, self._answer, self._steps = task[0].strip(), " ".join(str(task[1]).split()), []
            if not self._question or not self._answer:
                raise ValueError("make() must return a non-empty question and answer")
        else:
            self._steps = [(str(text).strip(), check) for text, check in task]
            if not self._steps or not all(text and callable(check) for text, check in self._steps):
                raise ValueError(
                    "make() must return (question, answer) or a list of (instruction, check function)"
                )
            self._question, self._answer = self._steps[0][0], "done"
        self._turn, self._done, self._step, self._wrong = 0, False, 0, 0
        unevaluable = [i + 1 for i, (_, check) in enumerate(self._steps) if self._met(check) is None]
        info = {**self._info("start"), "tools": self._schemas}
        if self._steps:
            info.update(steps=len(self._steps), unevaluable_steps=unevaluable)
        return self._first_observation(), info

    def step(self, action):
        if self._done:
            return "The episode is over.", 0.0, True, False, self._info("over")
        self._turn += 1
        action = action if isinstance(action, str) else ""
        answers = _tagged(action, "answer")
        if answers:
            return self._judge(answers[-1])
        calls = _tagged(action, "tool_call")
        if not calls:  # the reference rewards this -0.1; rewards here lie in [0, 1]
            return self._after(f"No tool call or answer found. {PROTOCOL}", "invalid")
        lines = [self._respond(call) for call in calls[:MAX_CALLS_PER_TURN]]
        skipped = json.dumps({"error": f"not run: at most {MAX_CALLS_PER_TURN} tool calls per turn"})
        lines += [(skipped, "")] * (len(calls) - len(lines))
        text = "\n".join(f"<tool_response>{line}</tool_response>{progress}" for line, progress in lines)
        return self._after(text, "tools")

    def solution(self):
        actions, known = [], {schema["function"]["name"] for schema in self._schemas}
        for item in self.plan():
            batch = item if isinstance(item, list) else [item]
            for call in batch:
                if not (
                    isinstance(call, tuple)
                    and len(call) == 2
                    and call[0] in known
                    and isinstance(call[1], dict)
                ):
                    raise ValueError(
                        f"plan() items are (tool name, {{arguments}}) of declared tools, got {call!r:.80}"
                    )
            calls = [json.dumps({"name": name, "arguments": arguments}) for name, arguments in batch]
            actions.append("".join(f"<tool_call>{call}</tool_call>" for call in calls))
        return [*actions, f"<answer>{self._answer}</answer>"]

    def get_tools(self):
        """The tool schemas in OpenAI function format (for a chat template's tools=...)."""
        return list(self._schemas)

    def check_answer(self, answer):
        """Names ignoring case and spaces; a number as the one number in the answer, within 0.01
        (the reference's tolerance, spade/core/envs/tool_use_base_env.py _check_answer)."""
        expected = self._answer
        if _NUMBER.fullmatch(expected.replace(",", "").lstrip("$")):
            numbers = _NUMBER.findall(answer.replace(",", ""))
            return (
                len(numbers) == 1
                and len(numbers[0]) <= 15
                and abs(float(numbers[0]) - float(expected.replace(",", "").lstrip("$"))) <= 0.01
            )
        return _normalise(answer) == _normalise(expected)

    def close(self):
        pass

    # --- the kit's own -----------------------------------------------------------------------------
    def _first_observation(self):
        tools = "\n".join(json.dumps(schema) for schema in self._schemas)
        head = (
            f"{self.intro}\nTools (OpenAI function schemas, one per line):\n{tools}\n{PROTOCOL}\n"
            f"You have {self.max_turns} turns.\n\n"
        )
        if not self._steps:
            return head + f"Task: {self._question}"
        count = len(self._steps)
        return head + (
            f"The user gives {count} instructions, one at a time: the next appears when the current one is "
            f"done. When all are done, write <answer>done</answer>.\n"
            f"Instruction 1 of {count}: {self._question}"
        )

    def _check_method(self, function):
        name, parameters = function["name"], function["parameters"]
        method = getattr(self, f"tool_{name}", None)
        if not callable(method):
            raise ValueError(f"tool {name!r} is declared but the class has no method tool_{name}")
        accepted = inspect.signature(method).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in accepted):
            return
        names = {p.name for p in accepted}
        declared = set(parameters.get("properties", {}))
        needed = {p.name for p in accepted if p.default is p.empty and p.kind is not p.VAR_POSITIONAL}
        if declared - names or needed - declared:
            raise ValueError(
                f"tool {name!r} declares parameters {sorted(declared)} but tool_{name} takes "
                f"{sorted(names)}: the names must be the same"
            )

    def _respond(self, text):
        """(the JSON response to one tool call, what it completed of the instructions)."""
        parsed = _parse_call(text)
        if isinstance(parsed, str):
            return json.dumps({"error": f"{parsed}; write {CALL_FORMAT}"}), ""
        name, arguments = parsed
        schema = next((s["function"] for s in self._schemas if s["function"]["name"] == name), None)
        if schema is None:
            known = ", ".join(s["function"]["name"] for s in self._schemas)
            return json.dumps({"error": f"unknown tool {name!r:.60}; available tools: {known}"}), ""
        errors = _argument_errors(schema["parameters"], arguments)
        if errors:
            return json.dumps({"error": f"bad arguments for {name}: {'; '.join(errors)}"}), ""
        try:
            result = getattr(self, f"tool_{name}")(**arguments)
            line = json.dumps({"result": result}, default=str)
        except Exception as exc:  # noqa: BLE001 - a failing tool answers with its error, as in the reference
            line = json.dumps({"error": f"{name} failed: {type(exc).__name__}: {exc}"}, default=str)
        if len(line) > MAX_RESPONSE_CHARS:
            line = line[: MAX_RESPONSE_CHARS - 5] + "[...]"
        return line, self._advance()  # the tool ran: its instruction may be done

    def _met(self, check):
        """True or False, or None when the check raises."""
        try:
            takes = len(inspect.signature(check).parameters)
            return bool(check(self.state) if takes else check())
        except Exception:  # noqa: BLE001 - a check that raises is not met
            return None

    def _advance(self):
        """After a tool call: the current instruction done? Then the next one (the reference's
        _advance_if_done, one instruction per call, done here for every tool)."""
        if not self._steps or self._step >= len(self._steps) or not self._met(self._steps[self._step][1]):
            return ""
        self._step += 1
        if self._step == len(self._steps):
            return "\n[All instructions are done. Write <answer>done</answer>.]"
        done, count, following = self._step, len(self._steps), self._steps[self._step][0]
        return f"\n[Instruction {done} is done. Instruction {done + 1} of {count}: {following}]"

    def _judge(self, answer):
        if self._steps:
            if self._step == len(self._steps) and _normalise(answer) == "done":
                self._done = True
                return "Correct: every instruction is done.", 1.0, True, False, self._info("correct")
            pending = self._steps[min(self._step, len(self._steps) - 1)][0]
            return self._after(
                f"Not done yet: instruction {self._step + 1} is still open: {pending}", "early"
            )
        try:
            check = getattr(
                self, "_check_answer", self.check_answer
            )  # the reference's name, if a design has it
            right = bool(check(answer))
        except Exception:  # noqa: BLE001 - a check_answer that raises rejects the answer
            right = False
        if right:
            self._done = True
            return "Correct answer.", 1.0, True, False, self._info("correct")
        self._wrong += 1
        if self._wrong >= self.answer_attempts:
            self._done = True
            return "Wrong answer.", 0.0, True, False, self._info("wrong")
        return self._after("Wrong answer. Keep using the tools.", "wrong")

    def _after(self, observation, status):
        if self._turn >= self.max_turns:
            self._done = True
            return observation + "\nYou are out of turns.", 0.0, False, True, self._info(status)
        return (
            observation + f"\nTurns left: {self.max_turns - self._turn}.",
            0.0,
            False,
            False,
            self._info(status),
        )

    def _info(self, status):
        return {
            "turn": self._turn,
            "status": status,
            "step": min(self._step, len(self._steps)) if self._steps else 0,
        }


ToolUseBaseEnv = ToolUseTask  # the reference's name for the base class


# --- the design ---
