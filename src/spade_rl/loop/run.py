"""The self-play run: SPADE's iteration, repeated, with a run directory, checkpoints and resume.

    with SelfPlay(load_config(), Path("runs/demo")) as run:
        for metrics in run.iterations():
            print(metrics["agent/win_rate"])

One iteration (``SelfPlay.iteration``), top to bottom as in SPADE.md:

1. **Ground** and 2. **design** (every ``regenerate_every`` iterations): corpus documents, skills
   and memory examples become designer prompts; the policy writes environments and hints.
3. **Validate** in the sandbox; every proposal goes into the archive with its verdict (step 7).
4. **Play**: the new valid environments, then environments drawn from the archive's training pool
   (frontier-weighted; the reference environments seed it), each ``plays_per_env`` times without
   the hint and as many times with it.
5. **Reward**: the agent's return per episode, z-scored within the plays of one environment (only
   no-hint episodes are training samples); the designer's regret-and-band reward per valid design,
   a fixed penalty per invalid one, centred within the iteration (or skill).
6. **Update**: one GRPO step of the shared policy on the designer and agent samples together.
7. **Remember**: play statistics per environment and iteration go into the archive, which feeds
   the next iteration's memory and pool.

The run directory holds ``config.json`` (the resolved configuration), ``archive.sqlite``,
``metrics.jsonl`` (one line per iteration), ``transcripts.jsonl`` (sampled episodes),
``eval/iter-NNNN.json`` (in-loop evaluations, ``[eval] every``) and ``checkpoints/iter-NNNN/``
(model or adapter, optimiser, scheduler, RNG states, iteration). Every
random choice of iteration ``i`` comes from ``random.Random(f"{seed}:{i}")``, so a resumed run
replays an interrupted iteration exactly, after the archive has forgotten its partial records.

Baselines and ablations are configurations of this same loop (``[designer]``, ``[pool]``, ``[design]``
``memory``/``grounding``, ``[rewards] mode``): ``designer.source = "none"`` never designs (agent-only
GRPO on the fixed pool), ``"frozen"`` designs with a model that is never trained, and
``designer.train = false`` keeps the designer's samples out of the update.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spade_rl.archive import Archive, PlayStats
from spade_rl.corpus import Corpus
from spade_rl.design.validate import play_kwargs
from spade_rl.executor import Executor, make_executor
from spade_rl.loop.config import ConfigError, EvalConfig, RunConfig, load_run_config, save_config
from spade_rl.loop.designing import DesignOutcome, design_environments
from spade_rl.loop.pool import seed_pool
from spade_rl.loop.warmup import warm_up
from spade_rl.memory import release_unused_memory
from spade_rl.policy import Policy, make_policy
from spade_rl.rewards import (
    centred_advantages,
    designer_reward,
    invalid_design_reward,
    regret,
    zscore_advantages,
)
from spade_rl.rollout import Episode, EpisodeSpec, run_episodes
from spade_rl.sandbox import SandboxPool
from spade_rl.train import Sample, sample_from_episode, sample_from_generation

log = logging.getLogger(__name__)


@dataclass
class PlayedEnv:
    env_id: int
    nohint: list[Episode]
    hint: list[Episode]
    stats: PlayStats


class SelfPlay:
    """A self-play run in ``run_dir``; ``resume=True`` continues from its last checkpoint."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        policy: Policy | None = None,
        designer_policy: Policy | None = None,  # designer.source = "frozen": this one designs
    ):
        self.config = config
        self.run_dir = Path(run_dir)
        self.next_iteration = 1
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            if (self.run_dir / "metrics.jsonl").exists() or (self.run_dir / "checkpoints").exists():
                raise ConfigError(
                    f"{self.run_dir} already holds a run; continue it with --resume, or pick a new folder"
                )
            save_config(config, self.run_dir / "config.json")
        self.policy = policy if policy is not None else make_policy(config.policy)
        self.corpus = Corpus.from_config(config.corpus)
        # The designer's warm-up (from the cache after the first time): the starting weights of every role.
        warmup = warm_up(self.policy, config.warmup, config.design, self.corpus)
        if warmup:
            (self.run_dir / "warmup.json").write_text(json.dumps(warmup, indent=2) + "\n")
        # A frozen designer is copied before anything trains or a checkpoint is loaded: the starting weights.
        self.designer_policy = self._make_designer(designer_policy)
        self._eval_pool_owned: SandboxPool | None = None
        # In process, through vLLM servers kept in step, or not at all (inference-only): loop/updating.py.
        from spade_rl.loop.updating import make_updater  # torch and trl load here

        self.updater = make_updater(config, self.policy)
        # Where environments are validated and played: here, or on Ray actors ([executor]).
        self.executor = make_executor(config.executor, config.sandbox)
        self.executor.start()
        self.archive = Archive(self.run_dir / "archive.sqlite", config.archive)
        if resume:
            self._restore()
        seed_pool(self.archive, self.executor, config.pool, config.design.validation)

    @property
    def pool(self) -> Executor:
        """Where environments run (the executor: it offers what ``run_episodes`` needs of a pool)."""
        return self.executor

    # --- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> SelfPlay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.executor.close()
        if self._eval_pool_owned is not None:
            self._eval_pool_owned.close()
        self.archive.close()
        self.updater.close()

    def iterations(self) -> Iterator[dict]:
        """Run the remaining iterations, yielding each one's metrics after it is recorded."""
        while self.next_iteration <= self.config.loop.iterations:
            metrics = self.iteration(self.next_iteration)
            self._record(metrics)
            yield metrics

    # --- one iteration ---------------------------------------------------------------------------------
    def iteration(self, i: int) -> dict:
        cfg = self.config
        rng = random.Random(f"{cfg.loop.seed}:{i}")
        started = time.perf_counter()
        metrics: dict = {"iteration": i}
        executor_before = dict(self.executor.stats)

        # 1-3, 7. ground, design, validate, archive
        outcomes: list[DesignOutcome] = []
        if cfg.designer.source != "none" and (i - 1) % cfg.loop.regenerate_every == 0:
            t = time.perf_counter()
            designer = self.designer_policy if self.designer_policy is not None else self.policy
            outcomes = design_environments(
                designer, self.corpus, self.archive, self.executor, cfg.design_phase, rng, i
            )
            metrics["time/design_s"] = time.perf_counter() - t
        reasons = Counter(o.reason for o in outcomes)
        metrics["designer/proposed"] = len(outcomes)
        metrics["designer/valid_rate"] = sum(o.valid for o in outcomes) / len(outcomes) if outcomes else None
        metrics["designer/reasons"] = dict(reasons)

        # 4. play K without and K with the hint
        t = time.perf_counter()
        env_ids = self._choose_envs(outcomes, rng)
        played = self._play(env_ids, rng, i)
        metrics["time/play_s"] = time.perf_counter() - t

        # 5. rewards and advantages; 7. statistics into the archive
        for env in played:
            self.archive.record_stats(env.env_id, i, env.stats)
        samples, groups = self._agent_samples(played)
        designer = self._designer_samples(outcomes, {p.env_id: p for p in played}, len(groups))
        if cfg.designer.trains:
            samples += designer.samples
        else:
            metrics["samples/designer_untrained"] = len(designer.samples)
        metrics.update(self._play_metrics(played))
        metrics["designer/reward_mean"] = designer.mean_reward
        metrics["groups/total"] = len(groups) + designer.groups
        metrics["groups/zero_signal"] = sum(not g for g in groups) + designer.zero_signal
        metrics["samples/agent"] = sum(s.role == "agent" for s in samples)
        metrics["samples/designer"] = sum(s.role == "designer" for s in samples)

        # 6. one GRPO update of the shared policy
        t = time.perf_counter()
        if samples:
            clear = getattr(self.policy, "clear_prefix_cache", None)
            if callable(clear):
                # The weights are about to change: the cached keys/values would be stale after the update,
                # and emptied now they leave their memory (up to 1.4 GiB on the CPU default) to it.
                clear()
            release_unused_memory()  # what play freed goes back before the update allocates its own
            metrics.update(self.updater.update(samples))
            release_unused_memory()
        else:
            metrics["train/skipped"] = 1.0
        metrics["time/update_s"] = time.perf_counter() - t
        executor_after = self.executor.stats
        metrics["sandbox/timeouts"] = executor_after["timeouts"] - executor_before["timeouts"]
        if self.executor.kind == "ray":
            for key in ("actors_lost", "envs_lost", "retries"):
                metrics[f"executor/{key}"] = executor_after[key] - executor_before[key]
        metrics["time/iteration_s"] = time.perf_counter() - started
        self._save_transcripts(i, played, rng)
        if cfg.eval.every > 0 and i % cfg.eval.every == 0:
            metrics.update(self._evaluate_iteration(i))  # after the update: the weights of iteration i
        return metrics

    def _choose_envs(self, outcomes: list[DesignOutcome], rng: random.Random) -> list[int]:
        """New valid designs first, then the frontier-weighted pool, up to ``envs_per_iteration``."""
        wanted = self.config.loop.envs_per_iteration
        chosen = list(dict.fromkeys(o.env_id for o in outcomes if o.valid))[:wanted]
        if len(chosen) < wanted:
            pool = self.archive.sample_pool(wanted, rng, setting=self.config.design.setting)
            chosen += [env_id for env_id in pool if env_id not in chosen][: wanted - len(chosen)]
        return chosen

    def _play(self, env_ids: list[int], rng: random.Random, iteration: int) -> list[PlayedEnv]:
        k = self.config.loop.plays_per_env
        records = [self.archive.get(env_id) for env_id in env_ids]
        max_turns = self.config.design.validation.max_turns
        kwargs = {r.env_id: play_kwargs(r.source, r.env_kwargs, max_turns) for r in records}
        specs = [
            EpisodeSpec(
                r.source,
                seed=rng.randrange(2**31),
                hint=r.hint,
                use_hint=use_hint,
                setting=r.setting,
                env_kwargs=kwargs[r.env_id],
                tag=(r.env_id, use_hint),
            )
            for r in records
            for use_hint in (False, True)
            for _ in range(k)
        ]
        episodes = run_episodes(
            self.policy, self.executor, specs, self.config.rollout, seed=rng.randrange(2**31)
        )
        played = []
        for record in records:
            nohint = [e for e in episodes if e.spec.tag == (record.env_id, False)]
            hint = [e for e in episodes if e.spec.tag == (record.env_id, True)]
            r_no, r_hint = [e.return_ for e in nohint], [e.return_ for e in hint]
            stats = PlayStats(
                episodes_nohint=len(nohint),
                episodes_hint=len(hint),
                win_rate_nohint=sum(e.won for e in nohint) / len(nohint),
                win_rate_hint=sum(e.won for e in hint) / len(hint),
                regret=regret(r_hint, r_no),
                mean_turns=sum(len(e.turns) for e in episodes if e.spec.tag[0] == record.env_id) / (2 * k),
                mean_return_nohint=sum(r_no) / len(r_no),
                mean_return_hint=sum(r_hint) / len(r_hint),
            )
            played.append(PlayedEnv(record.env_id, nohint, hint, stats))
        return played

    def _agent_samples(self, played: list[PlayedEnv]) -> tuple[list[Sample], list[bool]]:
        """No-hint episodes are the agent's samples: one group per environment, z-scored returns."""
        samples, signal = [], []
        for group, env in enumerate(played):
            advantages = zscore_advantages([e.return_ for e in env.nohint])
            signal.append(advantages.has_signal)
            if not advantages.has_signal and self.config.loop.drop_zero_signal_groups:
                continue
            usable = [(e, a) for e, a in zip(env.nohint, advantages.advantages, strict=True) if e.token_ids]
            samples += [sample_from_episode(e, a, group) for e, a in usable]
        return samples, signal

    def _designer_samples(
        self, outcomes: list[DesignOutcome], played: dict[int, PlayedEnv], first_group: int
    ):
        """One reward per proposal (valid and played: regret and band; invalid: the penalty), centred."""
        rewards_config = self.config.rewards
        rewarded = []
        for outcome in outcomes:
            if outcome.valid:
                env = played.get(outcome.env_id)
                if env is None:
                    continue  # valid but not played this iteration: no reward to learn from
                reward = designer_reward(env.stats.win_rate_nohint, env.stats.regret, rewards_config)
            else:
                checks = outcome.report.checks if outcome.report is not None else ()
                reward = invalid_design_reward(outcome.reason, rewards_config, checks)
            rewarded.append((outcome, reward))
        by_group: dict[str, list] = {}
        for outcome, reward in rewarded:
            key = "all" if self.config.loop.designer_group_by == "iteration" else outcome.skill
            by_group.setdefault(key, []).append((outcome, reward))
        result = _DesignerSamples([], 0, 0, sum(r for _, r in rewarded) / len(rewarded) if rewarded else None)
        for offset, members in enumerate(by_group.values()):
            advantages = centred_advantages([r for _, r in members])
            result.groups += 1
            if not advantages.has_signal:
                result.zero_signal += 1
                if self.config.loop.drop_zero_signal_groups:
                    continue
            for (outcome, _), a in zip(members, advantages.advantages, strict=True):
                if outcome.generation.completion_token_ids:
                    result.samples.append(sample_from_generation(outcome.generation, a, first_group + offset))
        return result

    def _play_metrics(self, played: list[PlayedEnv]) -> dict:
        if not played:
            return {
                "agent/win_rate": None,
                "agent/win_rate_hint": None,
                "regret/mean": None,
                "band/fraction": None,
            }
        low, high = self.config.archive.band_low, self.config.archive.band_high  # the archive's frontier
        stats = [p.stats for p in played]
        return {
            "agent/envs": len(played),
            "agent/win_rate": sum(s.win_rate_nohint for s in stats) / len(stats),
            "agent/win_rate_hint": sum(s.win_rate_hint for s in stats) / len(stats),
            "agent/mean_turns": sum(s.mean_turns for s in stats) / len(stats),
            "regret/mean": sum(s.regret for s in stats) / len(stats),
            "band/fraction": sum(low <= s.win_rate_nohint <= high for s in stats) / len(stats),
        }

    # --- evaluation ----------------------------------------------------------------------------------
    def evaluate(self, config: EvalConfig, model: str = ""):
        """Evaluate the policy as it is now (greedy, ``config.max_new_tokens``) on ``config``'s suites,
        in the run's sandbox; returns the :class:`~spade_rl.evaluate.results.EvalResult`."""
        model = model or (self.config.policy.model or "smollm2-135m")
        return evaluate_policy(self.policy, self._eval_pool(), config, model, self.config.policy.backend)

    def _evaluate_iteration(self, i: int) -> dict:
        """The in-loop evaluation after iteration ``i``: ``eval/iter-NNNN.json`` and its metrics."""
        started = time.perf_counter()
        name = self.config.policy.model or "smollm2-135m"
        result = self.evaluate(self.config.eval, f"{name} after iteration {i} of {self.run_dir.name}")
        result.write(self.run_dir / "eval" / f"iter-{i:04d}.json")
        return {**eval_metrics(result), "time/eval_s": time.perf_counter() - started}

    def _eval_pool(self) -> SandboxPool:
        """The sandbox pool of evaluations: the local executor's own, else (Ray) one started here."""
        pool = getattr(self.executor, "pool", None)
        if isinstance(pool, SandboxPool):
            return pool
        if self._eval_pool_owned is None:
            self._eval_pool_owned = SandboxPool(self.config.sandbox)
            self._eval_pool_owned.start()
        return self._eval_pool_owned

    def _make_designer(self, given: Policy | None) -> Policy | None:
        """The policy that designs when it is not the trained one (designer.source = "frozen")."""
        designer = self.config.designer
        if designer.source != "frozen":
            if given is not None:
                raise ConfigError(f"a designer policy was given, but designer.source is {designer.source!r}")
            return None
        if given is not None:
            return given
        if designer.policy is not None:
            return make_policy(designer.policy)
        return frozen_copy(self.policy)

    def save_checkpoint(self) -> None:
        """Checkpoint the last recorded iteration if it has no checkpoint yet (a run stopped early)."""
        done = self.next_iteration - 1
        if done >= 1 and not (self.run_dir / "checkpoints" / f"iter-{done:04d}").exists():
            self._checkpoint(done)

    # --- the run directory ---------------------------------------------------------------------------
    def _save_transcripts(self, iteration: int, played: list[PlayedEnv], rng: random.Random) -> None:
        episodes = [e for p in played for e in p.nohint + p.hint]
        picked = rng.sample(episodes, min(self.config.loop.transcripts_per_iteration, len(episodes)))
        with open(self.run_dir / "transcripts.jsonl", "a", encoding="utf-8") as out:
            for e in picked:
                out.write(
                    json.dumps(
                        {
                            "iteration": iteration,
                            "env_id": e.spec.tag[0],
                            "hint": e.spec.use_hint,
                            "return": e.return_,
                            "stop_reason": e.stop_reason,
                            "error": e.error,
                            "messages": e.messages,
                        }
                    )
                    + "\n"
                )

    def _record(self, metrics: dict) -> None:
        """Metrics line first, then the checkpoint: on resume, lines after the checkpoint are dropped."""
        i = metrics["iteration"]
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps(_finite(metrics)) + "\n")
            out.flush()
            os.fsync(out.fileno())
        if i % self.config.loop.checkpoint_every == 0 or i == self.config.loop.iterations:
            self._checkpoint(i)
        self.next_iteration = i + 1

    def _checkpoint(self, iteration: int) -> None:
        final = self.run_dir / "checkpoints" / f"iter-{iteration:04d}"
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.updater.save(tmp / "updater")
        (tmp / "state.json").write_text(json.dumps({"iteration": iteration, "time": time.time()}))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)  # a checkpoint exists whole or not at all
        for old in sorted((self.run_dir / "checkpoints").glob("iter-*"))[:-2]:
            if not old.name.endswith(".tmp"):
                shutil.rmtree(old, ignore_errors=True)  # keep the last two

    def _restore(self) -> None:
        done = 0
        checkpoints = sorted(
            p for p in (self.run_dir / "checkpoints").glob("iter-*") if not p.name.endswith(".tmp")
        )
        if checkpoints:
            latest = checkpoints[-1]
            done = json.loads((latest / "state.json").read_text())["iteration"]
            self.updater.load(latest / "updater")
        removed = self.archive.discard_after(done)
        metrics_path = self.run_dir / "metrics.jsonl"
        if metrics_path.exists():
            lines = [line for line in metrics_path.read_text().splitlines() if line.strip()]
            kept = [line for line in lines if json.loads(line)["iteration"] <= done]
            metrics_path.write_text("".join(line + "\n" for line in kept))
        transcripts = self.run_dir / "transcripts.jsonl"
        if transcripts.exists():
            lines = [line for line in transcripts.read_text().splitlines() if line.strip()]
            transcripts.write_text(
                "".join(line + "\n" for line in lines if json.loads(line)["iteration"] <= done)
            )
        for path in (self.run_dir / "eval").glob("iter-*.json*"):
            number = path.name[len("iter-") :].split(".")[0]
            if path.name.endswith(".tmp") or not number.isdigit() or int(number) > done:
                path.unlink()  # the evaluation of an iteration that runs again (or half a file)
        self.next_iteration = done + 1
        log.info(
            "resuming %s after iteration %d (%d partial environments discarded)", self.run_dir, done, removed
        )


@dataclass
class _DesignerSamples:
    samples: list[Sample]
    groups: int
    zero_signal: int
    mean_reward: float | None


def _finite(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def evaluate_policy(policy: Policy, pool: SandboxPool, config: EvalConfig, model: str, backend: str):
    """``config``'s suites on ``policy`` (greedy, ``config.max_new_tokens``), untrusted code in ``pool``:
    the evaluation of the loop and of ``spade-rl experiment``. Returns an ``EvalResult``."""
    from spade_rl.evaluate import GREEDY, EvalContext
    from spade_rl.evaluate.runner import run_eval

    ctx = EvalContext(
        limit=config.limit,
        seed=config.seed,
        sampling=dataclasses.replace(GREEDY, max_new_tokens=config.max_new_tokens),
        pool=pool,
        batch_size=config.batch_size,
        options={name: dict(options) for name, options in config.options.items()},
    )
    return run_eval(policy, list(config.suites), ctx, model=model, backend=backend)


def eval_metrics(result) -> dict:
    """``eval/<suite>/accuracy``, ``ci_low``, ``ci_high`` and ``n`` of every suite of an EvalResult."""
    metrics: dict = {}
    for name, suite in result.suites.items():
        low, high = suite.ci
        metrics[f"eval/{name}/accuracy"] = suite.accuracy
        metrics[f"eval/{name}/ci_low"] = low
        metrics[f"eval/{name}/ci_high"] = high
        metrics[f"eval/{name}/n"] = suite.n
    return metrics


def frozen_copy(policy: Policy) -> Policy:
    """A copy of an in-process transformers policy whose weights never change (the frozen designer)."""
    from spade_rl.policy.transformers_backend import TransformersPolicy

    if not isinstance(policy, TransformersPolicy):
        raise ConfigError(
            f"designer.source = 'frozen' copies the starting weights of a transformers policy, not a "
            f"{type(policy).__name__}; name the designer's model in [designer.policy]"
        )
    model = copy.deepcopy(policy.model)
    model.requires_grad_(False)
    model.eval()
    return TransformersPolicy(model, policy.tokenizer, policy.config)


def open_run(config_path: Path | None, overrides: list[str], run_dir: Path, resume: bool) -> SelfPlay:
    """The run of ``spade-rl run``: a new one from a config file and overrides, or a resumed one."""
    return SelfPlay(load_run_config(config_path, overrides, run_dir, resume), run_dir, resume=resume)
