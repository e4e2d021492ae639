"""The reference's validation extras that need the designer's policy (``design.validation``; the reset
gate runs in the battery, ``spade_rl.design.validate``): the LLM validator, which asks the policy for a
verdict on each design the battery passed, and the repair loop, which sends an invalid design back with
what failed. Both are inference only: nothing they generate is a training sample.

    answers = llm_validate(policy, config, parsed, reports, thinking, rng)        # inside one attempt
    repaired = repair_designs(_attempt, policy, archive, executor, config, rng, 1, plans, designs, None)
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from spade_rl.design.llm_validator import parse_verdict, validator_chat
from spade_rl.designer.prompts import repair_chat
from spade_rl.envs import kits
from spade_rl.loop.stages import Design
from spade_rl.policy import Policy, SamplingSettings
from spade_rl.policy.thinking import opens_thinking, strip_thinking

if TYPE_CHECKING:
    from spade_rl.archive import Archive
    from spade_rl.design.parse import Parsed
    from spade_rl.design.validate import ValidationReport
    from spade_rl.designer.phase import DesignPhaseConfig
    from spade_rl.executor import Executor
    from spade_rl.sandbox import Sandbox

# designing._attempt: (policy, archive, executor, config, rng, iteration, plans, thinking, attempt, repair)
Attempt = Callable[..., list[Design]]


def repair_designs(
    attempt: Attempt,
    policy: Policy,
    archive: Archive,
    executor: Executor | Sandbox,
    config: DesignPhaseConfig,
    rng: random.Random,
    iteration: int,
    plans: list[tuple],
    designs: list[Design],
    thinking: bool | None,
) -> dict[int, Design]:
    """The repair loop (``design.validation.repair_rounds``, the reference's env_repair_turns): each
    invalid design of ``designs`` (one per plan) goes back to the designer with its failure's message,
    for up to that many rounds, the conversation growing each round as in the reference. Every try is
    archived; the valid ones come back by plan index, with generations that never train (the reference
    trains only the first answer)."""
    repaired: dict[int, Design] = {}
    open_slots = {i: (plans[i][3], d) for i, d in enumerate(designs) if not d.valid}
    for round_ in range(1, config.validation.repair_rounds + 1):
        if not open_slots:
            break
        slots = list(open_slots)
        asked = []
        for i in slots:
            chat, failed = open_slots[i]
            message = f"{failed.reason}: {failed.report.message if failed.report else failed.parsed.message}"
            asked.append((*plans[i][:3], repair_chat(chat, failed.generation.text, message, config.form)))
        origins = [open_slots[i][1].env_id for i in slots]
        again = attempt(
            policy, archive, executor, config, rng, iteration, asked, thinking, 0, (round_, origins)
        )
        for i, plan, design in zip(slots, asked, again, strict=True):
            if design.valid:
                untrained = dataclasses.replace(
                    design.generation, completion_token_ids=None, completion_logprobs=None
                )
                proposal = dataclasses.replace(design.proposal, generation=untrained)
                repaired[i] = dataclasses.replace(design, proposal=proposal)
                del open_slots[i]
            else:
                open_slots[i] = (plan[3], design)
    return repaired


def llm_validate(
    policy: Policy,
    config: DesignPhaseConfig,
    parsed: list[Parsed],
    reports: list[ValidationReport | None],
    thinking: bool | None,
    rng: random.Random,
) -> dict[int, str]:
    """The LLM validator on every design the battery passed: one batched generation of the policy (never
    a training sample); a design it rejects becomes ``judge_rejected``. Returns each judged design's
    answer, cut short, by index (for the archive)."""
    settings = config.validation.llm_validator
    wanted = [i for i, report in enumerate(reports) if report is not None and report.valid]
    if not wanted:
        return {}
    kit = {"question": "question", "tool_kit": "tool_use"}.get(config.form)
    chats = []
    for i in wanted:
        part = kits.design_part(parsed[i].source, kit) if kit else None
        chats.append(
            validator_chat(part or parsed[i].source, config.setting, settings, kit if part else None)
        )
    sampling = SamplingSettings(
        max_new_tokens=settings.max_new_tokens,
        temperature=settings.temperature,
        top_p=config.top_p,
        seed=rng.randrange(2**31),
    )
    generations = policy.generate(chats, sampling, thinking=thinking)
    opened = opens_thinking(policy, thinking)
    answers = {}
    for i, generation in zip(wanted, generations, strict=True):
        verdict = parse_verdict(strip_thinking(generation.text, opened=opened))
        report, answers[i] = reports[i], verdict.reason
        if report is None:  # not reached: only validated designs are judged
            continue
        if verdict.accepts(settings):
            report.checks.append("llm_validator")
            continue
        said = (
            verdict.reason
            if verdict.accepted is False
            else "no verdict (llm_validator.no_verdict = 'reject')"
        )
        report.valid, report.reason = False, "judge_rejected"
        report.message = f"the LLM validator rejected it: {said}"
    return answers
