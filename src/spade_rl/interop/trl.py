"""Train with TRL's ``GRPOTrainer`` on the environments of a spade-rl archive, played in spade-rl's sandbox.

    from trl import GRPOConfig, GRPOTrainer
    from spade_rl.interop.trl import SandboxRollout, environment_return, load_pool
    from spade_rl.rollout import RolloutConfig
    from spade_rl.sandbox import Sandbox, SandboxConfig

    envs = load_pool("runs/r1")          # a run directory, its archive.sqlite, a JSONL export, or "reference"
    with Sandbox(SandboxConfig(pool_size=4)) as sandbox:
        rollout = SandboxRollout(envs, sandbox, RolloutConfig(max_turns=8, max_new_tokens=64))
        trainer = GRPOTrainer(
            model,
            reward_funcs=environment_return,
            args=GRPOConfig(num_generations=4, max_steps=100, ...),
            train_dataset=rollout.dataset(seeds=range(8)),     # one row per environment x seed
            processing_class=tokenizer,
            rollout_func=rollout,
        )
        trainer.train()

``examples/trl_grpo_archive.py`` is the same as a command. With a tool-calling model,
``environment_factory=SandboxEnvironments(envs, sandbox)`` and its ``dataset(seeds)`` replace the rollout
(no ``reward_funcs``: each environment's ``get_reward`` is the episode's return).

**Which TRL mechanism, and why.** TRL 1.16 documents two for multi-turn environments, and both are here.
``rollout_func`` (:class:`SandboxRollout`, the one to use by default) is TRL's "write the generation and
environment loop yourself": it plays each episode with :func:`spade_rl.rollout.run_episodes`, the loop
spade-rl trains with, and hands TRL what that loop records, token for token; it works with any causal
model and chat template, and the action is free text (``\\boxed{...}`` in games) as in spade-rl.
``environment_factory`` (:class:`SandboxEnvironments`, what TRL's guides recommend for tool-using agents)
exposes the environment's methods as *tools*: TRL generates, the model acts by calling the tool ``act``,
and TRL refuses a chat template that cannot render tool calls
(``trl.chat_template_utils.supports_tool_calling``; SmolLM2, spade-rl's default model, is refused). Use it
with a model that calls tools (Qwen2.5, Qwen3, Llama 3.1 ...).

**What TRL receives.** ``GRPOTrainer`` calls ``rollout(prompts, trainer)`` with its batch of prompts (each
repeated ``num_generations`` times, one after the other: a GRPO group). A prompt names one episode,
``"<env>/seed=<seed>"`` (:meth:`SandboxRollout.dataset` writes them); every copy in a group plays the
same environment from the same seed, so the group's baseline compares plays of one starting state. The
answer has one row per prompt:

- ``prompt_ids``: the first prompt (the setting's system prompt and the environment's first observation),
- ``completion_ids``: everything after it, the model's turns and the environment's observations between,
- ``env_mask``: 1 on the tokens the model sampled, 0 on the chat template's and the environment's (TRL
  keeps those out of the loss: ``tool_mask``),
- ``logprobs``: the sampler's log-probability of each model token (0.0 on the others),
- ``episode_return`` (the episode's return: its final reward, 0 when it did not terminate), and
  ``episode_won``, ``episode_turns``, ``episode_stop_reason``, ``episode_error``, which TRL passes on to
  the reward functions. :func:`environment_return` is the reward function that returns the return and
  logs ``env/win_rate``, ``env/mean_turns`` and ``env/env_error_rate``.

An episode that never reached the model (the environment failed to open or reset, or its first prompt
is too long) still answers a row, so that TRL's groups stay whole: one end-of-sequence token with
``env_mask`` 0 (nothing to train) and return 0, as spade-rl's own loop counts it.

**Generation.** The trainer's model generates in this process, through
:class:`~spade_rl.policy.transformers_backend.TransformersPolicy` (a new one per call: its prefix cache
holds keys and values of the weights it generated with). It samples at ``GRPOConfig.temperature`` and
``top_p``, which replace the rollout config's: TRL's loss scores tokens at that temperature. Options of
TRL's own generation that this loop does not apply (``use_vllm``, ``top_k``, ``min_p``,
``repetition_penalty``) are refused rather than ignored; to generate elsewhere (vLLM servers kept in step
with the trainer), pass ``policy=`` a :class:`~spade_rl.policy.Policy` that serves the trainer's current
weights (also under DeepSpeed ZeRO-3 or FSDP, where this process holds only a shard of the model). Under
several processes each plays its own slice of the batch, in its own sandbox. With ``action_stop`` set,
``GRPOConfig.mask_truncated_completions`` is refused: a turn that ends on its stop string ("}") instead of
an end-of-sequence token would be taken for truncated and its episode left out of the loss.

**The sandbox.** Every environment (generated code) runs only in :class:`spade_rl.sandbox.Sandbox`; this
module never imports or executes it. A failure of an environment (a timeout, a crash, a broken answer)
ends that episode with ``stop_reason`` "env_error" and the error in ``episode_error``, never the batch.
One batch holds at most ``SandboxConfig.max_workers`` distinct environments.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_rl.envs.contract import ContractViolation, check_reset_value, check_step_value
from spade_rl.evaluate.envs_suite import HeldOutEnv, load_environments
from spade_rl.rollout import Episode, EpisodeSpec, RolloutConfig, Turn, run_episodes

if TYPE_CHECKING:
    from datasets import Dataset

    from spade_rl.executor import Executor
    from spade_rl.policy import Policy, TransformersConfig
    from spade_rl.sandbox import Sandbox

log = logging.getLogger(__name__)

SEED_SEPARATOR = "/seed="
# GRPOConfig fields whose non-default values this rollout would not honour: (name, default).
_UNSUPPORTED_SAMPLING = (("top_k", 0), ("min_p", None), ("repetition_penalty", 1.0))
_MAX_SEEDS = 1_000_000


def load_pool(source: str | Path, ids: Iterable[int | str] = ()) -> list[HeldOutEnv]:
    """The valid environments of ``source``: a run directory, an ``archive.sqlite`` file, a JSONL export
    (``spade-rl envs export``), or "reference" (the built-in environments). ``ids`` keeps only those
    environment ids (names for "reference"). Each keeps the constructor arguments it was validated with.
    Raises ``ValueError`` saying what is wrong with ``source`` or ``ids``."""
    wanted = tuple(str(i) for i in ids)
    try:
        return load_environments(str(source), wanted)
    except ValueError as exc:
        # The loader words its errors for `spade-rl eval` options (envs.source, envs.envs).
        message = re.sub(r"^option envs\.\w+: ", "", str(exc))
        raise ValueError(f"cannot load environments from {str(source)!r}: {message}") from None


def episode_prompt(env: HeldOutEnv, seed: int) -> str:
    """The dataset prompt that names one episode: ``"<label>/seed=<seed>"`` (``"env7/seed=3"``)."""
    return f"{env.label}{SEED_SEPARATOR}{seed}"


class SandboxRollout:
    """TRL's ``rollout_func``: plays the episodes a batch of prompts names, in the sandbox, multi-turn.

    ``envs`` are the environments to train on (:func:`load_pool`); ``sandbox`` runs them (a started
    :class:`~spade_rl.sandbox.Sandbox`, or an executor of :mod:`spade_rl.executor`); ``config`` is how
    episodes are played (turns, tokens per turn, context, timeouts, system prompts, forced openings);
    ``seed`` seeds the sampling of every call (the same seed, model and batch give the same episodes on
    CPU). ``policy`` replaces generation with the trainer's model (see the module docstring);
    ``generation`` configures that in-process generation (batch size, prefix cache, autocast).

    After each call, ``episodes`` holds the episodes it played, in the order of its rows.
    """

    def __init__(
        self,
        envs: Sequence[HeldOutEnv],
        sandbox: Sandbox | Executor,
        config: RolloutConfig | None = None,
        *,
        seed: int = 0,
        policy: Policy | None = None,
        generation: TransformersConfig | None = None,
    ) -> None:
        if not envs:
            raise ValueError("SandboxRollout needs at least one environment (load_pool gives them)")
        self.envs = list(envs)
        self._by_label: dict[str, HeldOutEnv] = {}
        for env in self.envs:
            if not isinstance(env, HeldOutEnv):
                raise TypeError(f"SandboxRollout takes HeldOutEnv items (load_pool gives them), got {env!r}")
            if SEED_SEPARATOR in env.label:
                raise ValueError(f"environment label {env.label!r} must not contain {SEED_SEPARATOR!r}")
            if env.label in self._by_label:
                raise ValueError(f"two environments have the label {env.label!r}; labels name episodes")
            self._by_label[env.label] = env
        self.sandbox = sandbox
        self.config = config if config is not None else RolloutConfig()
        self._rng = random.Random(seed)
        self._policy = policy
        self._generation = generation
        self.episodes: list[Episode] = []

    def dataset(self, seeds: int | Iterable[int] = 1) -> Dataset:
        """The training prompts: one row per environment and seed (``seeds``: a count, ``range(n)``, or
        the seeds themselves), environment by environment. Columns: ``prompt`` (the episode's name, what
        this rollout reads), and ``env``, ``seed``, ``setting`` (passed on to reward functions)."""
        from datasets import Dataset

        chosen = _seeds(seeds)
        rows = [(env, seed) for env in self.envs for seed in chosen]
        return Dataset.from_dict(
            {
                "prompt": [episode_prompt(env, seed) for env, seed in rows],
                "env": [env.label for env, _ in rows],
                "seed": [seed for _, seed in rows],
                "setting": [env.setting for env, _ in rows],
            }
        )

    def episode_specs(self, prompts: Sequence[Any]) -> list[EpisodeSpec]:
        """The episode each prompt names (without the hint: the agent trains as it is evaluated)."""
        specs = []
        for prompt in prompts:
            env, seed = self._parse(prompt)
            specs.append(
                EpisodeSpec(
                    env.source,
                    seed=seed,
                    setting=env.setting,
                    env_kwargs=dict(env.env_kwargs or {}),
                    tag=(env.label, seed),
                )
            )
        return specs

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        """Play one episode per prompt and answer TRL's rollout dict (see the module docstring)."""
        specs = self.episode_specs(prompts)
        if getattr(trainer, "mask_truncated_completions", False) and any(self.config.action_stop.values()):
            raise ValueError(
                "GRPOConfig.mask_truncated_completions would drop every episode whose last turn ended on "
                f"a stop string of rollout action_stop {self.config.action_stop}: set it to False, or "
                "action_stop = {} (turns then end with the end-of-sequence token)"
            )
        policy = self._policy if self._policy is not None else self._trainer_policy(trainer)
        config = _sampling_of(trainer, self.config)
        self.episodes = run_episodes(policy, self.sandbox, specs, config, seed=self._rng.randrange(2**31))
        eos = _end_token(policy)
        rows = [episode_row(episode, eos) for episode in self.episodes]
        played = len(self.episodes)
        log.info(
            "played %d episodes: %d won, %d environment failures, %.2f turns on average",
            played,
            sum(e.won for e in self.episodes),
            sum(e.stop_reason == "env_error" for e in self.episodes),
            sum(len(e.turns) for e in self.episodes) / max(1, played),
        )
        return {key: [row[key] for row in rows] for key in ROW_KEYS}

    def _parse(self, prompt: Any) -> tuple[HeldOutEnv, int]:
        if not isinstance(prompt, str):
            raise ValueError(
                f"SandboxRollout reads prompts that name an episode, '<env>{SEED_SEPARATOR}<seed>' "
                f"(SandboxRollout.dataset writes them); got a {type(prompt).__name__}: {str(prompt)[:80]!r}"
            )
        label, separator, seed = prompt.rpartition(SEED_SEPARATOR)
        env = self._by_label.get(label)
        if not separator or env is None or not seed.isdigit():
            known = ", ".join(list(self._by_label)[:8]) + (", ..." if len(self._by_label) > 8 else "")
            raise ValueError(
                f"prompt {prompt[:80]!r} does not name an episode of this pool: write "
                f"'<env>{SEED_SEPARATOR}<seed>' with one of the environments {known} and a seed >= 0 "
                "(SandboxRollout.dataset writes them)"
            )
        return env, int(seed)

    def _trainer_policy(self, trainer: Any) -> Policy:
        from spade_rl.policy.transformers_backend import TransformersPolicy

        if getattr(trainer, "use_vllm", False):
            raise ValueError(
                "SandboxRollout generates with the trainer's model in this process, so GRPOConfig.use_vllm "
                "would be ignored: set use_vllm=False, or pass SandboxRollout(policy=...) a spade_rl Policy "
                "that serves the trainer's current weights (spade_rl.policy.ServerPolicy with weight sync)"
            )
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        return TransformersPolicy(model, tokenizer, self._generation)


# The keys of one row of the rollout's answer, in TRL's names where TRL reads them.
ROW_KEYS = (
    "prompt_ids",
    "completion_ids",
    "logprobs",
    "env_mask",
    "episode_return",
    "episode_won",
    "episode_turns",
    "episode_stop_reason",
    "episode_error",
)


def episode_row(episode: Episode, eos_token_id: int) -> dict[str, Any]:
    """One row of TRL's rollout dict from an episode: the first prompt, then the rest of the conversation
    with its mask and log-probs. An episode with nothing after its first prompt (it never reached the
    model) gets one end-of-sequence token with mask 0, so that it trains nothing."""
    cut = episode.prompt_length
    prompt = list(episode.token_ids[:cut]) or [eos_token_id]
    completion = list(episode.token_ids[cut:])
    mask = list(episode.mask[cut:])
    logprobs = [float(x) for x in episode.logprobs[cut:]]
    if not completion:
        completion, mask, logprobs = [eos_token_id], [0], [0.0]
    return {
        "prompt_ids": prompt,
        "completion_ids": completion,
        "logprobs": logprobs,
        "env_mask": mask,
        "episode_return": float(episode.return_),
        "episode_won": bool(episode.won),
        "episode_turns": len(episode.turns),
        "episode_stop_reason": episode.stop_reason,
        "episode_error": episode.error,
    }


def environment_return(
    *,
    episode_return: list[float] | None = None,
    episode_won: list[bool] | None = None,
    episode_turns: list[int] | None = None,
    episode_stop_reason: list[str] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **_trl_columns: Any,
) -> list[float]:
    """TRL reward function: each row's episode return, as :class:`SandboxRollout` recorded it. It also
    logs ``env/win_rate``, ``env/mean_turns`` and ``env/env_error_rate`` through TRL's ``log_metric``.
    (TRL calls a reward function with every column of the batch by name: the others are not used.)"""
    if episode_return is None:
        raise ValueError(
            "environment_return reads the episode_return column that SandboxRollout answers: pass "
            "rollout_func=SandboxRollout(...) to the GRPOTrainer (with environment_factory, the "
            "environments' get_reward is the reward: no reward function is needed)"
        )
    rewards = [float(r) for r in episode_return]
    if log_metric is not None and rewards:
        n = len(rewards)
        if episode_won is not None:
            log_metric("env/win_rate", sum(map(bool, episode_won)) / n)
        if episode_turns is not None:
            log_metric("env/mean_turns", sum(episode_turns) / n)
        if episode_stop_reason is not None:
            log_metric("env/env_error_rate", sum(r == "env_error" for r in episode_stop_reason) / n)
    return rewards


def _seeds(seeds: int | Iterable[int]) -> list[int]:
    if isinstance(seeds, bool):
        raise ValueError(f"seeds must be a count or a list of seeds, got {seeds!r}")
    if isinstance(seeds, int):
        if not 1 <= seeds <= _MAX_SEEDS:
            raise ValueError(f"seeds must be a count from 1 to {_MAX_SEEDS} or a list of seeds, got {seeds}")
        return list(range(seeds))
    chosen = list(seeds)
    bad = [s for s in chosen if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if not chosen or bad:
        raise ValueError(f"seeds must be a non-empty list of integers >= 0, got {chosen[:10]!r}")
    return chosen


def _sampling_of(trainer: Any, config: RolloutConfig) -> RolloutConfig:
    """``config`` sampling at the trainer's temperature and top_p; refuses TRL sampling options that the
    rollout's sampling does not have, rather than leaving the samples and TRL's scoring of them apart."""
    args = trainer.args
    for name, default in _UNSUPPORTED_SAMPLING:
        value = getattr(args, name, default)
        if value is not None and value != default:  # None: the option is off
            raise ValueError(
                f"GRPOConfig.{name} = {value!r} is not applied by spade-rl's rollout (it samples with "
                f"temperature and top_p only): leave {name} at {default!r}"
            )
    return dataclasses.replace(config, temperature=float(args.temperature), top_p=float(args.top_p))


def _end_token(policy: Policy) -> int:
    tokenizer = policy.tokenizer
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ValueError("the policy's tokenizer names no end-of-sequence token (eos_token_id)")
    return int(eos)


# --- environment_factory: the environment as a tool, for models that call tools ------------------------

TOOL_INSTRUCTIONS = (
    "You are playing a text environment. Each turn, call the tool `act` with your action, written as the "
    "environment asks for it; the tool answers with what the environment says next. Stop when it says "
    "the episode is over.\n\n"
)


class SandboxEnvironments:
    """TRL's ``environment_factory`` for the same pool, for models whose chat template calls tools (TRL
    refuses others): ``GRPOTrainer(..., environment_factory=envs, train_dataset=envs.dataset(8))``.

    Each call gives a :class:`SandboxEnvironment`, whose one tool, ``act(action)``, is one step of the
    episode in the sandbox; TRL resets it with a dataset row (its ``env`` and ``seed``) and scores it
    with its ``get_reward`` (the episode's return). ``config`` gives the step deadline, the cut of long
    observations, the reward range, ``max_turns`` and the environment's time budget; generation is TRL's.
    """

    def __init__(
        self, envs: Sequence[HeldOutEnv], sandbox: Sandbox | Executor, config: RolloutConfig | None = None
    ):
        self._rollout = SandboxRollout(envs, sandbox, config)  # the same checks of the pool and its names
        self.sandbox = sandbox
        self.config = self._rollout.config

    def __call__(self) -> SandboxEnvironment:
        return SandboxEnvironment(self)

    def dataset(self, seeds: int | Iterable[int] = 1) -> Dataset:
        """One row per environment and seed: ``prompt`` (the instructions, as a user message: TRL appends
        the first observation), and ``env``, ``seed``, ``setting`` (what ``reset`` reads)."""
        rows = self._rollout.dataset(seeds)
        return rows.map(lambda row: {"prompt": [{"role": "user", "content": TOOL_INSTRUCTIONS}]})

    def spec(self, env: str, seed: int) -> EpisodeSpec:
        return self._rollout.episode_specs([f"{env}{SEED_SEPARATOR}{seed}"])[0]


class SandboxEnvironment:
    """One episode at a time in the sandbox, driven by TRL's tool calls. Nothing the environment returns
    raises here: a failure ends the episode (``stop_reason`` "env_error", ``error``) and the tool says so.
    TRL exposes every public method but ``reset`` and ``get_reward`` as a tool: the rest is private."""

    def __init__(self, pool: SandboxEnvironments):
        self._pool = pool
        self._handle: Any = None
        self.episode: Episode | None = None

    def reset(self, env: str | None = None, seed: int = 0, **_row: Any) -> str:
        """Start the episode a dataset row names (its ``env`` and ``seed`` columns); returns the first
        observation, or what failed."""
        if env is None:
            raise ValueError(
                "SandboxEnvironment.reset needs the row's env column (SandboxEnvironments.dataset)"
            )
        self._close()
        config = self._pool.config
        self.episode = episode = Episode(self._pool.spec(env, int(seed)))
        spec = episode.spec
        [opened] = self._pool.sandbox.open_many([(spec.source, spec.env_kwargs)], config.call_timeout_s)
        episode.env_seconds += opened.elapsed_s
        if not opened.ok:
            return self._fail(f"open: {opened.reason}: {opened.error}")
        self._handle = opened.value
        [result] = self._pool.sandbox.call_many(
            [(self._handle, "reset", {"seed": spec.seed})], config.call_timeout_s
        )
        episode.env_seconds += result.elapsed_s
        try:
            observation, _ = check_reset_value(result.value) if result.ok else (None, None)
        except ContractViolation as exc:
            return self._fail(f"reset: {exc}")
        if observation is None:
            return self._fail(f"reset: {result.reason}: {result.error}")
        episode.messages = [{"role": "user", "content": _cut(observation, config.max_observation_chars)}]
        return episode.messages[0]["content"]

    def act(self, action: str) -> str:
        """Take one action in the environment.

        Args:
            action: The action, written the way the environment asks for it.

        Returns:
            What the environment answers: its next observation, and whether the episode is over.
        """
        episode, config = self.episode, self._pool.config
        if episode is None or episode.stop_reason or self._handle is None:
            return "The episode is over: no more actions are taken."
        action = action if isinstance(action, str) else str(action)
        [result] = self._pool.sandbox.call_many(
            [(self._handle, "step", {"action": action})], config.call_timeout_s
        )
        episode.env_seconds += result.elapsed_s
        if not result.ok:
            return self._fail(f"step: {result.reason}: {result.error}")
        try:
            step = check_step_value(result.value, config.reward_range)
        except ContractViolation as exc:
            return self._fail(f"step: {exc}")
        observation = _cut(step.observation, config.max_observation_chars)
        episode.turns.append(Turn(action, observation, step.reward, step.terminated, step.truncated, "stop"))
        if step.terminated or step.truncated:
            episode.stop_reason = "terminated" if step.terminated else "truncated"
        elif len(episode.turns) >= config.max_turns:
            episode.stop_reason = "max_turns"
        elif episode.env_seconds > config.episode_env_budget_s:
            return self._fail(f"time_budget: the environment took {episode.env_seconds:.3g} s")
        if episode.stop_reason:
            self._close()
            return f"{observation}\n\nThe episode is over."
        return observation

    def get_reward(self) -> float:
        """The episode's return: its final reward when it terminated, else 0."""
        return float(self.episode.return_) if self.episode is not None else 0.0

    def _fail(self, error: str) -> str:
        self.episode.stop_reason = "env_error"
        self.episode.error = error[:2000]
        self._close()
        return f"The environment failed ({error[:200]}). The episode is over."

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} characters cut]"
