"""Designer prompts: ask the policy for one environment grounded in a document, and for a hint.

``designer_chat`` builds the chat (system + user messages) from a corpus document, a skill and
memory examples; ``hint_chat`` builds the second call of the two-call hint mode, which reads the
code; ``question_designer_chat`` and ``tool_kit_designer_chat`` ask for a design in a kit's form
(``spade_rl.envs.kits``), ``edit_chat`` asks for an edited version of a design the agent wins
sometimes (harder when it wins it often, easier when rarely), and ``repair_chat`` sends a failed design
back with what failed. Every example is labelled with the agent's measured no-hint win rate and where
that lies against the frontier (:func:`difficulty`: too hard, at the frontier, too easy). All return
plain chat messages (``{"role", "content"}``): the policy renders them with its
tokenizer's chat template, never with hand-written special tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spade_rl.design.parse import HintRules

GAME_SKILLS = ("math", "logic", "spatial", "pattern", "optimisation", "causal")
TOOL_USE_SKILLS = ("retail", "travel", "calendar", "banking", "files", "data lookup")
SETTINGS = ("games", "tool_use")
HINT_MODES = ("inline", "separate")

_CONTRACT = """\
An environment is ONE Python module with exactly ONE class whose name ends in `Env`:

    class SomethingEnv:
        def __init__(self, max_turns: int = 10): ...          # no I/O, no randomness here
        def reset(self, seed: int | None = None) -> tuple[str, dict]:
            # create random.Random(seed) here; return (first observation text, info dict)
        def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
            # return (observation, reward, terminated, truncated, info)
        def solution(self) -> list[str]:
            # after reset(): the actions that win this instance when sent to step() in order

Rules:
- Only the Python standard library. Deterministic for a given seed: all randomness from
  random.Random(seed); no time, no global random, no set iteration order in outputs.
- Rewards lie in [0, 1]: 1.0 for a win (terminated=True), 0.0 otherwise; partial credit allowed.
- Never raise on a malformed action: answer with an observation that explains the expected format,
  reward 0.0, and count the turn. End the episode (truncated=True) after max_turns turns.
- The first observation explains the task and the exact action format.
- info dicts hold only plain JSON values (str, int, float, bool, None, lists, dicts)."""

_GAMES = """\
The agent writes each action inside \\boxed{...}; parse the LAST \\boxed{...} of the action text.
Make the task need reasoning: the agent should have to think, not guess."""

_TOOL_USE = """\
This is a TOOL-USE environment. The first observation lists the tools as OpenAI-style JSON schemas
({"type": "function", "function": {"name", "description", "parameters"}}) and states a question.
The agent calls tools with <tool_call>{"name": ..., "arguments": {...}}</tool_call> (one or more per
action) and finishes with <answer>...</answer>. Tool results come back as JSON in the observation;
invalid JSON, unknown tools or bad arguments give an error observation, never an exception.
Answering the question must need at least two tool calls."""


# The frontier a label is measured against when no other is given: the archive's (ArchiveConfig's
# frontier_low and frontier_high) and the band of the band-fraction metric.
FRONTIER = (0.15, 0.85)
DIFFICULTIES = ("too hard", "at the frontier", "too easy", "not played yet")


def difficulty(win_rate: float | None, frontier: tuple[float, float] = FRONTIER) -> str:
    """Where a measured no-hint win rate lies against ``frontier`` (inclusive at both edges, as the
    archive's): "too hard" below it, "at the frontier" inside, "too easy" above; "not played yet"
    without a measurement."""
    low, high = frontier
    if not 0.0 <= low < high <= 1.0:
        raise ValueError(f"a frontier needs 0 <= low < high <= 1, got {frontier}")
    if win_rate is None:
        return "not played yet"
    if win_rate < low:
        return "too hard"
    return "too easy" if win_rate > high else "at the frontier"


def measured(win_rate: float | None, frontier: tuple[float, float] = FRONTIER) -> str:
    """An example's label as the prompts write it: ``"too hard: the agent won it 12% of the time"``."""
    label = difficulty(win_rate, frontier)
    if win_rate is None:
        return label
    return f"{label}: the agent won it {100 * win_rate:.0f}% of the time"


@dataclass(frozen=True)
class ShownExample:
    """An environment from the archive as the designer's prompt shows it, with how the agent fared on it
    (built from the archive's ``MemoryExample``, which holds the whole record). Win rates are None for an
    environment not played yet (``win_rate_hint`` also when it was played without the hint)."""

    source: str
    hint: str
    skill: str
    win_rate: float | None  # agent's win rate without the hint
    win_rate_hint: float | None  # with the hint
    positive: bool  # True: the memory drew it as a positive (imitate); False: as a negative (avoid)
    frontier: tuple[float, float] = FRONTIER  # the band its label is measured against

    @property
    def label(self) -> str:
        return difficulty(self.win_rate, self.frontier)


@dataclass(frozen=True)
class PromptConfig:
    """How the designer is asked. ``setting`` and ``hint_mode`` default to "games" and "inline" on their
    own; inside a design phase (``DesignPhaseConfig``) they are the phase's own, and setting them to
    anything else there is refused. ``hint``: the limits the prompt states and the parser enforces."""

    setting: str | None = None
    hint_mode: str | None = None
    max_document_words: int = 1500
    max_example_chars: int = 3000
    hint: HintRules = field(default_factory=HintRules)

    def __post_init__(self) -> None:
        if self.setting is not None and self.setting not in SETTINGS:
            raise ValueError(f"prompt setting {self.setting!r} is not one of {list(SETTINGS)}")
        if self.hint_mode is not None and self.hint_mode not in HINT_MODES:
            raise ValueError(f"hint_mode {self.hint_mode!r} is not one of {list(HINT_MODES)}")
        if not isinstance(self.hint, HintRules):
            raise ValueError(f"prompt hint must be HintRules, got {type(self.hint).__name__}")
        if self.max_document_words < 1 or self.max_example_chars < 200:
            raise ValueError("max_document_words must be >= 1 and max_example_chars >= 200")


def _truncate_words(text: str, limit: int) -> str:
    words = text.split()
    return text.strip() if len(words) <= limit else " ".join(words[:limit]) + " [...]"


def _cut_source(source: str, limit: int) -> str:
    return source if len(source) <= limit else source[:limit] + "\n# [...]"


def _example_block(example: ShownExample, index: int, limit: int) -> str:
    rates = ""
    if example.win_rate is not None:
        rates = f" win rate without hint {example.win_rate:.2f}"
        if example.win_rate_hint is not None:
            rates += f", with hint {example.win_rate_hint:.2f}"
    return (
        f"Example {index} [{example.label.upper()}] skill={example.skill}{rates}\n"
        f"```python\n{_cut_source(example.source, limit).rstrip()}\n```\nHint: {example.hint}"
    )


def _band_words(frontier: tuple[float, float]) -> str:
    low, high = frontier
    return f"{100 * low:.0f}% to {100 * high:.0f}% of the time without the hint"


def designer_chat(
    document: str,
    skill: str,
    examples: list[ShownExample] | tuple[ShownExample, ...] = (),
    config: PromptConfig = PromptConfig(),
    title: str = "",
) -> list[dict]:
    """The chat that asks for one environment (and, in inline hint mode, its hint); an empty
    ``document`` leaves the grounding out, no ``examples`` the memory."""
    setting_rules = _TOOL_USE if config.setting == "tool_use" else _GAMES  # None: games
    system = (
        "You design executable training environments for an AI agent. "
        "You write correct, self-contained Python.\n\n" + _CONTRACT + "\n\n" + setting_rules
    )
    difficulty = (
        "It should be hard enough that a capable agent needs several tries, but solvable: your "
        "solution() must win."
    )
    if document.strip():
        parts = [
            "Design a new environment grounded in this document"
            + (f" ({title})" if title else "")
            + ":\n<document>\n"
            + _truncate_words(document, config.max_document_words)
            + "\n</document>",
            f"Skill to exercise: {skill}. Take the entities, rules or facts of the document and turn them "
            "into a task that trains this skill. " + difficulty,
        ]
    else:  # no grounding (an ablation): the skill alone
        parts = [f"Design a new environment. Skill to exercise: {skill}. " + difficulty]
    if examples:
        blocks = [_example_block(e, i + 1, config.max_example_chars) for i, e in enumerate(examples)]
        parts.append(
            "Past environments, each labelled by how often the agent won it: TOO HARD, AT THE FRONTIER (won "
            + _band_words(examples[0].frontier)
            + ") or TOO EASY. Make something new at the frontier: harder than the too easy ones, easier "
            "than the too hard ones.\n\n" + "\n\n".join(blocks)
        )
    answer = "Answer with the complete module in one ```python code block"
    if config.hint_mode in ("inline", None):
        answer += (
            f", then a hint for the agent between <hint> and </hint>: {config.hint.describe()}, "
            "a strategy that helps, never the answer itself."
        )
    else:
        answer += "."
    parts.append(answer)
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def hint_chat(source: str, skill: str = "", rules: HintRules = HintRules()) -> list[dict]:
    """The second call of the two-call mode: read the environment and write the privileged hint."""
    system = "You write short hints that help an AI agent solve a task without giving the answer away."
    user = (
        "Here is an environment the agent will play"
        + (f" (skill: {skill})" if skill else "")
        + ":\n```python\n"
        + source.rstrip()
        + f"\n```\nWrite a hint for the agent between <hint> and </hint>: {rules.describe()}, "
        "a strategy or insight that makes winning easier. Never state the answer, the secret or the "
        "exact winning actions."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# --- the "question" form: a design is a QuestionTask subclass (spade_rl.envs.kits) ---------------------
QUESTION_PREFIX = "```python\nclass "  # the designer's answer starts here; the rest is its own
QUESTION_STOP = "```"  # the end of the code block ends the answer

_QUESTION_SYSTEM = """\
You write small Python classes that are training tasks for an AI agent. A task is a subclass of
QuestionTask whose name ends in Env, with:
- make(self, rng): draw the numbers, names or choices of one instance with rng (a random.Random),
  and return (question, answer); the answer is a number or a short word, computed from what you drew.
- hint: a class attribute, one sentence that helps to solve the task without giving the answer.
No imports are needed."""


def question_system(attempts: int = 1, feedback: str = "wrong") -> str:
    """The system prompt of the "question" form; with ``attempts`` > 1 (``design.question_attempts``) it
    says how many answers the agent gets and what it is told after a wrong one (``feedback``)."""
    if attempts == 1:
        return _QUESTION_SYSTEM
    told = "that it is wrong" + (
        ", and for a number whether it is too high or too low" if feedback == "direction" else ""
    )
    return (
        _QUESTION_SYSTEM
        + f"\nThe agent gets {attempts} attempts at each question: after a wrong answer it is told {told}, "
        "and answers again. A question with few possible answers is won by trying them in turn: give it "
        "many."
    )


def question_designer_chat(
    document: str,
    skill: str,
    example: str,
    config: PromptConfig = PromptConfig(),
    title: str = "",
    win_rate: float | None = None,
    frontier: tuple[float, float] = FRONTIER,
    attempts: int = 1,
    feedback: str = "wrong",
) -> list[dict]:
    """The chat that asks for one design in the "question" form, shown one ``example`` design (the
    code of a QuestionTask subclass) with its measured no-hint ``win_rate`` and label against
    ``frontier`` (None: a design not played, shown without a label); an empty ``document`` leaves the
    grounding out. ``attempts`` > 1: the system prompt says how many answers the agent gets
    (:func:`question_system`)."""
    parts = []
    if document.strip():
        parts.append(
            "Document"
            + (f" ({title})" if title else "")
            + ":\n<document>\n"
            + _truncate_words(document, config.max_document_words)
            + "\n</document>"
        )
    if win_rate is None:
        parts.append(f"An example task:\n```python\n{example.strip()}\n```")
    else:
        parts.append(f"An example task ({measured(win_rate, frontier)}):\n```python\n{example.strip()}\n```")
    about = " about the document" if document.strip() else ""
    aim = "" if win_rate is None else f" Aim for the frontier: a task won {_band_words(frontier)}."
    parts.append(
        f"Write one new task{about} that trains the skill {skill}, in the same form as the example. "
        "Draw every number with rng, so that each seed gives a new instance." + aim
    )
    system = question_system(attempts, feedback)
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


# --- edits: a design the agent wins sometimes, made harder or easier (design.edit_share) ---------------
EDIT_FORMS = ("module", "question")


def edit_direction(win_rate: float, frontier: tuple[float, float] = FRONTIER) -> str:
    """ "harder" when the agent wins the parent at least as often as the middle of the frontier, else
    "easier": an edit moves the design toward the middle of the frontier."""
    low, high = frontier
    return "harder" if win_rate >= (low + high) / 2 else "easier"


def edit_chat(
    parent: ShownExample,
    form: str = "module",
    config: PromptConfig = PromptConfig(),
    attempts: int = 1,
    feedback: str = "wrong",
) -> list[dict]:
    """The chat that asks for an edited version of ``parent``, a design the agent wins sometimes (its
    measured no-hint win rate is shown with its label): a little harder when the agent wins it at least
    as often as the middle of the frontier, a little easier otherwise (:func:`edit_direction`), in
    ``form`` "module" (a whole environment, with a hint in the inline mode) or "question" (a
    ``QuestionTask`` subclass: ``parent.source`` is then the design's class, not the kit). No document:
    the parent is the grounding. ``attempts`` and ``feedback``: the question form's, as in
    :func:`question_designer_chat`."""
    if form not in EDIT_FORMS:
        raise ValueError(f"edits are asked in the forms {list(EDIT_FORMS)}, got {form!r}")
    if parent.win_rate is None:
        raise ValueError("an edit needs the parent's measured win rate")
    direction = edit_direction(parent.win_rate, parent.frontier)
    why = "it wins it often" if direction == "harder" else "it wins it rarely"
    change = (
        "bigger numbers, more steps or more choices"
        if direction == "harder"
        else "smaller numbers, fewer steps or fewer choices"
    )
    shown = (
        f"A task that trains the skill {parent.skill} ({measured(parent.win_rate, parent.frontier)}"
        + (
            f"; {100 * parent.win_rate_hint:.0f}% with the hint"
            if parent.win_rate_hint is not None and form == "module"
            else ""
        )
        + f"):\n```python\n{_cut_source(parent.source, config.max_example_chars).rstrip()}\n```"
    )
    if form == "module" and parent.hint:
        shown += f"\nHint: {parent.hint}"
    request = (
        f"Write an edited version of this task that is a little {direction}: {why}. Keep what works and "
        f"change the difficulty ({change}), so that the agent wins it {_band_words(parent.frontier)}. "
        "Draw every number with rng, so that each seed gives a new instance."
    )
    if form == "question":
        request += " Give the class a new name ending in Env."
        return [
            {"role": "system", "content": question_system(attempts, feedback)},
            {"role": "user", "content": shown + "\n\n" + request},
        ]
    setting_rules = _TOOL_USE if config.setting == "tool_use" else _GAMES
    system = (
        "You design executable training environments for an AI agent. "
        "You write correct, self-contained Python.\n\n" + _CONTRACT + "\n\n" + setting_rules
    )
    answer = "Answer with the complete module in one ```python code block"
    if config.hint_mode in ("inline", None):
        answer += (
            f", then a hint for the agent between <hint> and </hint>: {config.hint.describe()}, "
            "a strategy that helps, never the answer itself."
        )
    else:
        answer += "."
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n\n".join([shown, request, answer])},
    ]


# --- the "tool_kit" form: a design is a ToolUseTask subclass (spade_rl.envs.kits, kit "tool_use") -------
# In the spirit of the reference's designer prompt for tool use (spade/core/prompts/tool_use_template.py,
# generate_tool_use_prompt_multiturn): the kit does the parsing and dispatch, the design writes the tools,
# the data and the task; one domain and one task type are drawn per design.
TOOL_KIT_PREFIX = QUESTION_PREFIX  # the answer opens the class; the rest is the designer's own
TOOL_KIT_STOP = QUESTION_STOP

# What each tool-use skill is about (the reference's _TOOL_USE_DOMAINS, one per skill of this setting).
TOOL_DOMAINS = {
    "retail": "a shop's orders: items, stock, orders, refunds and shipping",
    "travel": "travel booking: flights and hotels to search, reserve, pay for or cancel",
    "calendar": "a calendar assistant: events, invitations and reminders",
    "banking": "personal banking: accounts, balances, transfers, cards and invoices",
    "files": "a file system: folders and files to list, create, move, copy or delete",
    "data lookup": "a records database: customers, tickets or products to search, filter and sum up",
}
# The reference's task variants (_TASK_TYPE_BLOCKS) and how often each is drawn (_TASK_TYPE_ROTATION:
# 3 execute, 2 read_then_write, 1 missing_value, 1 irrelevant in 7).
TOOL_TASK_TYPES = {
    "execute": "The user's instructions say plainly what to do; the agent calls the right tools in order.",
    "read_then_write": (
        "At least one instruction makes the agent read first and then act on what it read "
        "(for example: cancel every order above 100 dollars); its check looks at the resulting state."
    ),
    "missing_value": (
        "At least one instruction leaves out a value the agent needs (for example: pay my latest invoice, "
        "with no invoice id): the agent must find it with a tool first; a tool given a wrong value fails."
    ),
    "irrelevant": (
        "Exactly one instruction asks for something no tool can do (for example the weather); add a tool "
        "decline_request(reason) that records the refusal, and that instruction is done only by it."
    ),
}
TOOL_TASK_WEIGHTS = {"execute": 3, "read_then_write": 2, "missing_value": 1, "irrelevant": 1}

_TOOL_KIT_SYSTEM = """\
You write Python classes that are tool-use training tasks for an AI agent. A task is a subclass of
ToolUseTask whose name ends in Env, with:
- tools: a dict {name: (description, {parameter: type})}; a type is "string", "integer", "number",
  "boolean", "array" or "object", or a dict such as {"enum": ["a", "b"]}.
- one method tool_<name>(self, <parameters>) per tool, with exactly the declared parameter names,
  returning a string, number, list or dict. Tools only read and change the task's own data; they use
  no randomness.
- make(self, rng): build the data with rng (a random.Random) and return either (question, answer), the
  answer found from tool results, or a list of (instruction, check) steps given to the agent one at a
  time, where check is a function without arguments that is true once the step is done (false, and
  never raising, at the start).
- plan(self): the tool calls that solve the task: a list of (tool name, {arguments}); a list of calls
  inside it is one turn with several calls.
- hint: a class attribute, one sentence that helps without giving the answer.
The kit shows the tools, parses the agent's calls, runs your methods and checks the answer. No imports
are needed. Winning must need at least two tool calls; add one tool the task does not need."""


def tool_kit_designer_chat(
    document: str,
    skill: str,
    example: str,
    task_type: str = "execute",
    config: PromptConfig = PromptConfig(),
    title: str = "",
) -> list[dict]:
    """The chat that asks for one design in the "tool_kit" form (a ``ToolUseTask`` subclass), shown one
    ``example`` design, for the domain of ``skill`` and a task type of ``TOOL_TASK_TYPES``; an empty
    ``document`` leaves the grounding out."""
    if task_type not in TOOL_TASK_TYPES:
        raise ValueError(f"tool task type {task_type!r}; allowed: {list(TOOL_TASK_TYPES)}")
    parts = []
    if document.strip():
        parts.append(
            "Document (you may borrow its names and numbers; the agent never sees it)"
            + (f" ({title})" if title else "")
            + ":\n<document>\n"
            + _truncate_words(document, config.max_document_words)
            + "\n</document>"
        )
    parts.append(f"An example task:\n```python\n{example.strip()}\n```")
    domain = TOOL_DOMAINS.get(skill, skill)
    parts.append(
        f"Write one new task in the domain of {domain}, in the same form as the example. "
        f"Task type: {TOOL_TASK_TYPES[task_type]} Draw the data with rng, so that each seed gives a new "
        "instance."
    )
    return [{"role": "system", "content": _TOOL_KIT_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


# --- the repair loop: an invalid design sent back with what failed (design.validation.repair_rounds) -----
def repair_chat(chat: list[dict], answer: str, message: str, form: str = "module") -> list[dict]:
    """``chat`` and the designer's ``answer``, followed by the failure ``message`` and the request for a
    corrected design in the same form (the reference's _repair_prompt, spade/core/orchestrator.py)."""
    what = "the complete corrected module" if form == "module" else "the complete corrected class"
    request = (
        f"Your design failed validation: {' '.join(message.split())[:600]}\n\n"
        f"Fix it, keep the same idea, and answer with {what} in one ```python code block."
    )
    return [*chat, {"role": "assistant", "content": answer}, {"role": "user", "content": request}]


def __getattr__(name: str):
    if name == "MemoryExample":  # its name before the glossary: the archive's MemoryExample is the other
        import warnings

        warnings.warn(
            "spade_rl.designer.prompts.MemoryExample is deprecated: it is called ShownExample now "
            "(spade_rl.archive.MemoryExample is the archive's own)",
            FutureWarning,
            stacklevel=2,
        )
        return ShownExample
    raise AttributeError(f"module 'spade_rl.designer.prompts' has no attribute {name!r}")
