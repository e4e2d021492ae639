"""The design phase's configuration: how many designs, in which form and setting, with which prompts,
hints, retries and validation (``RunConfig.design_phase`` resolves it from a run's configuration; the
phase itself is :mod:`spade_rl.designer.phase`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from spade_rl.design.validate import ValidationSettings
from spade_rl.designer.prompts import (
    EDIT_FORMS,
    GAME_SKILLS,
    HINT_MODES,
    SETTINGS,
    TOOL_USE_SKILLS,
    PromptConfig,
)
from spade_rl.envs import kits
from spade_rl.policy.thinking import check_thinking_mode

FORMS = ("module", "question", "tool_kit")
KIT_OF_FORM = {"question": "question", "tool_kit": "tool_use"}  # the kit each kit form's designs subclass
INVALID_DESIGNS = ("penalty", "retry")
QUESTION_FEEDBACK = ("wrong", "direction")  # said after a wrong answer (design.question_feedback)


@dataclass(frozen=True)
class DesignPhaseConfig:
    """One design phase. ``n``: environments proposed per phase; in a run it is
    ``loop.designs_per_iteration`` (leave it unset; a different value is refused), standalone it must be
    given. ``prompt.setting`` and ``prompt.hint_mode`` are this phase's ``setting`` and ``hint_mode``
    (unset, they are copied; set to anything else, refused); ``prompt.hint`` holds the hint limits that
    the prompt states and the parser enforces."""

    n: int | None = None
    setting: str = "games"
    skills: tuple[str, ...] = ()  # empty: the defaults of the setting
    # Skill rotation: each design phase (regeneration window) draws this many of the skills and proposes
    # only for them (the reference: 3 of 6, --spade-skills-per-regen 3). None: every skill, every time.
    skills_per_phase: int | None = None
    hint_mode: str = "inline"  # inline: code and hint in one answer; separate: a second call
    max_new_tokens: int = 1024
    hint_max_new_tokens: int = 160
    # The separate hint call's temperature (None: ``temperature``). Hint generations are never training
    # samples, so it may differ; the reference writes hints at 0.3 (--spade-hint-temperature 0.3).
    hint_temperature: float | None = None
    # What becomes of an invalid design: "penalty" (ours: rewarded by rewards.invalid_penalty and the
    # progress bonus) or "retry" (the reference's: the slot is asked again, up to ``retries`` times, or
    # ``retries_grounded`` with a document, and a design that still fails gets no gradient).
    invalid: str = "penalty"
    retries: int = 8
    retries_grounded: int = 3
    temperature: float = 0.6
    top_p: float = 1.0
    prompt: PromptConfig = field(default_factory=PromptConfig)
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    memory: bool = True  # false: no archive examples in the designer prompt (ablation "no memory")
    grounding: bool = True  # false: no corpus document in the designer prompt (ablation "no grounding")
    # "module" (the paper's): the design is a whole environment module. "question": a QuestionTask
    # subclass of the kit (spade_rl.envs.kits) writing make(rng) and a hint, about 8 lines: the answer
    # is forced to open with "```python\nclass " and stops at the end of its code block. "tool_kit"
    # (setting "tool_use"): a ToolUseTask subclass of the kit "tool_use" (the reference's ToolUseBaseEnv),
    # forced and stopped the same way unless thinking = "on".
    form: str = "module"
    # The designer's thinking mode (spade_rl.policy.thinking): "template" (the chat template's default),
    # "on" or "off" (enable_thinking passed to a template that has the switch; refused otherwise).
    thinking: str = "template"
    # Ours (issue 40): the share of proposals asked to edit one of the archive's frontier entries (made
    # harder if the agent wins it often, easier if rarely) instead of designing from a document. 0: never
    # (the paper's). Forms "module" and "question"; needs the memory.
    edit_share: float = 0.0
    # Ours (issue 40): the answers the agent may give to one question of a design in the form "question"
    # (the kit's ``attempts``): 1, the paper's one-shot question; N > 1, a wrong answer is followed by
    # another try until the answer is right (reward 1) or N answers were wrong (reward 0). The designer's
    # prompt says how many; validation (its trivial-policy search too) and every play use the same number
    # (the kit's constructor arguments, recorded with the design). ``question_feedback`` after a wrong
    # answer: "wrong" ("Wrong answer. Try again"), or "direction" (a wrong number is also called too high
    # or too low when the answer is a number; needs question_attempts > 1).
    question_attempts: int = 1
    question_feedback: str = "wrong"

    def __post_init__(self) -> None:
        if self.n is not None and (isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1):
            raise ValueError(f"design n must be a whole number of at least 1, got {self.n!r}")
        if self.form not in FORMS:
            raise ValueError(f"design form {self.form!r}; allowed: {list(FORMS)}")
        check_thinking_mode("design.thinking", self.thinking)
        if (
            isinstance(self.edit_share, bool)
            or not isinstance(self.edit_share, int | float)
            or not 0.0 <= self.edit_share <= 1.0
        ):
            raise ValueError(
                f"design edit_share must be a number in [0, 1] (the share of proposals that edit a "
                f"frontier entry; 0: none), got {self.edit_share!r}"
            )
        if self.edit_share > 0 and self.form not in EDIT_FORMS:
            raise ValueError(
                f"design edit_share asks for edits in the forms {list(EDIT_FORMS)}; form is {self.form!r} "
                "(set design.edit_share = 0)"
            )
        if self.edit_share > 0 and not self.memory:
            raise ValueError(
                "design edit_share edits the archive's frontier entries, which design.memory = false hides "
                "from the designer: set design.edit_share = 0 or design.memory = true"
            )
        attempts = self.question_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 16:
            raise ValueError(
                f"design question_attempts must be a whole number from 1 (one answer per question) to 16, "
                f"got {attempts!r}"
            )
        if self.question_feedback not in QUESTION_FEEDBACK:
            raise ValueError(
                f"design question_feedback {self.question_feedback!r}; allowed: {list(QUESTION_FEEDBACK)}"
            )
        if attempts > 1 and self.form != "question":
            raise ValueError(
                f"design question_attempts = {attempts} gives the questions of form 'question' several "
                f"answers; form is {self.form!r} (set design.question_attempts = 1)"
            )
        if self.question_feedback != "wrong" and attempts == 1:
            raise ValueError(
                f"design question_feedback = {self.question_feedback!r} is said after a wrong answer that "
                "another try follows, and question_attempts = 1 gives none: set question_attempts > 1 or "
                "question_feedback = 'wrong'"
            )
        if self.invalid not in INVALID_DESIGNS:
            raise ValueError(f"design invalid {self.invalid!r}; allowed: {list(INVALID_DESIGNS)}")
        for name in ("retries", "retries_grounded"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"design {name} must be a whole number >= 0, got {value!r}")
        if self.skills_per_phase is not None and (
            isinstance(self.skills_per_phase, bool)
            or not isinstance(self.skills_per_phase, int)
            or not 1 <= self.skills_per_phase <= len(self.skill_list)
        ):
            raise ValueError(
                f"design skills_per_phase must be None (every skill) or 1 to {len(self.skill_list)} (the "
                f"skills of this setting), got {self.skills_per_phase!r}"
            )
        if self.hint_temperature is not None and not (
            isinstance(self.hint_temperature, int | float)
            and not isinstance(self.hint_temperature, bool)
            and 0.0 <= self.hint_temperature <= 5.0
        ):
            raise ValueError(
                f"design hint_temperature must be None (design.temperature) or a number in [0, 5], "
                f"got {self.hint_temperature!r}"
            )
        if self.form == "tool_kit" and self.setting != "tool_use":
            raise ValueError(
                f"design form 'tool_kit' writes tool-use environments; setting is {self.setting!r} "
                "(set design.setting = 'tool_use')"
            )
        if self.form == "question" and self.thinking == "on":
            raise ValueError(
                "design.thinking = 'on' lets the designer think first, but form 'question' forces its answer "
                "to open with the code: use form = 'module', or thinking = 'off' or 'template'"
            )
        if self.setting not in SETTINGS:
            raise ValueError(f"design setting {self.setting!r} is not one of {list(SETTINGS)}")
        if self.hint_mode not in HINT_MODES:
            raise ValueError(f"design hint_mode {self.hint_mode!r} is not one of {list(HINT_MODES)}")
        if self.form == "question" and self.setting != "games":
            raise ValueError(
                f"design form 'question' writes single-question games; setting is {self.setting!r} "
                "(use form = 'module' for tool use)"
            )
        if self.form == "question" and any(skill not in kits.EXAMPLES for skill in self.skill_list):
            raise ValueError(
                f"design form 'question' has example designs for the skills {sorted(kits.EXAMPLES)}; "
                f"got {list(self.skill_list)}"
            )
        for name in ("setting", "hint_mode"):
            given = getattr(self.prompt, name)
            if given is not None and given != getattr(self, name):
                raise ValueError(
                    f"design prompt.{name} is design.{name} ({getattr(self, name)!r}); it cannot be set to "
                    f"{given!r} apart from it: set design.{name} (and leave prompt.{name} out)"
                )

    @property
    def chat_prompt(self) -> PromptConfig:
        """The prompt settings with this phase's setting and hint mode (decided here, in one place)."""
        return dataclasses.replace(self.prompt, setting=self.setting, hint_mode=self.hint_mode)

    @property
    def question_kwargs(self) -> dict:
        """The question kit's constructor arguments for ``question_attempts`` and ``question_feedback``,
        which validation records with each design and every play uses: none at one attempt (the kit's
        defaults: a design records the constructor arguments it recorded before the option existed)."""
        if self.question_attempts == 1:
            return {}
        return {"attempts": self.question_attempts, "feedback": self.question_feedback}

    @property
    def question_validation(self) -> ValidationSettings:
        """``validation`` with :attr:`question_kwargs` among its constructor arguments: how the designs
        of this phase are validated, and so played."""
        if not self.question_kwargs:
            return self.validation
        kwargs = {**self.validation.env_kwargs, **self.question_kwargs}
        return dataclasses.replace(self.validation, env_kwargs=kwargs)

    @property
    def skill_list(self) -> tuple[str, ...]:
        if self.skills:
            return self.skills
        return TOOL_USE_SKILLS if self.setting == "tool_use" else GAME_SKILLS
