"""Multi-turn episodes, many at once: one batched generation per turn for every live episode.

    episodes = run_episodes(policy, sandbox, [EpisodeSpec(source, seed=0, hint="..."), ...], RolloutConfig())

Each turn, every live episode's conversation (kept as token ids) goes to the policy in one batch
(each episode with its own budget of new tokens: ``max_new_tokens``, or less where its context has less
room left), then every live episode steps in the sandbox (or an executor: ``spade_rl.executor``, which may
hold the environments on Ray actors) in one batch; episodes end independently
(terminated, truncated by the environment, out of turns, out of context, or an environment failure).
The hint, when on, is appended to the first observation. ``RolloutConfig.action_prefix`` can force
the opening of every agent turn per setting (the CPU default opens game turns with ``\\boxed{`` and
ends them at ``}`` with ``action_stop``: a 135M model then acts in every turn instead of restating the
observation); the forced tokens are environment tokens, and the action the environment receives is
the prefix plus what the model wrote. ``RolloutConfig.thinking`` sets the chat template's thinking
switch for the agent (``spade_rl.policy.thinking``); the model's thinking (``<think>...</think>``) is
cut from the action the environment receives but stays in the token ids, mask and log-probs (it is
trained) and in the transcript (``Episode.messages``, ``Turn.text``).

Token-level data for training: ``Episode.token_ids`` is the whole conversation as the model saw it,
``mask`` is 1 on tokens the model generated and 0 on prompt and environment tokens (the chat
template's headers, the observations), and ``logprobs`` holds the sampling log-probability of each
model token (0.0 elsewhere). The model's own tokens are kept exactly as sampled; the template tokens
that follow an assistant turn are computed once per tokenizer (``_TemplateTail``) so that the
conversation equals what the chat template would render.

Environment failures (a timeout, a crash, a malformed answer, an environment slower over the
episode than ``episode_env_budget_s``) end that episode with a recorded reason and never stop the
batch.

``play_episode`` plays one episode the same way with actions from a function instead of a policy
(a person typing them: ``spade-rl play --human``), without the token bookkeeping.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spade_rl.envs.contract import ContractViolation, check_reset_value, check_step_value
from spade_rl.policy import Policy, SamplingSettings
from spade_rl.policy.thinking import check_thinking_mode, opens_thinking, strip_thinking, thinking_flag
from spade_rl.rewards import episode_return
from spade_rl.sandbox import CallResult, EnvHandle, Sandbox

if TYPE_CHECKING:
    from spade_rl.executor import Executor

log = logging.getLogger(__name__)

SYSTEM_PROMPTS = {
    "games": (
        "You are playing a text game. Read the observation, think briefly, then give exactly one "
        "action in \\boxed{...}, in the format the game asks for."
    ),
    "tool_use": (
        'You solve tasks with tools. Call a tool with <tool_call>{"name": ..., "arguments": {...}}'
        "</tool_call>; the results come back as the next message. When you know the answer, reply "
        "with <answer>...</answer>."
    ),
}
STOP_REASONS = ("terminated", "truncated", "max_turns", "context", "env_error")


def invalid_action(info: dict) -> bool:
    """Whether a step's ``info`` says the action was invalid: ``info["status"] == "invalid"`` (the reference
    games) or ``info["invalid_action"] is True``. Optional: an environment that says neither is read as
    accepting every action (its illegal-action rate is 0)."""
    status = info.get("status")
    return (type(status) is str and status == "invalid") or info.get("invalid_action") is True


@dataclass(frozen=True)
class RolloutConfig:
    max_turns: int = 25
    max_new_tokens: int = 256  # per turn
    max_context_tokens: int = 4096  # the whole conversation; an episode that outgrows it is truncated
    max_observation_chars: int = 4000  # longer observations are cut (a hostile env can return megabytes)
    temperature: float = 0.6
    top_p: float = 1.0
    reward_range: tuple[float, float] = (0.0, 1.0)
    call_timeout_s: float = 5.0  # the deadline of one reset or step
    # The environment's time over a whole episode (its reset and steps, as the sandbox measured them):
    # past it the episode ends as an environment failure ("time_budget"), so that an environment that
    # answers every step just under call_timeout_s cannot slow every turn of a batch to its pace.
    episode_env_budget_s: float = 20.0
    # Per setting ("games", "tool_use"): the system prompt of every episode. A table that names some
    # settings only keeps the default prompt of the others (rollout.system_prompts.games = "..." leaves
    # the tool-use prompt as it is).
    system_prompts: dict[str, str] = field(default_factory=lambda: dict(SYSTEM_PROMPTS))
    # Per setting: text put at the start of every agent turn (after the assistant header) before the
    # model continues, e.g. "\\boxed{" for games: the action is the prefix plus what the model writes.
    # The prefix tokens are environment tokens (mask 0): the model did not write them, nothing trains
    # on them. Empty (the paper's behaviour): the model writes the whole turn.
    action_prefix: dict[str, str] = field(default_factory=dict)
    # Per setting: stop strings that end an agent turn (kept in the action), e.g. ["}"] after a
    # "\\boxed{" prefix, so that a turn is the action and nothing after it.
    action_stop: dict[str, list[str]] = field(default_factory=dict)
    # The agent's thinking mode (spade_rl.policy.thinking): "template" (the chat template's default),
    # "on" or "off" (enable_thinking passed to a template that has the switch; refused otherwise).
    thinking: str = "template"

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_new_tokens", "max_context_tokens", "max_observation_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout {name} must be at least 1, got {getattr(self, name)}")
        for name in ("call_timeout_s", "episode_env_budget_s"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"rollout {name} must be a positive number of seconds, got {getattr(self, name)}"
                )
        if self.max_new_tokens >= self.max_context_tokens:
            raise ValueError("rollout max_new_tokens must be smaller than max_context_tokens")
        for name in ("system_prompts", "action_prefix", "action_stop"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(
                    f"rollout {name} must be a table of settings, got {getattr(self, name)!r}; "
                    f"allowed settings: {list(SYSTEM_PROMPTS)}"
                )
            unknown = sorted(set(getattr(self, name)) - set(SYSTEM_PROMPTS))
            if unknown:
                raise ValueError(
                    f"rollout {name} has settings {unknown}; allowed settings: {list(SYSTEM_PROMPTS)}"
                )
        for setting, prompt in self.system_prompts.items():
            if not isinstance(prompt, str):
                raise ValueError(f"rollout system_prompts.{setting} must be a string, got {prompt!r}")
        # the settings it does not name keep their default prompt (a frozen dataclass: set once, here)
        object.__setattr__(self, "system_prompts", {**SYSTEM_PROMPTS, **self.system_prompts})
        for setting, prefix in self.action_prefix.items():
            if not isinstance(prefix, str):
                raise ValueError(f"rollout action_prefix.{setting} must be a string, got {prefix!r}")
        for setting, stops in self.action_stop.items():
            if isinstance(stops, str) or not all(isinstance(s, str) and s for s in stops):
                raise ValueError(
                    f"rollout action_stop.{setting} must be a list of non-empty strings, got {stops!r}"
                )
        check_thinking_mode("rollout.thinking", self.thinking)
        forced = sorted(setting for setting, prefix in self.action_prefix.items() if prefix)
        if self.thinking == "on" and forced:
            # The prefix opens every turn with the action itself: no room to think before it.
            raise ValueError(
                f"rollout.thinking = 'on' lets the agent think before it acts, but rollout.action_prefix "
                f"forces the turn to open with the action for {forced}: set rollout.action_prefix = {{}} "
                "(and action_stop = {}), or thinking = 'off'"
            )


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: an environment source, its seed, and the hint (used when ``use_hint``)."""

    source: str
    seed: int = 0
    hint: str = ""
    use_hint: bool = False
    setting: str = "games"
    env_kwargs: dict = field(default_factory=dict)
    tag: Any = None  # the caller's label (for example the archive id); carried to the Episode


@dataclass(frozen=True)
class Turn:
    action: str  # what the environment received: the model's text without its thinking
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    finish_reason: str  # the generation's: stop, stop_string, length
    text: str = ""  # the model's whole text (action prefix and thinking included); "" when it is the action
    # The environment said the action was invalid (illegal or unreadable): its step's info held
    # "status": "invalid" (the reference games' convention) or "invalid_action": True (INVALID_INFO).
    invalid: bool = False


@dataclass
class Episode:
    spec: EpisodeSpec
    messages: list[dict] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    stop_reason: str = ""  # one of STOP_REASONS
    error: str = ""  # what failed, for env_error
    token_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_length: int = 0  # tokens of the first prompt (system + first observation)
    env_seconds: float = 0.0  # time the environment took to answer (open, reset and steps)

    @property
    def final_reward(self) -> float:
        return self.turns[-1].reward if self.turns else 0.0

    @property
    def truncated(self) -> bool:
        return self.stop_reason != "terminated"

    @property
    def return_(self) -> float:
        return episode_return(self.final_reward, self.truncated)

    @property
    def won(self) -> bool:
        return self.stop_reason == "terminated" and self.final_reward >= 1.0

    def append(self, ids: list[int], model: bool, logprobs: list[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.mask.extend([1 if model else 0] * len(ids))
        if model and logprobs is not None and len(logprobs) == len(ids):
            self.logprobs.extend(logprobs)
        else:
            self.logprobs.extend([0.0] * len(ids))


class _TemplateTail:
    """The template tokens after the end-of-turn token of an assistant message (ChatML: a newline).

    Found once by rendering a tiny conversation: the rendered assistant turn ends with the end token
    followed by the tail. ``thinking`` (the template's switch, or None) is what every render of the
    episode passes; ``opened``: whether the generation prompt leaves a ``<think>`` block open."""

    def __init__(self, policy: Policy, thinking: bool | None = None):
        probe = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        ids = policy.render(probe, add_generation_prompt=False, thinking=thinking)
        self.thinking = thinking
        self.opened = opens_thinking(policy, thinking)
        tokenizer = policy.tokenizer
        eos = getattr(tokenizer, "eos_token_id", None)
        ends = [i for i, t in enumerate(ids) if t == eos]
        if not ends:
            raise ValueError(
                "the chat template does not end an assistant turn with the end-of-sequence token"
            )
        self.eos = eos
        self.tail = ids[ends[-1] + 1 :]

    def after_turn(self, completion_ids: list[int]) -> list[int]:
        """Template tokens to append after a completion so the turn ends as the template writes it."""
        return ([] if completion_ids and completion_ids[-1] == self.eos else [self.eos]) + self.tail


def _first_message(observation: str, spec: EpisodeSpec) -> str:
    if spec.use_hint and spec.hint:
        return f"{observation}\n\nHint: {spec.hint}"
    return observation


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} characters cut]"


def run_episodes(
    policy: Policy,
    sandbox: Sandbox | Executor,
    specs: list[EpisodeSpec],
    config: RolloutConfig,
    seed: int = 0,
    on_turn: Callable[[int, Episode], None] | None = None,
) -> list[Episode]:
    """Play every spec to its end; one ``Episode`` per spec, in order. ``on_turn(index, episode)`` is
    called after each turn of each episode (and once at its start), to watch play as it happens."""
    rng = random.Random(seed)
    episodes = [Episode(spec) for spec in specs]
    thinking = thinking_flag(policy, config.thinking, key="rollout.thinking")
    tail = _TemplateTail(policy, thinking)
    handles: list[EnvHandle | None] = [None] * len(specs)
    try:
        opened = sandbox.open_many([(s.source, s.env_kwargs) for s in specs], config.call_timeout_s)
        live = []
        for i, result in enumerate(opened):
            handles[i] = _opened(episodes[i], result)
            if handles[i] is not None:
                live.append(i)
        resets = sandbox.call_many(
            [(handles[i], "reset", {"seed": specs[i].seed}) for i in live], config.call_timeout_s
        )
        started = []
        for i, result in zip(live, resets, strict=True):
            episode = episodes[i]
            if not _begin(episode, result, config):
                continue
            prompt = policy.render(episode.messages, add_generation_prompt=True, thinking=thinking)
            episode.append(prompt, model=False)
            episode.prompt_length = len(episode.token_ids)
            if episode.prompt_length + config.max_new_tokens > config.max_context_tokens:
                episode.stop_reason = "context"
                continue
            started.append(i)
            if on_turn is not None:
                on_turn(i, episode)
        _play(policy, sandbox, episodes, handles, started, config, tail, rng, on_turn)
    finally:
        for handle in handles:
            if handle is not None:
                handle.close()
    return episodes


def _play(
    policy: Policy,
    sandbox: Sandbox | Executor,
    episodes: list[Episode],
    handles: list[EnvHandle | None],
    live: list[int],
    config: RolloutConfig,
    tail: _TemplateTail,
    rng: random.Random,
    on_turn: Callable[[int, Episode], None] | None,
) -> None:
    prefixes = _ActionPrefixes(policy, config)
    turn = 0
    while live:
        turn += 1
        for i in live:  # the forced start of the turn: environment tokens, not trained
            episodes[i].append(prefixes.ids(episodes[i].spec.setting), model=False)
        generations = _generate_turn(policy, episodes, live, config, rng)
        actions, texts = [], []
        for i, generation in zip(live, generations, strict=True):
            ids = list(generation.completion_token_ids or [])
            logprobs = list(generation.completion_logprobs) if generation.completion_logprobs else None
            episodes[i].append(ids, model=True, logprobs=logprobs)
            prefix = prefixes.text(episodes[i].spec.setting)
            text = prefix + generation.text
            episodes[i].messages.append({"role": "assistant", "content": text})  # the transcript: all of it
            texts.append(text)
            # What the environment reads. A forced opening starts the action itself: a <think> that the
            # generation prompt left open is not taken to run on through it.
            actions.append(strip_thinking(text, opened=tail.opened and not prefix))
        steps = sandbox.call_many(
            [(handles[i], "step", {"action": a}) for i, a in zip(live, actions, strict=True)],
            config.call_timeout_s,
        )
        still = []
        for i, generation, action, text, result in zip(live, generations, actions, texts, steps, strict=True):
            episode = episodes[i]
            finish = generation.finish_reason
            observation = _record_step(episode, result, action, finish, turn, config, text)
            if observation is None:
                continue
            if on_turn is not None:
                on_turn(i, episode)
            if episode.stop_reason:
                continue
            previous = list(episode.messages)
            episode.messages.append({"role": "user", "content": observation})
            suffix = tail.after_turn(list(generation.completion_token_ids or [])) + policy.render_suffix(
                previous, episode.messages, add_generation_prompt=True, thinking=tail.thinking
            )
            needed = len(suffix) + len(prefixes.ids(episode.spec.setting)) + 1
            if len(episode.token_ids) + needed > config.max_context_tokens:
                episode.stop_reason = "context"
                continue
            episode.append(suffix, model=False)
            still.append(i)
        live = still


def play_episode(
    sandbox: Sandbox | Executor,
    spec: EpisodeSpec,
    config: RolloutConfig,
    act: Callable[[Episode], str],
    on_turn: Callable[[Episode], None] | None = None,
) -> Episode:
    """One episode whose actions come from ``act(episode)`` instead of a policy: a person at a terminal
    (``spade-rl play --human``) or a script. The environment side is ``run_episodes``'s: the same
    opening, reset, hint, cuts, contract checks, time budget and stop reasons. There is no token
    bookkeeping (``token_ids``, ``mask`` and ``logprobs`` stay empty), hence no context limit, and the
    sampling settings, ``action_prefix`` and ``action_stop`` are not used: the action is what ``act``
    returns (each turn's ``finish_reason`` is "stop").

    ``act`` is called with the episode so far (``messages`` ends with the latest observation); an
    exception it raises ends the play, closes the environment and propagates. ``on_turn(episode)`` is
    called as ``run_episodes`` calls its ``on_turn``: once at the start, then after each turn.

    In two steps, for a caller that must know the episode opened before it acts (a verifiers seat, whose
    conversation should not open for an environment that never gave a first observation):
    ``episode, handle = open_episode(...)``, then ``play_opened(...)`` when ``handle`` is not None."""
    episode, handle = open_episode(sandbox, spec, config)
    if handle is None:
        return episode
    return play_opened(sandbox, episode, handle, config, act, on_turn)


def open_episode(
    sandbox: Sandbox | Executor, spec: EpisodeSpec, config: RolloutConfig
) -> tuple[Episode, EnvHandle | None]:
    """The first half of :func:`play_episode`: the environment opened and reset, the first messages in
    place. The handle is None when it did not open or reset (the episode then ended as an environment
    failure, and nothing is left open)."""
    episode = Episode(spec)
    [opened] = sandbox.open_many([(spec.source, spec.env_kwargs)], config.call_timeout_s)
    handle = _opened(episode, opened)
    if handle is None:
        return episode, None
    try:
        [reset] = sandbox.call_many([(handle, "reset", {"seed": spec.seed})], config.call_timeout_s)
        if not _begin(episode, reset, config):
            handle.close()
            return episode, None
    except BaseException:
        handle.close()
        raise
    return episode, handle


def play_opened(
    sandbox: Sandbox | Executor,
    episode: Episode,
    handle: EnvHandle,
    config: RolloutConfig,
    act: Callable[[Episode], str],
    on_turn: Callable[[Episode], None] | None = None,
) -> Episode:
    """The second half of :func:`play_episode`: the turns of an episode :func:`open_episode` opened, until
    it ends; ``handle`` is closed at the end, whatever happens."""
    try:
        if on_turn is not None:
            on_turn(episode)
        turn = 0
        while not episode.stop_reason:
            turn += 1
            action = act(episode)
            episode.messages.append({"role": "assistant", "content": action})
            [result] = sandbox.call_many([(handle, "step", {"action": action})], config.call_timeout_s)
            observation = _record_step(episode, result, action, "stop", turn, config)
            if observation is None:
                break
            if on_turn is not None:
                on_turn(episode)
            if not episode.stop_reason:
                episode.messages.append({"role": "user", "content": observation})
    finally:
        handle.close()
    return episode


def _opened(episode: Episode, result: CallResult) -> EnvHandle | None:
    """The environment's handle, or None when it did not open (the episode then ends as a failure)."""
    episode.env_seconds += result.elapsed_s
    if result.ok:
        return result.value
    _fail(episode, f"open: {result.reason}: {result.error}")
    return None


def _begin(episode: Episode, result: CallResult, config: RolloutConfig) -> bool:
    """The reset's answer checked and turned into the first messages (the system prompt, then the first
    observation with the hint when on); False when the reset failed (the episode then ends)."""
    episode.env_seconds += result.elapsed_s
    try:
        observation, _ = check_reset_value(result.value) if result.ok else (None, None)
    except ContractViolation as exc:
        _fail(episode, f"reset: {exc}")
        return False
    if observation is None:
        _fail(episode, f"reset: {result.reason}: {result.error}")
        return False
    spec = episode.spec
    system = config.system_prompts.get(spec.setting, config.system_prompts["games"])
    episode.messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": _cut(_first_message(observation, spec), config.max_observation_chars)},
    ]
    return True


def _record_step(
    episode: Episode,
    result: CallResult,
    action: str,
    finish_reason: str,
    turn: int,
    config: RolloutConfig,
    text: str = "",
) -> str | None:
    """The step's answer checked and recorded as a turn, and the episode's end decided (terminated,
    truncated, out of turns, over its time budget). Returns the observation, cut, or None when the step
    failed (the episode then ends with no new turn). ``text``: the model's whole text, when not the action."""
    episode.env_seconds += result.elapsed_s
    if not result.ok:
        _fail(episode, f"step: {result.reason}: {result.error}")
        return None
    try:
        step = check_step_value(result.value, config.reward_range)
    except ContractViolation as exc:
        _fail(episode, f"step: {exc}")
        return None
    observation = _cut(step.observation, config.max_observation_chars)
    whole = text if text != action else ""
    episode.turns.append(
        Turn(
            action,
            observation,
            step.reward,
            step.terminated,
            step.truncated,
            finish_reason,
            whole,
            invalid_action(step.info),
        )
    )
    if step.terminated or step.truncated:
        episode.stop_reason = "terminated" if step.terminated else "truncated"
    elif turn >= config.max_turns:
        episode.stop_reason = "max_turns"
    elif episode.env_seconds > config.episode_env_budget_s:
        _fail(
            episode,
            f"time_budget: the environment took {episode.env_seconds:.3g} s in {turn} steps, "
            f"over the episode's budget of {config.episode_env_budget_s:g} s "
            "(rollout.episode_env_budget_s)",
        )
    return observation


class _ActionPrefixes:
    """The forced start of an agent turn per setting (``RolloutConfig.action_prefix``), as text and as
    token ids (tokenised once, on its own: the ids are what the model sees before it continues)."""

    def __init__(self, policy: Policy, config: RolloutConfig):
        self._text = dict(config.action_prefix)
        tokenizer = policy.tokenizer
        self._ids = {
            setting: list(tokenizer(prefix, add_special_tokens=False)["input_ids"]) if prefix else []
            for setting, prefix in self._text.items()
        }

    def text(self, setting: str) -> str:
        return self._text.get(setting, "")

    def ids(self, setting: str) -> list[int]:
        return self._ids.get(setting, [])


def _generate_turn(
    policy: Policy, episodes: list[Episode], live: list[int], config: RolloutConfig, rng: random.Random
) -> list:
    """One generation per live episode: one batched call per distinct set of stop strings (one call when
    every live episode has the same setting, the usual case), results in the order of ``live``."""
    by_stops: dict[tuple[str, ...], list[int]] = {}
    for i in live:
        stops = tuple(config.action_stop.get(episodes[i].spec.setting, ()))
        by_stops.setdefault(stops, []).append(i)
    seed = rng.randrange(2**31)
    results: dict[int, Any] = {}
    for stops, members in by_stops.items():
        # Each episode's budget is its own room: one long episode does not cut the others' turns.
        budgets = [
            max(1, min(config.max_new_tokens, config.max_context_tokens - len(episodes[i].token_ids)))
            for i in members
        ]
        settings = SamplingSettings(
            max_new_tokens=max(budgets),
            temperature=config.temperature,
            top_p=config.top_p,
            seed=seed,
            stop=stops,
            include_stop_string=True,
        )
        generations = policy.generate_tokens(
            [episodes[i].token_ids for i in members], settings, budgets=budgets
        )
        results.update(zip(members, generations, strict=True))
    return [results[i] for i in live]


def _fail(episode: Episode, error: str) -> None:
    episode.stop_reason = "env_error"
    episode.error = error[:2000]
    log.info("episode %s ended by an environment failure: %s", episode.spec.tag, episode.error[:200])
