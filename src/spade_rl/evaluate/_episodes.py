"""What the suites that play whole episodes (envs, gem, textarena) share: playing them in batches, the item
of one episode and the metrics of a suite's items. ``key`` names what an item is an episode of ("env" in
the envs suite, "game" in the external ones); it is the item's category too."""

from __future__ import annotations

from spade_rl.evaluate.base import DRAW_STRIDE, EvalContext, ItemResult, clip
from spade_rl.policy import Policy
from spade_rl.rollout import Episode, EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import Sandbox


def episode_item(episode: Episode, key: str, last_observation: bool = False) -> ItemResult:
    """One held-out episode as an item: correct when won, scored by its return, its actions as the response.
    ``episode.spec.tag`` is (label, seed); ``last_observation`` keeps the tail of what the game said last."""
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
    return ItemResult(f"{label}/seed={seed}", episode.won, float(episode.return_), clip(actions), detail)


def episode_metrics(items: list[ItemResult], key: str, mean_return: bool = False) -> dict[str, float]:
    """Win rate (overall and per ``key``), mean turns, environment errors; the mean return if asked."""
    if not items:
        return {}
    n = len(items)
    metrics = {"win_rate": sum(i.correct for i in items) / n}
    if mean_return:
        metrics["mean_return"] = sum(i.score for i in items) / n
    metrics["mean_turns"] = sum(i.detail["turns"] for i in items) / n
    metrics["env_errors"] = float(sum(i.detail["stop_reason"] == "env_error" for i in items))
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
    ``max_new_tokens``, ``max_context_tokens``, ``call_timeout_s``, ``action_prefix``, ``action_stop``) and
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
    )
    episodes: list[Episode] = []
    for start in range(0, len(specs), o["batch_episodes"]):
        batch = specs[start : start + o["batch_episodes"]]
        episodes += run_episodes(
            policy, sandbox, batch, config, seed=ctx.seed + start + ctx.draw * DRAW_STRIDE
        )
    return episodes
