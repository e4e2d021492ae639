"""What the suites that play whole episodes (envs, gem, textarena) share: playing them in batches, the item
of one episode and the metrics of a suite's items. ``key`` names what an item is an episode of ("env" in
the envs suite, "game" in the external ones); it is the item's category too.

Wrong answers and errors (:mod:`spade_rl.evaluate.base`): an episode the agent lost, whatever it
answered (garbage, nothing, an invalid move the game rejects), or one cut at the turn or context limit,
is scored: not won. An episode the environment ended by failing (``stop_reason`` "env_error": it did not
load, its reset or step raised, hung past its deadline or broke the contract, even on the agent's
action, or the sandbox lost its worker) is an error: the environment must answer any action, so its
failure says nothing of the agent; it is left out of the win rate and the other metrics."""

from __future__ import annotations

from spade_rl.evaluate.base import DRAW_STRIDE, EvalContext, ItemResult, clip
from spade_rl.policy import Policy
from spade_rl.rollout import Episode, EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import Sandbox


def episode_item(episode: Episode, key: str, last_observation: bool = False) -> ItemResult:
    """One held-out episode as an item: correct when won, scored by its return, its actions as the response;
    an error when the environment failed (``stop_reason`` "env_error"). ``episode.spec.tag`` is (label,
    seed); ``last_observation`` keeps the tail of what the game said last."""
    label, seed = episode.spec.tag
    actions = "\n".join(f"[turn {n}] {turn.action}" for n, turn in enumerate(episode.turns, 1))
    detail = {
        "category": label,
        key: label,
        "seed": seed,
        "turns": len(episode.turns),
        "stop_reason": episode.stop_reason,
        "return": episode.return_,
    }
    if last_observation and episode.turns:
        detail["last_observation"] = episode.turns[-1].observation[-500:]
    if episode.error:
        detail["error"] = episode.error[:1000]
    failed = episode.stop_reason == "env_error"
    error = "the environment failed: " + (episode.error[:1000] or "no reason given") if failed else ""
    won = episode.won and not failed
    return ItemResult(f"{label}/seed={seed}", won, float(episode.return_), clip(actions), detail, error=error)


def episode_metrics(items: list[ItemResult], key: str, mean_return: bool = False) -> dict[str, float]:
    """Win rate (overall and per ``key``) and mean turns over the scored episodes (the errors are counted
    by the suite's result); the mean return if asked. A ``key`` with no scored episode has no win rate."""
    items = [i for i in items if not i.error]
    if not items:
        return {}
    n = len(items)
    metrics = {"win_rate": sum(i.correct for i in items) / n}
    if mean_return:
        metrics["mean_return"] = sum(i.score for i in items) / n
    metrics["mean_turns"] = sum(i.detail["turns"] for i in items) / n
    groups: dict[str, list[ItemResult]] = {}
    for item in items:
        groups.setdefault(item.detail[key], []).append(item)
    for label, group in groups.items():
        metrics[f"win_rate/{label}"] = sum(i.correct for i in group) / len(group)
    return metrics


def play_episodes(
    policy: Policy, sandbox: Sandbox, specs: list[EpisodeSpec], o: dict, ctx: EvalContext
) -> list:
    """Play ``specs`` in batches of ``o["batch_episodes"]`` with the suite's turn options (``max_turns``,
    ``max_new_tokens``, ``max_context_tokens``, ``call_timeout_s``, ``action_prefix``, ``action_stop``,
    ``system_prompt``) and
    the evaluation's sampling. Batch ``b`` of the ``d``-th sampled run (``ctx.draw``) is seeded
    ``ctx.seed + b's first index + d * DRAW_STRIDE``: the same episodes, other seeds."""
    config = RolloutConfig(
        max_turns=o["max_turns"],
        max_new_tokens=o["max_new_tokens"],
        max_context_tokens=o["max_context_tokens"],
        temperature=ctx.sampling.temperature,
        top_p=ctx.sampling.top_p,
        call_timeout_s=o["call_timeout_s"],
        action_prefix={"games": o["action_prefix"]} if o["action_prefix"] else {},
        action_stop={"games": list(o["action_stop"])} if o["action_stop"] else {},
        system_prompts={"games": o["system_prompt"]} if o.get("system_prompt") else {},
    )
    episodes: list[Episode] = []
    for start in range(0, len(specs), o["batch_episodes"]):
        batch = specs[start : start + o["batch_episodes"]]
        episodes += run_episodes(
            policy, sandbox, batch, config, seed=ctx.seed + start + ctx.draw * DRAW_STRIDE
        )
    return episodes
