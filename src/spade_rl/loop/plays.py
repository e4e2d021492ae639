"""The episodes of one group of an environment's play: K without the hint and ``loop.hint_plays`` with it.

    specs = group_specs(record, {False: 8, True: 8}, config.loop, max_turns, rng, PlayTag(env_id, False))

One implementation for every place that plays an archived environment as the loop does: the loop's play
phase (``SelfPlay._play``) and the verifiers environment's agent seats (``spade_rl.interop.verifiers``).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from spade_rl.design.validate import play_kwargs
from spade_rl.loop.stages import PlayTag
from spade_rl.rollout import EpisodeSpec

if TYPE_CHECKING:
    from spade_rl.archive import EnvRecord
    from spade_rl.loop.sections import LoopConfig


def group_specs(
    record: EnvRecord,
    plays: dict[bool, int],
    loop: LoopConfig,
    max_turns: int,
    rng: random.Random,
    slot: PlayTag,
) -> list[EpisodeSpec]:
    """``plays[False]`` episodes of ``record`` without the hint, then ``plays[True]`` with it (none where
    it has no hint, or with ``loop.hint_plays_for = "designs"`` where it is not designed). A designed
    environment's plays share one seed as ``loop.design_group_seeds`` says, any other's as
    ``loop.group_seeds``; each spec's tag is ``slot`` with its ``use_hint``."""
    designed = record.origin == "designer"
    shared = rng.randrange(2**31) if loop.seeds_shared(designed) else None
    hinted = bool(record.hint.strip()) and (loop.hint_plays_for == "all" or designed)
    kwargs = play_kwargs(record.source, record.env_kwargs, max_turns)
    specs = []
    for use_hint in (False, True):
        for _ in range(plays[use_hint] if hinted or not use_hint else 0):
            specs.append(
                EpisodeSpec(
                    record.source,
                    seed=shared if shared is not None else rng.randrange(2**31),
                    hint=record.hint,
                    use_hint=use_hint,
                    setting=record.setting,
                    env_kwargs=kwargs,
                    tag=slot._replace(use_hint=use_hint),
                )
            )
    return specs
