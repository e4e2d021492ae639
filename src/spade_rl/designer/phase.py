"""The design phase of one iteration (SPADE steps 1-3 and 7): ground, design, validate, remember.

    outcomes = design_environments(policy, corpus, archive, executor, DesignPhaseConfig(n=8), rng, 1)

For each of ``n`` proposals: sample a corpus document, a skill and memory examples from the archive
(``memory = false`` shows no examples, ``grounding = false`` no document: the paper's ablations);
ask the policy (one batched generation for all proposals) for an environment and, in the two-call
mode, a hint (a second batched generation that reads the code); parse; run the validation battery
in the sandbox, on all proposals at once through the executor (local or Ray; a ``Sandbox`` is
accepted too); and record every proposal, valid or not, in the archive with its reason and lineage.
Each ``Design`` (``loop/stages.py``) keeps the prompt and the generation, which become designer
training samples. ``design.thinking`` sets the chat template's thinking switch for the designer
(``spade_rl.policy.thinking``); the parser reads the designer's text without its thinking, and the
generation (token ids and text) keeps all of it.

The reference's validation extras, each off by default (``design.validation``): the reset gate runs in
the battery; the LLM validator (``llm_validator.enabled``) asks the designer's policy for a verdict on
each design the battery passed (``judge_rejected`` when it says no; never a training sample); the
repair loop (``repair_rounds``) sends an invalid design back with its failure's message, up to that many
rounds, inference-only as in the reference: the first design keeps its verdict and its reward, a
repaired one is archived (``metadata.repair_of``) and played, and its generation (token ids dropped)
never trains (both in ``designer/extras.py``). Form ``tool_kit`` writes a ``ToolUseTask`` subclass
(kit "tool_use").

Every example the designer is shown carries the agent's measured no-hint win rate and its label against
the archive's frontier (too hard, at the frontier, too easy: ``designer.prompts.difficulty``). Edits
(``design.edit_share``, issue 40): that share of the proposals, drawn per proposal, is asked instead for an
edited version of one of the archive's frontier entries (a valid, unflagged environment whose latest
no-hint win rate lies inside the frontier), harder when the agent wins it at least as often as the
frontier's middle, easier otherwise; its only parent is that entry. As the agent improves, other
environments enter the frontier, and the edits follow them. A proposal drawn for an edit when there is
no frontier entry gets the usual prompt; the archive records which prompt each proposal had
(``metadata.prompt``: "edit", with ``edit_of`` and ``edit_win_rate``, or "edit_fallback").

Several attempts (``design.question_attempts`` > 1, issue 40): the question form's prompts say how many
answers the agent gets, and its designs are validated with the kit's constructor arguments ``attempts``
and ``feedback`` (``DesignPhaseConfig.question_validation``), which the archive records and every play
uses.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random

from spade_rl.archive import Archive, EnvRecord, MemorySample, PlayStats
from spade_rl.corpus import Corpus
from spade_rl.design.parse import Parsed, parse_design, parse_hint, parse_kit_design, parse_question_design
from spade_rl.design.validate import ValidationReport
from spade_rl.designer.extras import llm_validate, repair_designs
from spade_rl.designer.phase_config import (  # noqa: F401 - the names this module always had
    FORMS,
    INVALID_DESIGNS,
    KIT_OF_FORM,
    QUESTION_FEEDBACK,
    DesignPhaseConfig,
)
from spade_rl.designer.prompts import (
    QUESTION_PREFIX,
    QUESTION_STOP,
    TOOL_KIT_PREFIX,
    TOOL_KIT_STOP,
    TOOL_TASK_WEIGHTS,
    ShownExample,
    designer_chat,
    difficulty,
    edit_chat,
    hint_chat,
    question_designer_chat,
    tool_kit_designer_chat,
)
from spade_rl.envs import kits
from spade_rl.executor import Executor, as_executor
from spade_rl.loop.stages import Design, Proposal
from spade_rl.policy import Generation, Policy, SamplingSettings
from spade_rl.policy.thinking import opens_thinking, strip_thinking, thinking_flag
from spade_rl.sandbox import Sandbox

log = logging.getLogger(__name__)

DesignOutcome = Design  # the name of earlier releases


def _rates(stats: PlayStats | None) -> tuple[float | None, float | None]:
    """The measured no-hint and hint win rates of a latest play (None where there were no such plays)."""
    if stats is None:
        return None, None
    nohint = stats.win_rate_nohint if stats.episodes_nohint > 0 else None
    return nohint, stats.win_rate_hint if stats.episodes_hint > 0 else None


def _shown(record: EnvRecord, stats: PlayStats | None, positive: bool, frontier: tuple[float, float]):
    nohint, hint = _rates(stats)
    return ShownExample(record.source, record.hint, record.skill, nohint, hint, positive, frontier)


def _memory_examples(sample: MemorySample, frontier: tuple[float, float]) -> list[ShownExample]:
    return [_shown(e.record, e.stats, e.role == "positive", frontier) for e in sample.examples]


def _question_example(
    memory: MemorySample | None, skill: str, form: str = "question"
) -> tuple[str, float | None]:
    """The example a design in a kit form is shown and its measured no-hint win rate: the code of a
    design of that kit from the memory (a frontier one first), else the kit's built-in example for the
    skill (not played: None)."""
    if memory is not None:
        ranked = sorted(memory.examples, key=lambda e: e.role != "positive")
        for example in ranked:
            part = kits.design_part(example.record.source, KIT_OF_FORM[form])
            if part:
                return part, _rates(example.stats)[0]
    return (kits.tool_example(skill) if form == "tool_kit" else kits.EXAMPLES[skill]), None


def frontier_entries(archive: Archive, setting: str, form: str) -> list[tuple[int, ShownExample]]:
    """The environments a proposal may edit (``design.edit_share``), with their archive ids: valid,
    unflagged, of ``setting``, whose latest no-hint win rate lies inside the archive's frontier
    (inclusive); in the form "question" only designs of the question kit, shown as their class. In id
    order."""
    frontier = (archive.config.frontier_low, archive.config.frontier_high)
    entries = []
    for env_id, latest in sorted(archive.latest_stats(archive.ids(valid=True, setting=setting)).items()):
        nohint, hint = _rates(latest.stats)
        if nohint is None or difficulty(nohint, frontier) != "at the frontier":
            continue
        record = archive.get(env_id)
        if record.flagged is not None:
            continue
        source = record.source if form == "module" else kits.design_part(record.source, "question")
        if source:
            entries.append(
                (env_id, ShownExample(source, record.hint, record.skill, nohint, hint, True, frontier))
            )
    return entries


def generate_with_prefix(
    policy: Policy,
    chats: list[list[dict]],
    prefix: str,
    settings: SamplingSettings,
    thinking: bool | None = None,
) -> list[Generation]:
    """Generations that start with ``prefix``: the prefix's tokens follow the generation prompt, the
    model continues from them, and each ``text`` is the prefix plus what the model wrote (the prefix
    tokens are prompt tokens: they never train). A backend that cannot continue token prompts
    (the openai backend) gets the chats alone, and its text is what it wrote. ``thinking``: the
    template's switch (``policy.thinking``)."""
    if not policy.supports_token_prompts:
        return policy.generate(chats, settings, thinking=thinking)
    prefix_ids = list(policy.tokenizer(prefix, add_special_tokens=False)["input_ids"])
    prompts = [
        policy.render(chat, add_generation_prompt=True, thinking=thinking) + prefix_ids for chat in chats
    ]
    return [dataclasses.replace(g, text=prefix + g.text) for g in policy.generate_tokens(prompts, settings)]


def design_environments(
    policy: Policy,
    corpus: Corpus,
    archive: Archive,
    executor: Executor | Sandbox,
    config: DesignPhaseConfig,
    rng: random.Random,
    iteration: int,
    *,
    side: Policy | None = None,
) -> list[Design]:
    """Propose ``config.n`` environments, validate them and record them all in the archive.

    ``side``: who writes what never trains: the two-call mode's hints, the LLM validator's verdicts and the
    repairs (default: ``policy``). The loop passes none; the verifiers environment
    (``spade_rl.interop.verifiers``) gives the designs to its trainable designer seat and the rest to a seat
    that does not train, so that only the designs get the designer's reward there, as here."""
    side = side if side is not None else policy
    if config.n is None:
        raise ValueError("DesignPhaseConfig.n is not set: say how many environments to propose")
    thinking = thinking_flag(policy, config.thinking, key="design.thinking")
    skills = config.skill_list
    if config.skills_per_phase is not None:  # skill rotation: this phase's skills
        skills = tuple(rng.sample(list(skills), config.skills_per_phase))
    frontier = (archive.config.frontier_low, archive.config.frontier_high)
    editable = frontier_entries(archive, config.setting, config.form) if config.edit_share > 0 else []
    plans = []
    for index in range(config.n):
        skill = skills[rng.randrange(len(skills))]
        prompt: dict = {}
        if config.edit_share > 0 and rng.random() < config.edit_share:
            if editable:  # edit a frontier entry: its skill, no document, the entry its only parent
                parent_id, parent = editable[rng.randrange(len(editable))]
                chat = edit_chat(
                    parent,
                    config.form,
                    config.chat_prompt,
                    config.question_attempts,
                    config.question_feedback,
                )
                prompt = {"prompt": "edit", "edit_of": parent_id, "edit_win_rate": parent.win_rate}
                plans.append((parent.skill, None, (parent_id,), chat, prompt))
                log.debug("design %d: edit of env %d (win rate %.2f)", index, parent_id, parent.win_rate)
                continue
            prompt = {"prompt": "edit_fallback"}  # no frontier entry: the usual prompt
        document = corpus.sample(rng, 1)[0] if config.grounding else None
        memory = archive.sample_memory(rng, setting=config.setting) if config.memory else None
        text, title = (document.text, document.title or "") if document is not None else ("", "")
        if config.form == "question":
            shown, win_rate = _question_example(memory, skill)
            chat = question_designer_chat(
                text,
                skill,
                shown,
                config.chat_prompt,
                title,
                win_rate=win_rate,
                frontier=frontier,
                attempts=config.question_attempts,
                feedback=config.question_feedback,
            )
        elif config.form == "tool_kit":
            # One task type per design, drawn with the reference's weights (_TASK_TYPE_ROTATION).
            [task_type] = rng.choices(list(TOOL_TASK_WEIGHTS), weights=list(TOOL_TASK_WEIGHTS.values()))
            example, _ = _question_example(memory, skill, "tool_kit")
            chat = tool_kit_designer_chat(text, skill, example, task_type, config.chat_prompt, title)
        else:
            examples = _memory_examples(memory, frontier) if memory is not None else []
            chat = designer_chat(text, skill, examples, config.chat_prompt, title)
        document_id = document.id if document is not None else None
        parents = memory.parent_ids if memory is not None else ()
        plans.append((skill, document_id, parents, chat, prompt))
        log.debug(
            "design %d: skill %s, document %s, memory %s",
            index,
            skill,
            document_id,
            memory.message if memory is not None else "off",
        )
    if config.edit_share > 0:
        kinds = [plan[4].get("prompt") for plan in plans]
        log.info(
            "design phase: %d edits of %d frontier entries, %d drawn for an edit found none",
            kinds.count("edit"),
            len(editable),
            kinds.count("edit_fallback"),
        )
    designs = _attempt(policy, archive, executor, config, rng, iteration, plans, thinking, 0, side=side)
    latest = list(designs)
    repaired = repair_designs(
        _attempt, side, archive, executor, config, rng, iteration, plans, designs, thinking
    )
    for i, design in repaired.items():
        latest[i] = design
    designs += list(repaired.values())
    if config.invalid == "retry":
        # The reference's alternative to a penalty: a slot whose design fails is asked again, up to
        # config.retries times (retries_grounded with a document), and what still fails gets no gradient.
        retries = config.retries_grounded if config.grounding else config.retries
        for attempt in range(1, retries + 1):
            failed = [i for i, d in enumerate(latest) if not d.valid]
            if not failed:
                break
            again = _attempt(
                policy,
                archive,
                executor,
                config,
                rng,
                iteration,
                [plans[i] for i in failed],
                thinking,
                attempt,
                side=side,
            )
            fixed = repair_designs(
                _attempt,
                side,
                archive,
                executor,
                config,
                rng,
                iteration,
                [plans[i] for i in failed],
                again,
                thinking,
            )
            for j, (i, design) in enumerate(zip(failed, again, strict=True)):
                latest[i] = fixed.get(j, design)
            designs += again + list(fixed.values())
    return designs


def _attempt(
    policy: Policy,
    archive: Archive,
    executor: Executor | Sandbox,
    config: DesignPhaseConfig,
    rng: random.Random,
    iteration: int,
    plans: list[tuple],
    thinking: bool | None,
    attempt: int,
    repair: tuple[int, list[int]] | None = None,
    *,
    side: Policy | None = None,
) -> list[Design]:
    """One try at each plan (skill, document, memory, chat): generate, parse, hint, validate, and record
    every proposal in the archive. ``repair``: (round, the archive id each plan repairs), for a repair.
    ``side``: who writes the hints and the LLM validator's verdicts (default: ``policy``)."""
    side = side if side is not None else policy
    # A kit form forces the answer to open with the class and stops at the end of its block; "tool_kit"
    # with thinking on (the reference's Qwen3-8B runs) lets the designer think, then write its block.
    forced = config.form in KIT_OF_FORM and not (config.form == "tool_kit" and config.thinking == "on")
    stop = {"question": (QUESTION_STOP,), "tool_kit": (TOOL_KIT_STOP,)}.get(config.form, ()) if forced else ()
    sampling = SamplingSettings(
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=rng.randrange(2**31),
        stop=stop,
        include_stop_string=True,
    )
    chats = [plan[3] for plan in plans]  # (skill, document id, parents, chat[, prompt metadata])
    need_hint = config.hint_mode == "inline"
    if config.form == "question":
        generations = generate_with_prefix(policy, chats, QUESTION_PREFIX, sampling, thinking)
        parse = parse_question_design
    elif config.form == "tool_kit":
        generations = (
            generate_with_prefix(policy, chats, TOOL_KIT_PREFIX, sampling, thinking)
            if forced
            else policy.generate(chats, sampling, thinking=thinking)
        )
        parse = functools.partial(parse_kit_design, kit=KIT_OF_FORM["tool_kit"])
    else:
        generations = policy.generate(chats, sampling, thinking=thinking)
        parse = parse_design
    rules = config.prompt.hint
    # The parser reads the text without the thinking. A forced opening (form "question") starts the
    # answer itself: a <think> that the generation prompt left open is not taken to run on through it.
    opened = not forced and opens_thinking(policy, thinking)
    parsed = [
        parse(
            strip_thinking(g.text, opened=opened),
            truncated=g.finish_reason == "length",
            need_hint=need_hint,
            rules=rules,
        )
        for g in generations
    ]

    hint_chats: list[list[dict] | None] = [None] * len(plans)
    hint_generations: list[Generation | None] = [None] * len(plans)
    if not need_hint:
        wanted = [i for i, p in enumerate(parsed) if p.ok]
        if wanted:
            chats = [
                hint_chat(kits.design_part(parsed[i].source) or parsed[i].source, plans[i][0], rules)
                for i in wanted
            ]
            hint_settings = SamplingSettings(
                max_new_tokens=config.hint_max_new_tokens,
                temperature=config.temperature
                if config.hint_temperature is None
                else config.hint_temperature,
                top_p=config.top_p,
                seed=rng.randrange(2**31),
            )
            hint_generated = side.generate(chats, hint_settings, thinking=thinking)
            for i, chat, generation in zip(wanted, chats, hint_generated, strict=True):
                text = strip_thinking(generation.text, opened=opened)
                hint = parse_hint(text, truncated=generation.finish_reason == "length", rules=rules)
                hint_chats[i], hint_generations[i] = chat, generation
                parsed[i] = Parsed(hint.reason, parsed[i].source, hint.hint, hint.message)

    checked = [i for i, p in enumerate(parsed) if p.ok]
    reports: list[ValidationReport | None] = [None] * len(parsed)
    requests = [(parsed[i].source, parsed[i].hint) for i in checked]
    for i, report in zip(
        checked, as_executor(executor).validate_many(requests, config.question_validation), strict=True
    ):
        reports[i] = report
    judged: dict[int, str] = {}
    if config.validation.llm_validator.enabled:
        judged = llm_validate(side, config, parsed, reports, thinking, rng)

    outcomes = []
    for i, (plan, generation, result) in enumerate(zip(plans, generations, parsed, strict=True)):
        skill, document_id, parents, chat = plan[:4]
        prompt = plan[4] if len(plan) > 4 else {}  # a repair's plan has none: its metadata says repair_of
        report = reports[i]
        valid = report is not None and report.valid
        reason = report.reason if report is not None else result.reason
        message = report.message if report is not None else result.message
        added = archive.add(
            result.source or generation.text,
            valid=valid,
            reason=reason,
            message=message,
            skill=skill,
            setting=config.setting,
            iteration=iteration,
            hint=result.hint,
            class_name=report.class_name if report else "",
            document_id=document_id,
            parents=parents,
            origin="designer",
            metadata={
                "finish_reason": generation.finish_reason,
                "validation_seconds": report.seconds if report else 0.0,
                # the seed validation drew (ValidationSettings(seed=...) replays its verdict)
                **({"validation_seed": report.seed} if report else {}),
                **({"attempt": attempt} if attempt else {}),
                **({"repair": repair[0], "repair_of": repair[1][i]} if repair else {}),
                **({"llm_validator": judged[i]} if i in judged else {}),
                **prompt,
            },
            env_kwargs=report.env_kwargs if valid else None,
        )
        proposal = Proposal(
            skill, document_id, tuple(parents), chat, generation, result, hint_chats[i], hint_generations[i]
        )
        outcomes.append(Design(proposal, report, added.env_id, added.duplicate))
        log.info(
            "design %d%s%s: %s (%s) env %d",
            i,
            f" (try {attempt + 1})" if attempt else "",
            f" (repair {repair[0]} of env {repair[1][i]})" if repair else "",
            "valid" if valid else "invalid",
            reason,
            added.env_id,
        )
    return outcomes
