"""Which environments and episodes the report shows as examples: a filmstrip from early to late.

    for example in pick_examples(data, count=3):
        print(example.phase, example.env.record.env_id, example.transcript is not None)

The iterations in which the designer proposed something are cut into up to three contiguous phases
(early, middle, late); the examples are dealt out over the phases in turn. Within a phase the most
telling environment comes first: a valid one that was played, closest to the middle of the
frontier and with the most regret; then valid ones not yet played; then rejected ones (so a run that
never designed a valid environment still shows what its designer wrote and why it was refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spade_rl.report.data import EnvView, RunData


@dataclass(frozen=True)
class Phase:
    name: str  # "early", "middle", "late", or "all" for a single phase
    iterations: tuple[int, ...]

    @property
    def label(self) -> str:
        first, last = self.iterations[0], self.iterations[-1]
        span = f"iteration {first}" if first == last else f"iterations {first}-{last}"
        return span if self.name == "all" else f"{self.name} ({span})"


@dataclass(frozen=True)
class Example:
    phase: Phase
    env: EnvView
    transcript: dict[str, Any] | None


def phases(iterations: list[int]) -> list[Phase]:
    """Up to three contiguous, near-equal phases of the sorted distinct ``iterations``."""
    distinct = sorted(set(iterations))
    if not distinct:
        return []
    k = min(3, len(distinct))
    names = {1: ("all",), 2: ("early", "late"), 3: ("early", "middle", "late")}[k]
    size, extra = divmod(len(distinct), k)
    out, start = [], 0
    for index, name in enumerate(names):
        end = start + size + (1 if index < extra else 0)
        out.append(Phase(name, tuple(distinct[start:end])))
        start = end
    return out


def _rank(env: EnvView, frontier: tuple[float, float]) -> tuple:
    centre = (frontier[0] + frontier[1]) / 2
    latest = env.latest
    if env.record.valid and latest is not None:
        return (0, abs(latest.stats.win_rate_nohint - centre), -latest.stats.regret, env.record.env_id)
    if env.record.valid:
        return (1, 0.0, 0.0, env.record.env_id)
    return (2, 0.0, 0.0, env.record.env_id)


def transcript_for(data: RunData, env_id: int) -> dict[str, Any] | None:
    """A sampled episode of ``env_id``: the earliest one without the hint, else the earliest with it."""
    episodes = [t for t in data.transcripts if t.get("env_id") == env_id]
    if not episodes:
        return None
    return min(episodes, key=lambda t: (t.get("hint") is True, t["iteration"]))


def pick_examples(data: RunData, count: int = 3) -> list[Example]:
    """``count`` designer environments dealt out over the phases, early first; fewer if the run has fewer."""
    designed = [e for e in data.envs if e.record.origin == "designer"]
    by_phase = []
    for phase in phases([e.record.iteration for e in designed]):
        members = [e for e in designed if e.record.iteration in phase.iterations]
        by_phase.append((phase, sorted(members, key=lambda e: _rank(e, data.frontier))))
    picked: list[Example] = []
    while len(picked) < count and any(members for _, members in by_phase):
        for phase, members in by_phase:
            if members and len(picked) < count:
                env = members.pop(0)
                picked.append(Example(phase, env, transcript_for(data, env.record.env_id)))
    order = {phase.name: i for i, (phase, _) in enumerate(by_phase)}
    return sorted(
        picked, key=lambda ex: (order[ex.phase.name], ex.env.record.iteration, ex.env.record.env_id)
    )


def pick_episodes(data: RunData, count: int = 3) -> list[tuple[Phase, dict[str, Any]]]:
    """Sampled episodes from early, middle and late play: per phase, a won one if any, else the first."""
    picked: list[tuple[Phase, dict[str, Any]]] = []
    groups = [
        (phase, [t for t in data.transcripts if t["iteration"] in phase.iterations])
        for phase in phases([t["iteration"] for t in data.transcripts])
    ]
    while len(picked) < count and any(members for _, members in groups):
        for phase, members in groups:
            if members and len(picked) < count:
                won = [t for t in members if _won(t)]
                chosen = (won or members)[0]
                members.remove(chosen)
                picked.append((phase, chosen))
    order = {phase.name: i for i, (phase, _) in enumerate(groups)}
    return sorted(picked, key=lambda p: (order[p[0].name], p[1]["iteration"]))


def _won(transcript: dict[str, Any]) -> bool:
    value = transcript.get("return")
    return type(value) in (int, float) and value >= 1.0
