"""What the suites that play whole episodes (envs, gem, textarena) make of one: its item and the metrics of
a suite's items. ``key`` names what an item is an episode of ("env" in the envs suite, "game" in the
external ones); it is the item's category too."""

from __future__ import annotations

from spade_rl.evaluate.base import ItemResult, clip
from spade_rl.rollout import Episode


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
