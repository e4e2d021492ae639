"""A verifiers seat as spade-rl's designer policy, and as its agent in one episode.

    designer = SeatPolicy(agents.proposer, loop)       # design_environments(designer, ...) in a worker thread
    episode, trace = await play_on_seat(agents.solver, spec, executor, rollout, pool)

spade-rl's design phase and play are synchronous (they run in worker threads here); a verifiers seat is a
coroutine API on the environment's event loop. The bridges run each model call on the seat's loop and wait
for it from the thread:

- ``SeatPolicy`` is a :class:`~spade_rl.policy.Policy` whose ``generate`` runs each chat as one turn of a
  seat (``agent.run`` on a task whose prompt is the chat). Like the openai backend it takes chats, not token
  prompts (``supports_token_prompts`` False): a forced opening (the question form's class line) is not
  sent, and the text is what the seat wrote. The seat's sampling (verifiers' ``[env.<seat>.sampling]`` or
  the run's) decides temperature and length; the trace of every call is kept by generation
  (``trace_of``), so that the environment can pay each design's own trace.
- ``play_on_seat`` plays one episode as :func:`spade_rl.rollout.play_episode` does (``open_episode``, then
  ``play_opened``): the loop's own opening, reset, hint, cuts, contract checks, time budget and stop
  reasons, taking each action from one turn of a seat's ``interaction`` (the environment speaks as the
  user: the first observation, with the hint when the spec says so, then each step's observation). The
  seat's reply is the action, without its thinking. A seat's call that fails raises ``SeatFailed``: the
  verifiers episode fails, and nothing of it is recorded as a play or a design.

``InlineChatHarness`` is the harness of every seat: one chat completion per segment through the rollout's
interception endpoint, in process. verifiers' built-in harnesses run a program that ``uv sync``s its
dependencies from the package index; this one fetches nothing and executes no model-written code (the
environment's code runs only in spade-rl's sandbox).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI
from verifiers.v1.dialects.chat import message_to_wire

from spade_rl.policy import Generation, Policy, SamplingSettings
from spade_rl.policy.base import check_chats
from spade_rl.policy.thinking import strip_thinking
from spade_rl.rollout import Episode, EpisodeSpec, RolloutConfig, open_episode, play_opened


class InlineChatHarnessConfig(vf.HarnessConfig):
    """The in-process harness takes no settings of its own."""


class InlineChatHarness(vf.Harness[InlineChatHarnessConfig]):
    """One chat completion per segment through the interception endpoint (which records the trace: its
    messages, and with verifiers' train client its token ids, masks and log-probs). Nothing is installed,
    fetched or executed; a resumed interaction relaunches on the conversation so far."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def setup(self, runtime: Any) -> None:
        return None

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_: Any):
        system, prompt = self.resolve_prompt(data)
        messages: list[dict] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt:
            messages += [message_to_wire(m) for m in prompt]
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            out = await client.chat.completions.create(model=ctx.model, messages=messages)
        finally:
            await client.close()
        return vf.ProgramResult(exit_code=0, stdout=out.choices[0].message.content or "", stderr="")


class CallData(vf.TaskData):
    """One model call of a designer seat: its chat is the task's system prompt and prompt."""

    purpose: str = "design"


class CallTask(vf.Task[CallData]):
    """A designer seat's call: judged by the environment (``finalize``), not by a reward of its own."""


class PlayData(vf.TaskData):
    """One episode of an agent seat: the environment opens the conversation (no prompt)."""

    env_id: int
    seed: int
    use_hint: bool


class PlayTask(vf.Task[PlayData]):
    """An agent seat's episode: its return is written by the environment (``finalize``)."""


def chat_task(chat: Sequence[dict], purpose: str, idx: int | None) -> CallTask:
    """The task whose conversation is ``chat``: its system message as the system prompt, the rest as the
    prompt (one user message as text, a longer conversation, a repair's, as messages)."""
    messages = list(chat)
    system = None
    if messages and messages[0].get("role") == "system":
        system, messages = str(messages[0].get("content") or ""), messages[1:]
    if len(messages) == 1 and messages[0].get("role") == "user":
        prompt: Any = str(messages[0].get("content") or "")
    else:
        prompt = [{"role": m["role"], "content": str(m.get("content") or "")} for m in messages]
    return CallTask(CallData(idx=idx, prompt=prompt, system_prompt=system, purpose=purpose))


class SeatPolicy(Policy):
    """spade-rl's :class:`Policy` over one verifiers seat, called from a worker thread (see the module
    docstring). ``purpose`` names the calls in their traces (``trace.info["spade"]["purpose"]``)."""

    supports_token_prompts = False

    def __init__(
        self,
        agent: Any,
        loop: asyncio.AbstractEventLoop,
        purpose: str,
        idx: int | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.agent = agent
        self.loop = loop
        self.purpose = purpose
        self.idx = idx
        self.stop = stop if stop is not None else threading.Event()  # set: waiting calls give up
        self.calls: list[tuple[Generation, Any]] = []  # (generation, its trace), in order of calls
        self._lock = threading.Lock()

    def generate(
        self, chats: Sequence[Sequence[dict]], settings: SamplingSettings, *, thinking: bool | None = None
    ) -> list[Generation]:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:  # it would wait for itself
            raise RuntimeError("SeatPolicy.generate is called from a worker thread, not from its event loop")
        futures = [
            asyncio.run_coroutine_threadsafe(self._call(chat), self.loop)
            for chat in check_chats(chats)
            for _ in range(settings.n)
        ]
        try:
            return [wait(future, self.stop, f"the {self.purpose} call") for future in futures]
        finally:
            for future in futures:
                future.cancel()  # a failed or stopped batch leaves no call running

    async def _call(self, chat: Sequence[dict]) -> Generation:
        trace = await self.agent.run(chat_task(chat, self.purpose, self.idx))
        trace.info["spade"] = {"purpose": self.purpose}
        check_call(trace, f"the {self.purpose} call")  # a failed call is not a design (nor a hint)
        generation = Generation(
            text=trace.last_reply,
            prompt_token_ids=None,
            completion_token_ids=None,
            completion_logprobs=None,
            finish_reason="length" if trace.is_truncated else "stop",
        )
        with self._lock:
            self.calls.append((generation, trace))
        return generation

    def trace_of(self, generation: Generation) -> Any | None:
        """The trace of the call that returned ``generation`` (the very object), or None."""
        with self._lock:
            return next((trace for g, trace in self.calls if g is generation), None)


class SeatFailed(RuntimeError):
    """A seat's model call failed (the provider, the harness, a timeout): the episode fails, and nothing of
    it is recorded as a play or a design (prime-rl drops a failed episode whole)."""


# Where a seat's exchange ended because of a limit, not a failure: the play ends as the loop's would
LIMITS = {
    "max_turns": "max_turns",
    "max_input_tokens": "context",
    "max_output_tokens": "context",
    "max_total_tokens": "context",
}


class _SeatStopped(Exception):
    """The seat ended the exchange at one of its limits before the game ended."""


def wait(future: concurrent.futures.Future, stop: threading.Event, what: str) -> Any:
    """``future.result()`` from a worker thread, given up (and the coroutine cancelled) once ``stop`` is set:
    a thread never outlives the episode that started it by more than a second."""
    while True:
        try:
            return future.result(timeout=1.0)
        except concurrent.futures.TimeoutError:
            if stop.is_set():
                future.cancel()
                raise SeatFailed(f"{what}: the episode was stopped") from None


def check_call(trace: Any, what: str) -> None:
    """Raise :class:`SeatFailed` when ``trace`` ended in a failure rather than an answer or a limit."""
    if not trace.ok and trace.stop_condition not in LIMITS:
        error = trace.last_error
        said = f"{error.type}: {error.message}"[:300] if error is not None else trace.stop_condition
        raise SeatFailed(f"{what} failed ({trace.stop_condition}): {said}")


async def play_on_seat(
    agent: Any,
    spec: EpisodeSpec,
    executor: Any,
    rollout: RolloutConfig,
    threads: concurrent.futures.Executor,
    *,
    env_id: int,
    idx: int | None = None,
) -> tuple[Episode, Any | None]:
    """One episode of ``spec`` on ``executor`` (spade-rl's sandbox), its actions from ``agent``'s turns;
    returns the episode (as ``run_episodes`` records one, without token ids) and the seat's trace.

    The environment is opened and reset first: one that fails there ends the episode as an environment
    failure (``env_error``, return 0, counted in the statistics and the designer's reward as the loop
    counts it) with no trace, because a seat's conversation with no turn would fail the whole verifiers
    episode (prime-rl drops an episode with an empty trajectory). A seat that stops at one of its limits
    ends the play as the loop's would (``max_turns``, or ``context`` for a token limit); a seat whose call
    fails raises :class:`SeatFailed`. Cancelled, the play's thread stops within a second."""
    loop = asyncio.get_running_loop()
    episode, handle = await loop.run_in_executor(threads, open_episode, executor, spec, rollout)
    if handle is None:
        return episode, None
    system = str(episode.messages[0]["content"])  # the system prompt the episode opened with (rollout)
    task = PlayTask(
        PlayData(
            idx=idx, prompt=None, system_prompt=system, env_id=env_id, seed=spec.seed, use_hint=spec.use_hint
        )
    )
    stop = threading.Event()
    try:
        async with agent.interaction(task) as interaction:
            trace = interaction.trace

            def act(current: Episode) -> str:
                if stop.is_set():
                    raise SeatFailed("the episode was stopped")
                observation = str(current.messages[-1]["content"])
                future = asyncio.run_coroutine_threadsafe(interaction.turn(observation), loop)
                segment = wait(future, stop, "the agent's turn")
                if segment.terminated:
                    check_call(trace, "the agent's turn")
                    raise _SeatStopped(LIMITS.get(trace.stop_condition or "", "max_turns"))
                return strip_thinking(segment.last_reply)

            def play() -> Episode:
                try:
                    return play_opened(executor, episode, handle, rollout, act)
                except _SeatStopped as stopped:
                    episode.stop_reason = str(stopped)
                    return episode

            running = loop.run_in_executor(threads, play)
            try:
                await asyncio.shield(running)
            except asyncio.CancelledError:
                stop.set()  # the thread gives up its wait within a second, and the environment is closed
                if not running.done():
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(asyncio.shield(running), 30)
                raise
    except BaseException:
        stop.set()
        handle.close()  # closing twice is harmless: play_opened closes it too
        raise
    trace.info["spade"] = {
        "purpose": "play",
        "env_id": env_id,
        "seed": spec.seed,
        "use_hint": spec.use_hint,
        "return": episode.return_,
        "won": episode.won,
        "turns": len(episode.turns),
        "stop_reason": episode.stop_reason,
        **({"error": episode.error} if episode.error else {}),
    }
    return episode, trace


def record_play(trace: Any) -> bool:
    """Write a play's return as its trace's reward (``return``) and its win and turns as metrics, from what
    :func:`play_on_seat` left on the trace; False when the trace is not a play."""
    info = trace.info.get("spade") or {}
    if info.get("purpose") != "play":
        return False
    trace.record_reward("return", float(info["return"]))
    trace.record_metric("won", float(info["won"]))
    trace.record_metric("turns", float(info["turns"]))
    return True
