"""The LLM validator: a model reads a design that passed the validation battery and says whether it can
be won, as the SPADE reference's environment validator does (spade/core/env_validator.py).

    chat = validator_chat(source, "tool_use")            # ask the policy with this chat, then
    verdict = parse_verdict(generation.text)             # Verdict(accepted=False, reason="...")
    accepted = verdict.accepts(settings)                 # no verdict: settings.no_verdict decides

The battery already runs the code (it knows the solution wins and malformed actions do not); the
model looks for what running cannot show: a task whose text does not match what is checked, a value
the agent can never learn, a step that can never be done. The reference asks for ``\\boxed{yes}`` or
``\\boxed{no}`` and accepts when it finds neither (or the call fails): "when in doubt, accept". Off by
default (``design.validation.llm_validator.enabled``); the design phase batches the calls through the
designer's policy (the reference's ``env_validator_model = "self"``), and they never train. The
prompts are ours, written after the reference's two: a lenient playability check for games and a
solvability audit for tool use. Pure functions of strings; nothing here runs a design.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_VERDICT = ("accept", "reject")

_SYSTEM = {
    "games": (
        "You review generated Python game environments for an AI agent. Reject only a game with a clear, "
        "fatal bug; when in doubt, accept."
    ),
    "tool_use": (
        "You audit generated Python tool-use environments for an AI agent. Reject a task that cannot be "
        "solved by any sequence of tool calls; keep a task that is only hard. Difficulty is good; "
        "impossibility is fatal."
    ),
}
_QUESTIONS = {
    "games": """\
Can an agent that understands this game win it?

1. Solvable: the task's text tells the agent enough to find the right action (reject when the answer \
depends on something the agent never sees, or the text does not match what is checked).
2. Winnable: the right action ends the game with the full reward (reject when, say, a comparison of the \
wrong types can never succeed).

Do not reject for style, wording or harmless edge cases.""",
    "tool_use": """\
Is there a sequence of tool calls that solves this task?

1. For every value the answer or a step's check needs, find the tool that returns or sets it. Reject when \
no tool ever sets a state the check requires, or when the check reads the state with the wrong type \
(a string looked up in a list of dicts is never found).
2. Every exact value the task needs (an id, an amount, a date) is stated in the task or returned by some \
tool. A value drawn at random is fine when a tool shows it to the agent.
3. Reject when most steps are already done before the agent acts.

Do not reject for difficulty, long sequences, unneeded tools or wording.""",
}


# What the reader of a kit design is told about the kit (ours, never shown): the design is only its subclass.
KIT_NOTES = {
    "question": (
        "The class subclasses QuestionTask: make(rng) returns (question, answer); the agent wins by writing "
        "the answer in \\boxed{}."
    ),
    "tool_use": (
        "The class subclasses ToolUseTask: the agent calls the tools (the kit checks the arguments against "
        "the declared types and calls tool_<name>), and make(rng) returns (question, answer), won by "
        "<answer>answer</answer>, or a list of (instruction, check) steps shown one at a time, each done "
        "when its check() is true after a tool call, won by <answer>done</answer> once all are done; plan() "
        "is the reference solution."
    ),
}


@dataclass(frozen=True)
class LLMValidatorSettings:
    """``design.validation.llm_validator``: whether the policy judges each design that passed the
    battery, at what temperature and length, and what an answer without a verdict counts as."""

    enabled: bool = False  # the reference's --spade-use-env-validator (on in cmd/tool_use)
    temperature: float = 0.3  # --spade-env-validator-temperature 0.3
    max_new_tokens: int = 1024  # the reference allows 16384 (--spade-env-validator-max-tokens)
    no_verdict: str = "accept"  # the reference accepts an answer without \boxed{yes} or \boxed{no}
    max_source_chars: int = 12000  # a longer design is cut (the chat must fit the context)

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"llm_validator enabled must be true or false, got {self.enabled!r}")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, int | float):
            raise ValueError(f"llm_validator temperature must be a number, got {self.temperature!r}")
        if not 0.0 <= self.temperature <= 5.0:
            raise ValueError(f"llm_validator temperature must lie in [0, 5], got {self.temperature!r}")
        for name in ("max_new_tokens", "max_source_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"llm_validator {name} must be a whole number of at least 1, got {value!r}")
        if self.no_verdict not in NO_VERDICT:
            raise ValueError(f"llm_validator no_verdict {self.no_verdict!r}; allowed: {list(NO_VERDICT)}")


@dataclass(frozen=True)
class Verdict:
    """What the validator answered: ``accepted`` (None: no verdict found) and its reasoning, cut short."""

    accepted: bool | None
    reason: str

    def accepts(self, settings: LLMValidatorSettings) -> bool:
        if self.accepted is None:
            return settings.no_verdict == "accept"
        return self.accepted


def validator_chat(
    source: str, setting: str = "games", settings: LLMValidatorSettings | None = None, kit: str | None = None
) -> list[dict]:
    """The chat that asks for a verdict on ``source`` (a design's code: for a kit design, the part the
    designer wrote, with ``kit`` naming the kit, which is ours and described in a sentence).
    ``setting``: "games" or "tool_use"."""
    if setting not in _QUESTIONS:
        raise ValueError(f"llm validator setting {setting!r}; allowed: {list(_QUESTIONS)}")
    limit = (settings or LLMValidatorSettings()).max_source_chars
    code = source if len(source) <= limit else source[:limit] + "\n# [...]"
    note = f"{KIT_NOTES[kit]}\n" if kit in KIT_NOTES else ""
    user = (
        f"{_QUESTIONS[setting]}\n\n{note}```python\n{code.rstrip()}\n```\n\n"
        "Think it through, then end with \\boxed{yes} to accept or \\boxed{no} to reject."
    )
    return [{"role": "system", "content": _SYSTEM[setting]}, {"role": "user", "content": user}]


def parse_verdict(text: str) -> Verdict:
    """The last ``\\boxed{...}`` of the answer: yes / y / true accepts, no / n / false rejects, anything
    else (or none) is no verdict. Linear in the text's length; never raises."""
    if not isinstance(text, str):
        return Verdict(None, "")
    reason = " ".join(text.split())[-300:]
    start = text.rfind("\\boxed{")
    if start < 0:
        return Verdict(None, reason)
    end = text.find("}", start + 7)
    word = text[start + 7 : end if end >= 0 else len(text)].strip().strip("\\").lower()
    if word in ("yes", "y", "true", "accept"):
        return Verdict(True, reason)
    if word in ("no", "n", "false", "reject"):
        return Verdict(False, reason)
    return Verdict(None, reason)
