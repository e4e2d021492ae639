"""The iteration's stages as data (loop/stages.py) and the metrics line computed once from them."""

from spade_rl.archive import PlayStats
from spade_rl.design.parse import Parsed
from spade_rl.loop.stages import (
    Design,
    PlayedEnv,
    PlayTag,
    Proposal,
    TrainingBatch,
    UpdateResult,
    iteration_metrics,
)
from spade_rl.policy import Generation
from spade_rl.train import Sample


def design(reason: str) -> Design:
    generation = Generation(
        text="x",
        prompt_token_ids=(1,),
        completion_token_ids=(2,),
        completion_logprobs=(-1.0,),
        finish_reason="stop",
    )
    return Design(Proposal("math", None, (), [], generation, Parsed(reason)), None, 1, False)


def sample(role: str) -> Sample:
    return Sample(role, (1, 2), (3, 4), (1, 1), (-0.5, -0.5), 1.0, 0)


def test_a_batch_trains_the_designer_only_when_asked():
    batch = TrainingBatch(agent=[sample("agent")], designer=[sample("designer")], designer_trains=False)
    assert [s.role for s in batch.samples] == ["agent"]
    batch.designer_trains = True
    assert [s.role for s in batch.samples] == ["agent", "designer"]


def test_the_metrics_line_comes_from_the_stages():
    stats = PlayStats(2, 2, 0.5, 1.0, 0.5, 3.0, 0.5, 1.0)
    played = [PlayedEnv(7, [], [], stats)]
    batch = TrainingBatch(
        agent=[sample("agent")] * 2,
        designer=[sample("designer")],
        agent_groups=1,
        designer_groups=1,
        designer_zero_signal=1,
        designer_reward_mean=-0.5,
        designer_trains=False,
    )
    metrics = iteration_metrics([], played, batch, UpdateResult({"train/loss": 0.1}), (0.15, 0.85))
    assert metrics["designer/proposed"] == 0 and metrics["designer/valid_rate"] is None
    assert (metrics["agent/envs"], metrics["agent/win_rate"], metrics["frontier/fraction"]) == (1, 0.5, 1.0)
    assert metrics["samples/agent"] == 2 and metrics["samples/designer"] == 0
    assert metrics["samples/designer_untrained"] == 1
    assert (metrics["groups/total"], metrics["groups/zero_signal"]) == (2, 1)
    assert metrics["train/loss"] == 0.1 and "train/skipped" not in metrics
    empty = iteration_metrics([], [], TrainingBatch(), UpdateResult(skipped=True), (0.15, 0.85))
    invalid = iteration_metrics(
        [design("syntax_error")], [], TrainingBatch(), UpdateResult(skipped=True), (0, 1)
    )
    assert invalid["designer/reasons"] == {"syntax_error": 1} and invalid["designer/valid_rate"] == 0.0
    assert empty["agent/win_rate"] is None and empty["train/skipped"] == 1.0 and "agent/envs" not in empty


def test_a_play_tag_is_typed_and_still_a_pair():
    tag = PlayTag(3, True)
    assert (tag.env_id, tag.use_hint) == (3, True) and tag == (3, True) and tag[0] == 3
