"""One SPADE round as a verifiers v1 multi-agent environment: a designer seat and agent seats.

    vf-eval spade-selfplay -m MODEL --client.base-url URL --no-push --env.run-dir runs/verifiers

(the package ``environments/spade_selfplay`` exports the classes below under the id ``spade-selfplay``).
An episode is one round of ``spade-rl run``'s loop for one design, built on spade-rl's own parts:

1. **design** (seat ``proposer``, trainable with ``train_proposer``): :func:`spade_rl.designer.phase.
   design_environments` with one proposal: the same grounding (a corpus document, a skill, memory examples
   from the archive, edits of frontier entries), prompts, parsing, validation in spade-rl's sandbox with
   the same gates as the loop, and archive record. Its model calls are the seat's turns (``SeatPolicy``).
   The calls that never train in the loop either (the two-call mode's hint, the LLM validator, repairs)
   go to seat ``designer_side``, which never trains;
2. **play** (seats ``solver`` and ``hinted``): each valid design is played K times without the hint on
   ``solver`` and ``loop.hint_plays`` times with it on ``hinted`` (the loop trains on no-hint plays only:
   ``hinted`` never trains), with the loop's seeds (``spade_rl.loop.plays.group_specs``), system prompt,
   turn limit and stop reasons (``spade_rl.rollout.play_episode``); the plays' statistics go into the
   archive as the loop records them;
3. **rewards**, written in ``finalize``: each play's return on its trace (``return``); the designer's
   reward on its design's trace (``designer``) from the loop's own :class:`~spade_rl.designer.reward.
   DesignerRewards` (its named terms, the regret paid at its lower confidence bound, the gate, the
   validity floor, an invalid design's penalty), every term as a metric (``designer/term/...``).

prime-rl's ``hierarchical_grpo`` (prime-rl: ``src/prime_rl/orchestrator/algo/hierarchical_grpo.py``;
its config check ``packages/prime-rl-configs/src/prime_rl/configs/algorithm.py``) accepts an environment
whose config is a ``proposer_solver.ProposerSolverEnvConfig``: where that package is installed (prime-rl
installs it from its verifiers submodule), :class:`SpadeSelfPlayConfig` subclasses it, keeping its seats
``proposer`` and ``solver``, its ``n`` and its ``train_proposer`` / ``train_solver`` flags; elsewhere it
declares the same fields itself. With ``episode_agents = ["solver"]`` the agent's plays are compared within
their design (the loop's GRPO group) and the designer's across the group's designs of one seed task.

The spade-rl configuration (``config``: a TOML file, ``overrides``: ``key=value``) gives the grounding, the
design form and prompts, validation, the rollout's turn limit and system prompts, the rewards and the
archive (``run_dir``: ``archive.sqlite``, shared with ``spade-rl envs list/show/export`` and ``spade-rl
report``). Refused there, with the key to change: ``rollout.action_prefix`` / ``action_stop`` (a seat writes
whole turns through a chat API, nothing can open them for it), thinking modes other than "template" (the
seat's sampling decides), ``rewards.delay`` > 0 (an episode rewards its own design) and the Ray executor
(one caller at a time). One process serves a ``run_dir`` (a lock file). Not read: what
verifiers and the trainer own (the policy and its sampling, which are each seat's, the learner, the loop's
iteration counts, ``loop.designs_per_iteration``: one design per episode, the group is prime-rl's
``group_size``; the designer warm-up).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from spade_rl.interop.verifiers.seats import SeatPolicy, play_on_seat, record_play

log = logging.getLogger(__name__)

LOCAL = {"runtime": {"type": "subprocess"}}  # verifiers' default runtime is a remote sandbox

try:  # what prime-rl's hierarchical_grpo checks the environment's config against
    from proposer_solver import ProposerSolverEnvConfig as _SeatsConfig

    HIERARCHICAL = True
except ImportError:
    HIERARCHICAL = False

    class _SeatsConfig(vf.EnvConfig):  # the same fields, where proposer_solver is not installed
        proposer: vf.AgentConfig = vf.AgentConfig()
        solver: vf.AgentConfig = vf.AgentConfig()
        n: int = Field(4, ge=1)
        train_proposer: bool = True
        train_solver: bool = True


class SpadeSelfPlayConfig(_SeatsConfig):
    """The seats and the spade-rl run behind them (see the module docstring)."""

    proposer: vf.AgentConfig = vf.AgentConfig(**LOCAL)  # the designer: writes environments
    solver: vf.AgentConfig = vf.AgentConfig(**LOCAL)  # the agent without the hint
    hinted: vf.AgentConfig = vf.AgentConfig(**LOCAL)  # the agent with the hint (never trains)
    designer_side: vf.AgentConfig = vf.AgentConfig(**LOCAL)  # hints, verdicts, repairs (never trains)
    n: int | None = Field(None, ge=1)  # plays without the hint; None: the config's loop.plays_per_env
    config: str | None = None  # a spade-rl TOML; None: the CPU profile's defaults
    # key=value, as `spade-rl run` takes them. The default clears the CPU profile's forced turn opening,
    # which a seat cannot honour (refuse_unusable); a list given here replaces it whole.
    overrides: list[str] = Field(
        default_factory=lambda: ["rollout.action_prefix={}", "rollout.action_stop={}"]
    )
    run_dir: str = "runs/verifiers"  # archive.sqlite and designer_rewards.json live here


class SeedData(vf.TaskData):
    """A seed task: the round's random draws (document, skill, memory, play seeds) come from ``seed``."""

    seed: int


class SeedTask(vf.Task[SeedData]):
    """One SPADE round; the environment judges it (``finalize``)."""


class SpadeSeedTasksetConfig(vf.TasksetConfig):
    size: int = Field(100_000, ge=1)  # seed tasks 0 .. size-1


class SpadeSeedTaskset(vf.Taskset[SeedTask, SpadeSeedTasksetConfig]):
    """Seed tasks for rounds: task ``i`` draws its grounding from seed ``i`` (the designs of one task's
    group are grounded alike and compared with each other by hierarchical GRPO)."""

    def load(self):
        for i in range(self.config.size):
            yield SeedTask(SeedData(name=f"round-{i}", seed=i), self.config.task)


class Round:
    """What an environment instance holds between episodes: the run configuration, the corpus, the
    executor (spade-rl's sandbox), the archive (used from one thread only: SQLite's rule) and the designer's
    reward state, saved after every episode."""

    def __init__(self, config: SpadeSelfPlayConfig) -> None:
        from spade_rl.loop.config import load_config

        self.run = load_config(config.config, list(config.overrides), learner=False)
        refuse_unusable(self.run)
        self.run_dir = Path(config.run_dir)
        self.plays = {
            False: config.n if config.n is not None else self.run.loop.plays_per_env,
            True: self.run.loop.hint_plays,
        }
        self.archive_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spade-archive")
        # play threads wait on their seat's turns: one per play of an episode, several episodes at once
        self.play_threads = concurrent.futures.ThreadPoolExecutor(
            max(64, 4 * (self.plays[False] + self.plays[True])), thread_name_prefix="spade-play"
        )
        self.lock = asyncio.Lock()  # one design phase at a time (the archive's draws and records)
        self.stopping = threading.Event()  # set by stop(): every thread waiting on a seat gives up
        self.held_lock: Any = None  # the run folder's lock file, held while the environment serves
        ignored = ignored_settings(self.run)
        if ignored:
            log.warning(
                "spade-selfplay: each seat's sampling (verifiers' [env.<seat>.sampling] or the run's) "
                "decides these, not the spade-rl configuration: %s",
                ", ".join(ignored),
            )
        self.archive: Any = None
        self.executor: Any = None
        self.corpus: Any = None
        self.rewards: Any = None
        self.iteration = 0

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self.archive_thread, self._open)

    def _open(self) -> None:
        from spade_rl.archive import Archive
        from spade_rl.corpus import Corpus
        from spade_rl.designer.reward import DesignerRewards
        from spade_rl.envs.external import external_sandbox_config
        from spade_rl.executor import make_executor
        from spade_rl.loop.config import ConfigError, save_config, saved_data
        from spade_rl.loop.pool import seed_pool
        from spade_rl.loop.rundir import RunDirectory

        run = self.run
        self.files = RunDirectory.open(self.run_dir)
        self.held_lock = lock_run_dir(self.run_dir)
        config_file = self.run_dir / "config.json"  # what `spade-rl report` reads beside the archive
        if config_file.exists():
            # as save_config writes it (JSON: its tuples read back as lists)
            same = json.loads(config_file.read_text()) == json.loads(json.dumps(saved_data(run)))
            if not same:
                self._release()
                raise ConfigError(
                    f"{self.run_dir} holds a run of another configuration (its config.json differs): give "
                    "env.run_dir a new folder, or the same env.config and env.overrides as that run"
                )
        else:
            save_config(run, config_file)
        self.corpus = Corpus.from_config(run.corpus)
        self.executor = make_executor(run.executor, external_sandbox_config(run.sandbox, run.pool.packages))
        self.executor.start()
        self.archive = Archive(self.run_dir / "archive.sqlite", run.archive)
        seed_pool(self.archive, self.executor, run.pool, run.design_phase.validation)
        self.rewards = DesignerRewards(run.rewards, run.loop.regenerate_every, run.design.invalid)
        state = self.run_dir / "designer_rewards.json"
        if state.exists():
            self.rewards.restore(state)
            if self.rewards.held:  # a spade-rl run's folder with a delayed reward: not a round's
                held = len(self.rewards.held)
                self._close()
                raise ConfigError(
                    f"{state} holds {held} designs waiting for a delayed reward (a spade-rl run's folder "
                    "with rewards.delay > 0): a round pays its own design at once; give env.run_dir a new "
                    "folder"
                )
        # A round is an iteration of the archive's records: a run folder used again goes on after its last
        self.iteration = max((self.archive.get(i).iteration for i in self.archive.ids()), default=0)

    async def stop(self) -> None:
        """Every waiting thread gives up (within a second), then the executor and the archive close in the
        archive thread; the pools are shut without waiting on the event loop's thread."""
        self.stopping.set()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.archive_thread, self._close)
        finally:
            self.archive_thread.shutdown(wait=False, cancel_futures=True)
            self.play_threads.shutdown(wait=False, cancel_futures=True)

    def _close(self) -> None:
        try:
            if self.executor is not None:
                self.executor.close()
            if self.archive is not None:
                self.archive.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self.held_lock is not None:
            self.held_lock.close()  # closing the file releases its lock
            self.held_lock = None

    # --- one episode ---------------------------------------------------------------------------------
    def design(self, designer: SeatPolicy, side: SeatPolicy, seed: int) -> tuple[int, list, random.Random]:
        """One proposal through the loop's design phase (in the archive thread)."""
        from spade_rl.designer.phase import design_environments

        self.iteration += 1
        rng = random.Random(seed)
        phase = dataclasses.replace(self.run.design_phase, n=1)
        designs = design_environments(
            designer, self.corpus, self.archive, self.executor, phase, rng, self.iteration, side=side
        )
        return self.iteration, designs, rng

    def specs(self, env_id: int, rng: random.Random) -> list:
        from spade_rl.loop.plays import group_specs
        from spade_rl.loop.stages import PlayTag

        record = self.archive.get(env_id)
        max_turns = self.run.design_phase.validation.max_turns
        return group_specs(record, self.plays, self.run.loop, max_turns, rng, PlayTag(env_id, False))

    def reward(self, designs: list, played: list, iteration: int) -> list[tuple[Any, float, dict]]:
        """Each design's reward and its terms, from the loop's DesignerRewards (delay 0: at once), after the
        loop's own checks of the plays: the plays' statistics recorded in the archive, the play-time guard
        (an environment that behaves otherwise in play than in validation is flagged: it leaves the pool
        and the memory), and the gaming gauge (a won design that a gate refuses on revalidation is paid the
        validity floor, ``loop.gaming_gauge``)."""
        from spade_rl.designer.gauge import Gauge, gaming_gauge
        from spade_rl.loop.guard import flag_changed
        from spade_rl.loop.probe import make_probe
        from spade_rl.stats import iteration_means

        run = self.run
        for env in played:
            self.archive.record_stats(env.env_id, iteration, env.stats, mode="merge")
        validation = run.design_phase.validation
        rng = random.Random(f"{run.loop.seed}:{iteration}:probe")
        probe = make_probe(self.executor, self.archive, rng, validation, run.rollout.call_timeout_s)
        flags = flag_changed(self.archive, played, iteration, probe, validation.max_trivial_win_rate)
        gauge = Gauge({}, frozenset())
        if run.loop.gaming_gauge and designs:
            question = run.design_phase.question_validation
            gauge = gaming_gauge(designs, played, self.archive, self.executor, question, iteration)
        out = []
        line: dict[str, Any] = {**gauge.metrics, "designer/flagged": len(flags)}
        for design in designs:  # one at a time: each due reward is its design's
            due = self.rewards.step([design], played, iteration, last=True, gated=gauge.refused)
            metrics = self.rewards.metrics()
            line.update(metrics)
            mine = [d for d in due if d.held.env_id == design.env_id and d.held.iteration == iteration]
            if mine:
                out.append((design, float(mine[0].reward), metrics))
        self.rewards.save(self.run_dir / "designer_rewards.json")
        # The round's line in metrics.jsonl, under the loop's names (no training here: the trainer's own)
        frontier = (self.run.archive.frontier_low, self.run.archive.frontier_high)
        means = iteration_means([p.stats for p in played], frontier)
        line.update(
            {
                "iteration": iteration,
                "designer/proposed": len(designs),
                "designer/valid_rate": sum(d.valid for d in designs) / len(designs) if designs else None,
                "designer/reasons": dict(Counter(d.reason for d in designs)),
                "designer/reward_mean": sum(r for _, r, _ in out) / len(out) if out else None,
                "agent/envs": means.envs,
                "agent/win_rate": means.win_rate,
                "agent/win_rate_hint": means.win_rate_hint,
                "regret/mean": means.regret,
                "frontier/fraction": means.frontier_fraction,
            }
        )
        self.files.append_metrics(line)
        return out


def lock_run_dir(run_dir: Path) -> Any:
    """An exclusive lock on ``run_dir`` (its ``.verifiers.lock``), held until the returned file is closed:
    one process writes a run folder's archive and reward state. A second one is refused with what to do."""
    import fcntl

    handle = open(run_dir / ".verifiers.lock", "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        from spade_rl.loop.config import ConfigError

        raise ConfigError(
            f"{run_dir} is in use by another spade-selfplay environment server: one process writes a run "
            "folder. Give each source its own env.run_dir, and serve it with one worker "
            '(prime-rl and vf-eval: serve.pool = {type = "static", num_workers = 1})'
        ) from None
    return handle


def ignored_settings(run: Any) -> list[str]:
    """The spade-rl keys a seat's sampling replaces, where the configuration sets them (for the warning)."""
    design, rollout = run.design, run.rollout
    validator = design.validation.llm_validator
    return [
        f"design.temperature={design.temperature}",
        f"design.max_new_tokens={design.max_new_tokens}",
        f"design.hint_max_new_tokens={design.hint_max_new_tokens}",
        f"design.validation.llm_validator.max_new_tokens={validator.max_new_tokens}",
        f"rollout.temperature={rollout.temperature}",
        f"rollout.max_new_tokens={rollout.max_new_tokens}",
        f"rollout.max_context_tokens={rollout.max_context_tokens}",
    ]


def refuse_unusable(run: Any, *, delay: bool = True) -> None:
    """The spade-rl settings a verifiers seat cannot honour, refused with the key to change (``delay``: and
    a delayed designer reward, which a round cannot pay)."""
    from spade_rl.loop.config import ConfigError

    forced = sorted(s for s, prefix in run.rollout.action_prefix.items() if prefix)
    stops = sorted(s for s, stop in run.rollout.action_stop.items() if stop)
    if forced or stops:
        raise ConfigError(
            f"rollout.action_prefix / action_stop are set for {forced or stops}: a verifiers seat writes "
            "whole turns through a chat API, and nothing can open or cut them for it; set "
            "rollout.action_prefix = {} and rollout.action_stop = {} (the paper configurations have none)"
        )
    for key, mode in (("rollout.thinking", run.rollout.thinking), ("design.thinking", run.design.thinking)):
        if mode != "template":
            raise ConfigError(
                f"{key} = {mode!r}: a seat's thinking is its sampling's (verifiers' [env.<seat>.sampling]); "
                f"set {key} = 'template'"
            )
    if run.executor.kind == "ray":
        raise ConfigError(
            "executor.kind = 'ray': the Ray executor takes one caller at a time, and a verifiers "
            "environment plays many episodes at once from threads; set executor.kind = 'local' (spread "
            "environment servers instead: one per source)"
        )
    if delay and run.rewards.delay:
        raise ConfigError(
            f"rewards.delay = {run.rewards.delay}: an episode rewards its own design from its own plays "
            "(prime-rl trains the episode that played it); set rewards.delay = 0"
        )


class SpadeSelfPlayEnv(vf.Env[SpadeSelfPlayConfig]):
    """One SPADE round per episode (see the module docstring)."""

    def __init__(self, config: SpadeSelfPlayConfig) -> None:
        super().__init__(config)
        self.round = Round(config)

    async def start(self) -> None:
        await super().start()
        await self.round.start()

    async def stop(self) -> None:
        await self.round.stop()
        await super().stop()

    async def setup(self, agents: Any) -> None:
        agents.proposer.trainable = self.config.train_proposer
        agents.solver.trainable = self.config.train_solver
        agents.hinted.trainable = False  # the loop never trains on a play with the hint
        agents.designer_side.trainable = False  # hints, verdicts, repairs: never trained in the loop

    async def run(self, task: Any, agents: Any) -> None:
        from spade_rl.loop.stages import DESIGNED_FAMILY, PlayedEnv
        from spade_rl.stats import play_stats

        loop = asyncio.get_running_loop()
        state = self.round
        idx = task.data.idx
        designer = SeatPolicy(agents.proposer, loop, "design", idx, state.stopping)
        side = SeatPolicy(agents.designer_side, loop, "designer_side", idx, state.stopping)
        async with state.lock:
            iteration, designs, rng = await loop.run_in_executor(
                state.archive_thread, state.design, designer, side, task.data.seed
            )
            # each valid environment once (two designs of one source share it, as in the loop)
            valid = list(dict.fromkeys(d.env_id for d in designs if d.valid))
            specs = {}
            for env_id in valid:
                specs[env_id] = await loop.run_in_executor(state.archive_thread, state.specs, env_id, rng)
        played = []
        for env_id in valid:
            plays = []
            async with asyncio.TaskGroup() as group:
                for spec in specs[env_id]:
                    seat = agents.hinted if spec.use_hint else agents.solver
                    plays.append(
                        group.create_task(
                            play_on_seat(
                                seat,
                                spec,
                                state.executor,
                                state.run.rollout,
                                state.play_threads,
                                env_id=env_id,
                                idx=idx,
                            )
                        )
                    )
            episodes = [p.result()[0] for p in plays]
            nohint = [e for e in episodes if not e.spec.use_hint]
            hint = [e for e in episodes if e.spec.use_hint]
            stats = play_stats(nohint, hint)
            played.append(PlayedEnv(env_id, nohint, hint, stats, family=DESIGNED_FAMILY))
        async with state.lock:
            paid = await loop.run_in_executor(state.archive_thread, state.reward, designs, played, iteration)
        rewarded = {id(design): (reward, metrics) for design, reward, metrics in paid}
        mask_negative = state.run.rewards.mask_negative
        for design in designs:
            trace = designer.trace_of(design.generation)
            if trace is None:  # a repair's design: written by designer_side, never trained
                continue
            info = {"purpose": "design", "env_id": design.env_id, "valid": design.valid}
            info.update({"reason": design.reason, "iteration": iteration})
            if id(design) in rewarded:
                reward, metrics = rewarded[id(design)]
                info["designer_reward"] = reward
                info["metrics"] = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
            # What the loop gives no gradient trains nothing here either (add_designer_samples' masking):
            # a design with no reward (design.invalid = "retry": a slot that failed every try) and, with
            # rewards.mask_negative, a negative one (its reward is still written, for the metrics).
            if id(design) not in rewarded or (mask_negative and rewarded[id(design)][0] < 0):
                trace.agent.trainable = False
                info["untrained"] = "no reward" if id(design) not in rewarded else "negative (mask_negative)"
            trace.info["spade"] = info

    async def finalize(self, task: Any, episode: Any) -> None:
        for trace in episode.traces:
            if record_play(trace):
                continue
            info = trace.info.get("spade") or {}
            if info.get("purpose") == "design" and "designer_reward" in info:
                trace.record_reward("designer", float(info["designer_reward"]))
                trace.record_metric("valid", float(info["valid"]))
                for name, value in info["metrics"].items():
                    trace.record_metric(name, float(value))
