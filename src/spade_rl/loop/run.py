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
   no-hint episodes are training samples); the designer's regret-and-plateau reward per valid design,
   a fixed penalty per invalid one, centred within the iteration (or skill). With ``rewards.delay = D``
   a design phase's designs are held until ``D`` iterations later, their environments played first
   meanwhile, and rewarded from that window (designer/reward.py).
6. **Update**: one GRPO step of the shared policy on the designer and agent samples together.
7. **Remember**: play statistics per environment and iteration go into the archive, which feeds
   the next iteration's memory and pool.

The run directory holds ``config.json`` (the resolved configuration), ``archive.sqlite``,
``metrics.jsonl`` (one line per iteration), ``transcripts.jsonl`` (sampled episodes),
``eval/iter-NNNN.json`` (in-loop evaluations, ``[eval] every``) and ``checkpoints/iter-NNNN/``
(model or adapter, optimiser, scheduler, RNG states, iteration, and ``designer_rewards.json``: the designs
held for a delayed reward and the learning-potential averages). Every
random choice of iteration ``i`` comes from ``random.Random(f"{seed}:{i}")``, so a resumed run
replays an interrupted iteration exactly, after the archive has forgotten its partial records.

Baselines and ablations are configurations of this same loop (``[designer]``, ``[pool]``, ``[design]``
``memory``/``grounding``, ``[rewards] mode``): ``designer.source = "none"`` never designs (agent-only
GRPO on the fixed pool), ``"frozen"`` designs with a model that is never trained, and
``designer.train = false`` keeps the designer's samples out of the update.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from spade_rl.archive import Archive
from spade_rl.archive.sampling import draw_pool
from spade_rl.corpus import Corpus
from spade_rl.designer.gauge import Gauge, gaming_gauge
from spade_rl.designer.phase import design_environments
from spade_rl.designer.reward import STATE_FILE, DesignerRewards, add_designer_samples
from spade_rl.designer.warmup import WarmupPlay, warm_up
from spade_rl.envs.external import external_sandbox_config
from spade_rl.executor import make_executor
from spade_rl.loop.config import ConfigError, EvalConfig, RunConfig, load_run_config
from spade_rl.loop.distributed import Processes
from spade_rl.loop.guard import FLAG_REASONS, flag_changed
from spade_rl.loop.plays import group_specs
from spade_rl.loop.pool import retired_designs, seed_pool
from spade_rl.loop.probe import make_probe
from spade_rl.loop.rundir import RunDirectory
from spade_rl.loop.stages import (
    DESIGNED_FAMILY,
    Design,
    PlayedEnv,
    PlayTag,
    TrainingBatch,
    UpdateResult,
    curriculum_metrics,
    format_metrics,
    iteration_metrics,
    merged_played,
)
from spade_rl.loop.updating import combine_step_metrics, plan_steps
from spade_rl.memory import PhaseMeter, release_unused_memory
from spade_rl.policy import Policy, make_policy
from spade_rl.policy.thinking import thinking_flag
from spade_rl.rewards import zscore_advantages
from spade_rl.rollout import run_episodes
from spade_rl.sandbox import Sandbox
from spade_rl.stats import bad_turn_share, play_stats
from spade_rl.train import sample_from_episode

log = logging.getLogger(__name__)


class SelfPlay:
    """A self-play run in ``run_dir``; ``resume=True`` continues from its last checkpoint."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        policy: Policy | None = None,
        designer_policy: Policy | None = None,  # who writes the designs (default: policy; see _make_designer)
    ):
        Processes.from_env().check_visible_gpus(config)  # several GPUs in one process: refused now
        self.config = config
        self.run_dir = Path(run_dir)
        self.next_iteration = 1
        self.files = RunDirectory.open(self.run_dir) if resume else RunDirectory.create(self.run_dir, config)
        self.policy = policy if policy is not None else make_policy(config.policy)
        # A server that cannot hold a whole episode would fail it mid-run (HTTP 400): refused now.
        self.policy.check_context(config.rollout.max_context_tokens, key="rollout.max_context_tokens")
        # Thinking on/off needs a template with the switch: refused now, not at the first design or turn.
        thinking_flag(self.policy, config.rollout.thinking, key="rollout.thinking")
        thinking_flag(self.policy, config.design.thinking, key="design.thinking")
        self.corpus = Corpus.from_config(config.corpus)
        # The designer's warm-up (from the cache after the first time): the starting weights of every role.
        play = WarmupPlay(config.sandbox, config.rollout)  # how warmup.measure_plays plays its candidates
        warmup = warm_up(self.policy, config.warmup, config.design, self.corpus, play)
        if warmup:
            self.files.write_warmup(warmup)
        # A frozen designer is copied before anything trains or a checkpoint is loaded: the starting weights.
        self.designer_policy = self._make_designer(designer_policy)
        self._eval_sandbox_owned: Sandbox | None = None
        # In process, through vLLM servers kept in step, or not at all (inference-only): loop/updating.py.
        from spade_rl.loop.updating import make_learner  # torch loads here

        self.learner = make_learner(config, self.policy)
        # Where environments are validated and played: here, or on Ray actors ([executor]).
        # (Workers preload the packages of the pool's GEM / TextArena games: spade_rl.envs.external.)
        self.executor = make_executor(
            config.executor, external_sandbox_config(config.sandbox, config.pool.packages)
        )
        self.executor.start()
        self.archive = Archive(self.files.archive_path, config.archive)
        # Designs held for a delayed reward (rewards.delay) and the learning-potential averages.
        self.designer_rewards = DesignerRewards(
            config.rewards, config.loop.regenerate_every, config.design.invalid
        )
        if resume:
            self._restore()
        seed_pool(self.archive, self.executor, config.pool, config.design_phase.validation)

    # --- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> SelfPlay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.executor.close()
        if self._eval_sandbox_owned is not None:
            self._eval_sandbox_owned.close()
        self.archive.close()
        self.learner.close()

    def iterations(self) -> Iterator[dict]:
        """Run the remaining iterations, yielding each one's metrics after it is recorded."""
        while self.next_iteration <= self.config.loop.iterations:
            metrics = self.iteration(self.next_iteration)
            self._record(metrics)
            yield metrics

    # --- one iteration ---------------------------------------------------------------------------------
    def iteration(self, i: int) -> dict:
        """SPADE's iteration ``i``, stage by stage (loop/stages.py); returns its metrics line."""
        cfg = self.config
        rng = random.Random(f"{cfg.loop.seed}:{i}")
        started = time.perf_counter()
        phase = PhaseMeter()  # each phase's seconds and largest resident size (time/*, memory/*)
        executor_before = dict(self.executor.stats)
        self._park_optimizer()  # its moments wait on disk while the iteration designs and plays

        # 1-3, 7. ground, design, validate, archive
        designs: list[Design] = []
        if cfg.designer.source != "none" and (i - 1) % cfg.loop.regenerate_every == 0:
            designer = self.designer_policy if self.designer_policy is not None else self.policy
            with phase("design"):
                designs = design_environments(
                    designer, self.corpus, self.archive, self.executor, cfg.design_phase, rng, i
                )

        # 4. play K without and K with the hint (new designs probed first with loop.probe_plays; designs
        # that loop.retire_after_plays retired are not drawn)
        retired = retired_designs(self.archive, cfg.loop.retire_after_plays)
        with phase("play"):
            played, play_counts = self._play_iteration(designs, rng, i, retired)

        # 5. rewards and advantages; 7. statistics into the archive (an environment played as several
        # groups, loop.pool_replace, adds them up; a resumed iteration's partial rows were discarded)
        for env in played:
            self.archive.record_stats(env.env_id, i, env.stats, mode="merge")
        # an environment that behaves otherwise in play than in validation leaves the pool (loop/guard.py)
        flags = flag_changed(
            self.archive, played, i, self._probe(i), cfg.design_phase.validation.max_trivial_win_rate
        )
        # the designs the agent won that a gate refuses on revalidation: counted, and paid the floor
        gauge = Gauge({}, frozenset())
        if cfg.loop.gaming_gauge and designs:
            validation = cfg.design_phase.question_validation
            gauge = gaming_gauge(designs, played, self.archive, self.executor, validation, i)
        batch = self._batch(designs, played, i, self.designer_rewards, gauge.refused)

        # 6. the GRPO update of the shared policy: one optimiser step, or loop.update_epochs passes in steps
        # of loop.groups_per_step groups
        with phase("update"):
            update = self._update(batch, random.Random(f"{cfg.loop.seed}:{i}:update"))

        frontier = (cfg.archive.frontier_low, cfg.archive.frontier_high)
        metrics = {
            "iteration": i,
            **iteration_metrics(designs, played, batch, update, frontier),
            **curriculum_metrics(designs, played, frontier),
            **play_counts,
            **format_metrics(played),
            **gauge.metrics,
            **phase.metrics,
        }
        if cfg.loop.retire_after_plays:
            now_retired = retired_designs(self.archive, cfg.loop.retire_after_plays)
            metrics["pool/retired"] = float(len(now_retired - retired))  # retired by this iteration's play
            metrics["pool/retired_total"] = float(len(now_retired))
        executor_after = self.executor.stats
        metrics["sandbox/timeouts"] = executor_after["timeouts"] - executor_before["timeouts"]
        metrics["guard/flagged"] = float(len(flags))  # environments the play-time guard took out of the pool
        for reason in FLAG_REASONS:  # and why
            metrics[f"guard/{reason}"] = float(sum(flag.reason == reason for flag in flags))
        if self.executor.kind == "ray":
            for key in ("actors_lost", "envs_lost", "retries"):
                metrics[f"executor/{key}"] = executor_after[key] - executor_before[key]
        metrics["time/iteration_s"] = time.perf_counter() - started
        metrics.update(phase.process())
        episodes = [e for p in played for e in p.nohint + p.hint]
        self.files.append_transcripts(i, episodes, cfg.loop.transcripts_per_iteration, rng)
        if cfg.eval.every > 0 and i % cfg.eval.every == 0:
            metrics.update(self._evaluate_iteration(i))  # after the update: the weights of iteration i
        return metrics

    def _park_optimizer(self) -> None:
        """train.offload_optimizer: the optimiser's state to the run directory until the next update
        (or checkpoint) reads it back."""
        if self.config.train.offload_optimizer:
            self.learner.park_optimizer_state(self.files.parked_optimizer_path)

    def _play_iteration(
        self, designs: list[Design], rng: random.Random, iteration: int, retired: set[int]
    ) -> tuple[list[PlayedEnv], dict[str, float]]:
        """The iteration's play: with ``loop.probe_plays`` a probe group of each new valid design first (a
        rollout of its own), then full groups for the designs whose probe won at least ``probe_min_wins``,
        those held for a delayed reward and the pool (:meth:`_choose_envs`). Returns the groups and their
        counts (``probe/*``, ``pool/groups``: groups drawn from the pool's older entries)."""
        loop = self.config.loop
        held = self.designer_rewards.to_play(iteration)
        new = list(dict.fromkeys(d.env_id for d in designs if d.valid))
        probed: list[PlayedEnv] = []
        promoted = None
        if loop.probe_plays and new:
            probed = self._play(new, rng, iteration, probe=True)
            promoted = [p.env_id for p in probed if sum(e.won for e in p.nohint) >= loop.probe_min_wins]
        chosen = self._choose_envs(designs, rng, held, promoted=promoted, retired=retired)
        older = sum(env_id not in {*new, *held} for env_id in chosen)
        counts: dict[str, float] = {"pool/groups": float(older)}
        if loop.probe_plays:
            counts["probe/designs"] = float(len(probed))
            counts["probe/promoted"] = float(len(promoted or []))
        return probed + self._play(chosen, rng, iteration), counts

    def _choose_envs(
        self,
        designs: list[Design],
        rng: random.Random,
        held: list[int] = (),
        *,
        promoted: list[int] | None = None,
        retired: set[int] = frozenset(),
    ) -> list[int]:
        """New valid designs first (with a probe, ``promoted``: those whose probe passed), then those
        ``held`` for a delayed reward in their window (the reference plays a window's environments in every
        rollout of it), then the frontier-weighted pool, up to ``envs_per_iteration``. ``loop.pool_share``
        keeps the last ``loop.pool_groups`` slots for the pool's older entries (not this iteration's designs,
        nor held ones); ``retired`` environments are never drawn. Where the pool has nothing left to draw,
        the designs fill the slots left."""
        loop = self.config.loop
        wanted = loop.envs_per_iteration
        new = [d.env_id for d in designs if d.valid]
        first = list(dict.fromkeys([*(new if promoted is None else promoted), *held]))
        chosen = first[: wanted - loop.pool_groups]
        if len(chosen) < wanted:
            setting = self.config.design.setting
            # With a share kept for the pool or a probe, this iteration's designs are not drawn again from
            # the pool (a design whose probe failed takes no full group); retired ones never are.
            exclude = set(retired)
            if loop.pool_share or promoted is not None:
                exclude |= {*new, *held}
            if not exclude:  # the archive's own draw
                if loop.pool_replace:  # each draw independent: an environment can fill several slots
                    more = wanted - len(chosen)
                    chosen += self.archive.sample_pool(more, rng, setting=setting, replace=True)
                else:
                    pool = self.archive.sample_pool(wanted, rng, setting=setting)
                    chosen += [env_id for env_id in pool if env_id not in chosen][: wanted - len(chosen)]
            else:
                weights = self.archive.pool_weights(setting=setting)
                if loop.pool_replace:
                    chosen += draw_pool(weights, wanted - len(chosen), rng, replace=True, exclude=exclude)
                else:
                    pool = draw_pool(weights, wanted, rng, exclude=exclude)
                    chosen += [env_id for env_id in pool if env_id not in chosen][: wanted - len(chosen)]
                # nothing left in the pool: the designs (and held ones) that the share kept out
                chosen += [env_id for env_id in first if env_id not in chosen][: wanted - len(chosen)]
        return chosen

    def _probe(self, iteration: int) -> Callable[[int], tuple[int, int]]:
        """The guard's probe of this iteration: validation's random policy played where and as training
        plays (loop/probe.py), at seeds of its own generator."""
        rng = random.Random(f"{self.config.loop.seed}:{iteration}:probe")
        validation, timeout_s = self.config.design_phase.validation, self.config.rollout.call_timeout_s
        return make_probe(self.executor, self.archive, rng, validation, timeout_s)

    def _play(
        self, env_ids: list[int], rng: random.Random, iteration: int, *, probe: bool = False
    ) -> list[PlayedEnv]:
        """One group per entry of ``env_ids`` (an id may come more than once: one slot each): K episodes
        without the hint and ``loop.hint_plays`` with it (none where the environment has no hint, or with
        ``loop.hint_plays_for = "designs"`` where it is not designed), all in one batched rollout. ``probe``:
        the groups of new designs' probes (``loop.probe_plays`` and ``probe_hint_plays``). A designed
        environment's plays share a seed as ``loop.design_group_seeds`` says, any other's as
        ``loop.group_seeds``."""
        loop = self.config.loop
        if probe:
            plays = {False: loop.probe_plays, True: loop.probe_hint_plays}
        else:
            plays = {False: loop.plays_per_env, True: loop.hint_plays}
        records = [self.archive.get(env_id) for env_id in dict.fromkeys(env_ids)]
        by_id = {r.env_id: r for r in records}
        max_turns = self.config.design_phase.validation.max_turns
        slots = [PlayTag(env_id, False, env_ids[:n].count(env_id)) for n, env_id in enumerate(env_ids)]
        specs = []
        for slot in slots:
            specs += group_specs(by_id[slot.env_id], plays, loop, max_turns, rng, slot)
        episodes = run_episodes(
            self.policy, self.executor, specs, self.config.rollout, seed=rng.randrange(2**31)
        )
        played = []
        for slot in slots:
            nohint = [e for e in episodes if e.spec.tag == slot]
            hint = [e for e in episodes if e.spec.tag == slot._replace(use_hint=True)]
            r = by_id[slot.env_id]
            family = DESIGNED_FAMILY if r.origin == "designer" else r.skill
            played.append(PlayedEnv(slot.env_id, nohint, hint, play_stats(nohint, hint), probe, family))
        return played

    def _batch(
        self,
        designs: list[Design],
        played: list[PlayedEnv],
        iteration: int = 1,
        rewards: DesignerRewards | None = None,
        gated: frozenset[int] = frozenset(),
    ) -> TrainingBatch:
        """Both roles' samples: the agent's no-hint episodes, one group per environment with z-scored
        returns; one reward per proposal that falls due (``rewards``: at once, or held for rewards.delay
        iterations; valid and played: regret and plateau; invalid: the penalty), centred per design phase and
        group, numbered after the agent's groups."""
        cfg = self.config
        drop = cfg.loop.drop_zero_signal_groups
        penalty = cfg.loop.format_penalty
        batch = TrainingBatch(designer_trains=cfg.designer.trains)
        for group, env in enumerate(played):
            returns = [e.return_ - penalty * bad_turn_share(e) if penalty else e.return_ for e in env.nohint]
            advantages = zscore_advantages(returns)
            batch.agent_groups += 1
            batch.agent_zero_signal += not advantages.has_signal
            if not advantages.has_signal and drop:
                continue
            usable = [(e, a) for e, a in zip(env.nohint, advantages.advantages, strict=True) if e.token_ids]
            batch.agent += [sample_from_episode(e, a, group) for e, a in usable]

        if rewards is None:  # nothing held from earlier iterations (a batch computed on its own)
            rewards = DesignerRewards(cfg.rewards, cfg.loop.regenerate_every, cfg.design.invalid)
        # one entry per environment: a design's probe and full group (or several pool draws) together
        last = iteration == cfg.loop.iterations
        due = rewards.step(designs, merged_played(played), iteration, last=last, gated=gated)
        if cfg.rewards.delay > 0:
            batch.designer_held, batch.designer_rewarded = len(rewards.held), len(due)
        batch.designer_metrics = rewards.metrics()
        add_designer_samples(batch, due, cfg, first_group=len(played))
        return batch

    def _update(self, batch: TrainingBatch, rng: random.Random | None = None) -> UpdateResult:
        """The batch's GRPO steps (none when it is empty): one step on all of it, or with
        ``loop.groups_per_step`` / ``update_epochs`` the steps of :func:`plan_steps` (``rng`` orders them)."""
        samples = batch.samples
        if not samples:
            return UpdateResult(skipped=True)
        loop = self.config.loop
        steps = plan_steps(samples, loop.groups_per_step, loop.update_epochs, rng or random.Random(0))
        clear = getattr(self.policy, "clear_prefix_cache", None)
        if callable(clear):
            # The weights are about to change: the cached keys/values would be stale after the update,
            # and emptied now they leave their memory (up to 1.4 GiB on the CPU default) to it.
            clear()
        release_unused_memory()  # what play freed goes back before the update allocates its own
        per_step = [self.learner.step(step) for step in steps]
        release_unused_memory()
        return UpdateResult(combine_step_metrics(per_step))

    # --- evaluation ----------------------------------------------------------------------------------
    def evaluate(self, config: EvalConfig, model: str = ""):
        """Evaluate the policy as it is now (greedy, ``config.max_new_tokens``) on ``config``'s suites,
        in the run's sandbox; returns the :class:`~spade_rl.evaluate.results.EvalResult`."""
        model = model or (self.config.policy.model or "smollm2-135m")
        self._park_optimizer()  # evaluation needs no optimiser state
        return evaluate_policy(self.policy, self._eval_sandbox(), config, model, self.config.policy.backend)

    def _evaluate_iteration(self, i: int) -> dict:
        """The in-loop evaluation after iteration ``i``: ``eval/iter-NNNN.json`` and its metrics."""
        phase = PhaseMeter()
        name = self.config.policy.model or "smollm2-135m"
        with phase("eval"):  # time/eval_s, memory/eval_peak_mib
            result = self.evaluate(self.config.eval, f"{name} after iteration {i} of {self.run_dir.name}")
            result.write(self.files.eval_path(i))
        return {**eval_metrics(result), **phase.metrics}

    def _eval_sandbox(self) -> Sandbox:
        """The sandbox of evaluations: the local executor's own, else (Ray) one started here."""
        sandbox = getattr(self.executor, "sandbox", None)
        if isinstance(sandbox, Sandbox):
            return sandbox
        if self._eval_sandbox_owned is None:
            self._eval_sandbox_owned = Sandbox(
                external_sandbox_config(self.config.sandbox, self.config.pool.packages)
            )
            self._eval_sandbox_owned.start()
        return self._eval_sandbox_owned

    def _make_designer(self, given: Policy | None) -> Policy | None:
        """Who writes the designs when it is not ``self.policy``: ``given`` (any source that designs;
        with designer.source = "policy" its designs still train the shared policy, so it must share
        the policy's tokenizer: a scripted designer in tests, the same model served elsewhere), else for
        designer.source = "frozen" the [designer.policy] model or a frozen copy of the starting weights."""
        designer = self.config.designer
        if designer.source == "none":
            if given is not None:
                raise ConfigError(
                    "a designer policy was given, but designer.source is 'none' (nothing designs)"
                )
            return None
        if given is not None:
            return given
        if designer.source == "policy":
            return None
        if designer.policy is not None:
            return make_policy(designer.policy)
        return frozen_copy(self.policy)

    def save_checkpoint(self) -> None:
        """Checkpoint the last recorded iteration if it has no checkpoint yet (a run stopped early)."""
        done = self.next_iteration - 1
        if done >= 1 and not self.files.has_checkpoint(done):
            self.files.checkpoint(done, self._save_state)

    # --- the run directory (loop/rundir.py) ---------------------------------------------------------------
    def _record(self, metrics: dict) -> None:
        """Metrics line first, then the checkpoint: on resume, lines after the checkpoint are dropped."""
        i = metrics["iteration"]
        self.files.append_metrics(metrics)
        if i % self.config.loop.checkpoint_every == 0 or i == self.config.loop.iterations:
            self.files.checkpoint(i, self._save_state)
        self.next_iteration = i + 1

    def _save_state(self, path: Path) -> None:
        """A checkpoint's contents: the learner in ``path`` and, beside it, the held designer rewards."""
        self.learner.save(path)
        self.designer_rewards.save(path.parent / STATE_FILE)

    def _load_state(self, path: Path) -> None:
        self.learner.load(path)
        self.designer_rewards.restore(path.parent / STATE_FILE)

    def _restore(self) -> None:
        done = self.files.restore(self._load_state)
        # what a stopped process parked between two updates: the run goes on from its checkpoint's state
        # (under several processes each parks to a file of its own, replaced when it parks again)
        self.files.parked_optimizer_path.unlink(missing_ok=True)
        removed = self.archive.discard_after(done)
        self.next_iteration = done + 1
        log.info(
            "resuming %s after iteration %d (%d partial environments discarded)", self.run_dir, done, removed
        )


def evaluate_policy(policy: Policy, sandbox: Sandbox, config: EvalConfig, model: str, backend: str):
    """``config``'s suites on ``policy`` (greedy at ``config.max_new_tokens``, or ``config.samples`` samples
    per item at ``config.temperature``), untrusted code in ``sandbox``: the evaluation of the loop and of
    ``spade-rl experiment``. Returns an ``EvalResult``."""
    from spade_rl.evaluate.runner import evaluate_with_config

    return evaluate_with_config(policy, sandbox, config, model=model, backend=backend)


def eval_metrics(result) -> dict:
    """``eval/<suite>/accuracy``, ``ci_low``, ``ci_high``, ``n`` and ``errors`` of every suite of an
    EvalResult, and with sampling its ``pass@k`` and ``sample_accuracy``."""
    metrics: dict = {}
    for name, suite in result.suites.items():
        low, high = suite.ci
        metrics[f"eval/{name}/accuracy"] = suite.accuracy
        metrics[f"eval/{name}/ci_low"] = low
        metrics[f"eval/{name}/ci_high"] = high
        metrics[f"eval/{name}/n"] = suite.n
        metrics[f"eval/{name}/errors"] = getattr(suite, "errors", 0)  # left out of the accuracy
        for k, value in (getattr(suite, "pass_at_k", None) or {}).items():
            metrics[f"eval/{name}/pass@{k}"] = value
        if getattr(suite, "sample_accuracy", None) is not None:
            metrics[f"eval/{name}/sample_accuracy"] = suite.sample_accuracy
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
