"""Archived environments as a verifiers v1 taskset: one agent seat plays them in spade-rl's sandbox.

    spade-rl envs export --format verifiers OUT --archive RUN_DIR     # writes an installable package
    pip install -e OUT && vf-eval spade-games -m MODEL --client.base-url URL --no-push

:func:`spade_rl.interop.verifiers.package.write_package` writes the package (``pyproject.toml``, its
module, the environments as JSONL in the module); its module exports a :class:`GamesTaskset` bound to that
file, :class:`GamesEnv` and the in-process harness. A task is one environment at one seed (``seeds`` per
environment, 0 .. seeds-1); an episode plays it turn by turn on seat ``agent`` with the loop's system
prompt, turn limit, cuts, contract checks and stop reasons (``spade_rl.rollout.play_episode``), its return
the trace's reward (``return``). ``with_hint`` shows each environment's privileged hint after the first
observation, as the loop's hint plays do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any, ClassVar

import verifiers.v1 as vf
from pydantic import Field

from spade_rl.interop.verifiers.seats import play_on_seat, record_play

LOCAL = {"runtime": {"type": "subprocess"}}


class GameData(vf.TaskData):
    """One archived environment at one seed (the environment opens the conversation)."""

    env_id: int
    seed: int
    source: str
    hint: str = ""
    setting: str = "games"
    env_kwargs: dict | None = None  # the constructor arguments validation used (None: not recorded)


class GameTask(vf.Task[GameData]):
    """An episode of one archived environment; its return is written by the environment (``finalize``)."""


class GamesTasksetConfig(vf.TasksetConfig):
    seeds: int = Field(8, ge=1)  # tasks per environment: seeds 0 .. seeds-1
    path: str | None = None  # a JSONL export; None: the package's own file


class GamesTaskset(vf.Taskset[GameTask, GamesTasksetConfig]):
    """The valid environments of a ``spade-rl envs export`` JSONL file, each at ``seeds`` seeds."""

    DATA: ClassVar[Path | None] = None  # the package's file (set by the package written by write_package)

    def load(self):
        from spade_rl.archive.jsonl import read_envs

        path = Path(self.config.path) if self.config.path else self.DATA
        if path is None:
            raise ValueError("GamesTaskset has no environments: give taskset.path (an `envs export` file)")
        for number, env in read_envs(path):
            if isinstance(env, ValueError):
                raise ValueError(f"{path}:{number}: {env}")
            record = env.record
            if not record.valid or record.flagged:  # a flagged one behaved otherwise in play than validated
                continue
            for seed in range(self.config.seeds):
                yield GameTask(
                    GameData(
                        name=f"env-{record.env_id}-seed-{seed}",
                        env_id=record.env_id,
                        seed=seed,
                        source=record.source,
                        hint=record.hint,
                        setting=record.setting,
                        env_kwargs=record.env_kwargs,
                    ),
                    self.config.task,
                )


class GamesEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(**LOCAL)
    with_hint: bool = False  # show each environment's privileged hint after the first observation
    config: str | None = None  # a spade-rl TOML for the rollout's settings; None: the CPU profile's
    overrides: list[str] = Field(
        default_factory=lambda: ["rollout.action_prefix={}", "rollout.action_stop={}"]
    )  # as in spade_rl.interop.verifiers.selfplay: a seat writes whole turns


class GamesEnv(vf.Env[GamesEnvConfig]):
    """One episode of one task's environment on seat ``agent``, in spade-rl's sandbox."""

    def __init__(self, config: GamesEnvConfig) -> None:
        from spade_rl.interop.verifiers.selfplay import refuse_unusable
        from spade_rl.loop.config import load_config

        super().__init__(config)
        self.run_config = load_config(config.config, list(config.overrides), learner=False)
        refuse_unusable(self.run_config, delay=False)
        self.threads = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="spade-play")
        self.executor: Any = None

    async def start(self) -> None:
        from spade_rl.envs.external import external_sandbox_config
        from spade_rl.executor import make_executor

        await super().start()
        run = self.run_config
        self.executor = make_executor(run.executor, external_sandbox_config(run.sandbox, run.pool.packages))
        await asyncio.get_running_loop().run_in_executor(self.threads, self.executor.start)

    async def stop(self) -> None:
        try:
            if self.executor is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.executor.close)
        finally:
            self.threads.shutdown(wait=False, cancel_futures=True)
            await super().stop()

    async def run(self, task: Any, agents: Any) -> None:
        from spade_rl.design.validate import play_kwargs
        from spade_rl.rollout import EpisodeSpec

        data = task.data
        max_turns = self.run_config.design_phase.validation.max_turns  # as the loop plays designs
        spec = EpisodeSpec(
            data.source,
            seed=data.seed,
            hint=data.hint,
            use_hint=self.config.with_hint and bool(data.hint.strip()),
            setting=data.setting,
            env_kwargs=play_kwargs(data.source, data.env_kwargs, max_turns),
        )
        await play_on_seat(
            agents.agent,
            spec,
            self.executor,
            self.run_config.rollout,
            self.threads,
            env_id=data.env_id,
            idx=data.idx,
        )

    async def finalize(self, task: Any, episode: Any) -> None:
        for trace in episode.traces:
            record_play(trace)
