"""spade-rl's environments over HTTP and WebSocket in the OpenEnv convention (``spade-rl envs serve``).

    spade-rl envs serve guess maze --port 8000          # reference environments
    spade-rl envs serve --archive runs/r1 --port 8000    # a run's valid environments (env<id>)

    from openenv.core.generic_client import GenericEnvClient          # OpenEnv's own client
    with GenericEnvClient(base_url="http://127.0.0.1:8000/envs/guess").sync() as env:
        result = env.reset(seed=3)                      # result.observation["text"]
        result = env.step({"message": "\\\\boxed{50}"})    # result.reward, result.done

Each environment ``NAME`` is served under ``/envs/NAME``: ``/ws`` (OpenEnv's session protocol, what
``EnvClient`` speaks: one environment instance per connection), ``POST /reset``, ``POST /step``,
``GET /state``, ``/schema``, ``/metadata`` and ``/health``; with a single environment served, the same
routes also answer at the root. ``GET /envs`` lists what is served. The messages are OpenEnv's
(:mod:`spade_rl.interop.openenv_models`); an action is ``{"message": "<text>"}``.

OpenEnv's HTTP ``/reset`` and ``/step`` are stateless (a fresh environment per request), which cannot
play a multi-turn game: here ``/reset`` without an ``episode_id`` is that (one fresh instance, reset,
closed), and a ``/reset`` with an ``episode_id`` opens an HTTP session that ``/step`` and ``/state``
with the same ``episode_id`` continue. HTTP has no "close": an HTTP episode's session ends as soon as its
episode is done (won, lost, out of turns or failed), so a trainer's finished episodes never hold the
server's capacity; its last state stays readable (``GET /state?episode_id=...``) in a record of the last
``FINISHED_KEPT`` finished episodes, which holds no sandbox and does not count against ``max_sessions``,
and a ``/reset`` with the same ``episode_id`` plays another. A WebSocket session is OpenEnv's: one
instance for the connection's life, episode after episode (a reset after ``done`` plays the next); it
ends when the client closes the connection.

Safety and bounds: the environments' code runs only in the sandbox. Every session (a WebSocket
connection or an HTTP episode) holds one sandbox of one worker, taken from a pool of warm ones and
given back when the session ends (the pool never holds more than ``max_sessions``: as many worker
processes at most, all stopped at shutdown); at most ``max_sessions`` exist at once, and one more is
refused (``CAPACITY_REACHED``, HTTP 503 with ``Retry-After``). A session idle for ``idle_timeout_s`` is
closed (its next message is answered ``SESSION_ERROR``). Every environment call has the deadline
``call_timeout_s`` (a step's ``timeout_s`` may shorten it). An environment that fails ends its episode
with ``done`` and the observation's ``error`` set, never a server error. Unknown environments are HTTP
404 (``FACTORY_ERROR`` over the WebSocket), malformed actions HTTP 422 (``VALIDATION_ERROR``), steps out
of order HTTP 409 (``EXECUTION_ERROR``); a body that is not a JSON object of the request's form (not
JSON, not UTF-8, nested deeper than ``MAX_JSON_DEPTH``, the wrong types) HTTP 422, and one over
``MAX_BODY_BYTES`` HTTP 413, each saying what was wrong and what a request looks like. Shutting down
(SIGINT, SIGTERM) closes every session and stops every worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import signal
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from spade_rl import __version__
from spade_rl.envs import reference
from spade_rl.envs.sources import EnvEntry
from spade_rl.interop import openenv_models as m
from spade_rl.interop.gym_episode import SandboxedEpisode
from spade_rl.interop.openenv_socket import serve_socket
from spade_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20  # an HTTP body or WebSocket message (actions are at most max_action_chars)
FINISHED_KEPT = 4096  # finished HTTP episodes whose last state GET /state still answers (a few KiB each)
FINISHED = "the episode is over"  # why a finished HTTP episode's session was closed
EXAMPLES = {  # what a body of each request looks like, for the refusals
    m.ResetRequest: '{"seed": 3, "episode_id": "e1"} (both optional)',
    m.StepRequest: '{"action": {"message": "<the agent\'s text>"}, "episode_id": "e1"}',
}


@dataclass(frozen=True)
class ServeConfig:
    """The server's bounds. ``sandbox`` sets the isolation of every session's worker."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_sessions: int = 8
    idle_timeout_s: float = 300.0
    call_timeout_s: float = 5.0
    max_action_chars: int = 65536
    max_observation_chars: int = 65536
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def __post_init__(self) -> None:
        if not 1 <= self.max_sessions <= 1024:
            raise ValueError(f"max_sessions must be from 1 to 1024, got {self.max_sessions!r}")
        for name in ("idle_timeout_s", "call_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be from 0 to 65535, got {self.port!r}")
        if not 1 <= self.max_action_chars <= MAX_BODY_BYTES // 4:
            raise ValueError(f"max_action_chars must be from 1 to {MAX_BODY_BYTES // 4}")
        if not 64 <= self.max_observation_chars <= MAX_BODY_BYTES // 4:
            raise ValueError(f"max_observation_chars must be from 64 to {MAX_BODY_BYTES // 4}")


@dataclass(eq=False)
class Session:
    """One client's environment instance: a WebSocket connection, or an HTTP episode."""

    id: str
    entry: EnvEntry
    sandbox: Sandbox
    episode: SandboxedEpisode
    kind: str  # "ws", "http" or "once" (a stateless /reset)
    episode_id: str | None = None
    last_active: float = field(default_factory=time.monotonic)
    busy: int = 0
    expired: str = ""  # why the server closed it
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EnvServer:
    """The environments served, their sessions and the pool of sandboxes behind them (no HTTP here:
    :func:`create_app` maps requests onto these methods)."""

    def __init__(self, entries: list[EnvEntry], config: ServeConfig | None = None):
        if not entries:
            raise ValueError("no environment to serve")
        names = [e.name for e in entries]
        doubles = sorted({n for n in names if names.count(n) > 1})
        if doubles:
            raise ValueError(f"two environments are named {', '.join(doubles)}: served names must be unique")
        self.config = config or ServeConfig()
        self.entries = {e.name: e for e in entries}
        self.sessions: dict[str, Session] = {}
        self.http_sessions: dict[tuple[str, str], Session] = {}
        # (env name, episode_id) -> the last state of a finished HTTP episode, oldest first
        self.finished: OrderedDict[tuple[str, str], dict] = OrderedDict()
        # Warm sandboxes between sessions, each with the environment its worker last loaded ("" none):
        # a worker is bound to one source, so a session of another environment costs a new worker.
        self._idle: list[tuple[str, Sandbox]] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(self.config.max_sessions + 2, thread_name_prefix="spade-serve")
        self._sandbox_config = dataclasses.replace(
            self.config.sandbox, pool_size=1, max_workers=1, call_timeout_s=self.config.call_timeout_s
        )
        self._ids = itertools.count(1)
        self._closing = False
        self.closed_sessions = 0  # over the server's life

    # --- naming -----------------------------------------------------------------------------------
    def entry(self, name: str | None) -> EnvEntry:
        """The environment ``name`` (None: the only one served); ``Refused`` 404 otherwise."""
        if name is None:
            if len(self.entries) == 1:
                return next(iter(self.entries.values()))
            raise m.Refused(
                404,
                m.FACTORY_ERROR,
                f"{len(self.entries)} environments are served: use /envs/<name>/...; served: {self._names()}",
            )
        if name not in self.entries:
            raise m.Refused(404, m.FACTORY_ERROR, f"unknown environment {name!r}; served: {self._names()}")
        return self.entries[name]

    def _names(self) -> str:
        names = list(self.entries)
        return ", ".join(names[:30]) + (f" ... ({len(names)} in all)" if len(names) > 30 else "")

    # --- sessions ---------------------------------------------------------------------------------
    def open(self, entry: EnvEntry, kind: str) -> Session:
        """A new session on a warm sandbox; ``Refused`` 503 at ``max_sessions``."""
        with self._lock:
            if self._closing:
                raise m.Refused(503, m.SESSION_ERROR, "the server is shutting down")
            if len(self.sessions) >= self.config.max_sessions:
                raise m.Refused(
                    503,
                    m.CAPACITY_REACHED,
                    f"the server holds its maximum of {self.config.max_sessions} sessions (--max-sessions); "
                    "close one or retry later",
                    active_sessions=len(self.sessions),
                    max_sessions=self.config.max_sessions,
                )
            sandbox = self._take_idle(entry.name) or Sandbox(self._sandbox_config)
            episode = SandboxedEpisode(
                sandbox,
                entry,
                call_timeout_s=self.config.call_timeout_s,
                max_observation_chars=self.config.max_observation_chars,
            )
            session = Session(f"s{next(self._ids)}-{uuid.uuid4().hex[:8]}", entry, sandbox, episode, kind)
            self.sessions[session.id] = session
        log.info("session %s (%s) opened on %s", session.id, kind, entry.name)
        return session

    def close(self, session: Session, why: str = "") -> None:
        """End ``session``: its instance closed, its sandbox back in the pool (blocking: a thread's job).
        The session counts against ``max_sessions`` until its sandbox is back, so that no new session
        starts a sandbox meanwhile: the server never holds more than ``max_sessions`` sandboxes."""
        with self._lock:
            if session.closed:
                return
            session.closed, session.expired = True, why
            if session.episode_id is not None:
                key = (session.entry.name, session.episode_id)
                if self.http_sessions.get(key) is session:
                    del self.http_sessions[key]
        session.episode.close()
        with self._lock:
            if self._closing:
                session.sandbox.close()
            else:
                self._idle.append((session.entry.name, session.sandbox))
            self.sessions.pop(session.id, None)
            self.closed_sessions += 1
        log.info("session %s closed%s", session.id, f" ({why})" if why else "")

    def warm(self, count: int) -> None:
        """Start up to ``count`` sandboxes now (at most ``max_sessions``), so that the first sessions find
        warm workers; ``SandboxUnavailable`` when a required isolation layer is missing."""
        for _ in range(min(count, self.config.max_sessions) - len(self._idle)):
            sandbox = Sandbox(self._sandbox_config)
            sandbox.start()
            with self._lock:
                self._idle.append(("", sandbox))

    def _take_idle(self, name: str) -> Sandbox | None:
        """An idle sandbox for environment ``name`` (the caller holds the lock): one whose worker has it
        loaded, else one that has loaded nothing, else the one idle longest."""
        for wanted in (name, ""):
            for index in range(len(self._idle) - 1, -1, -1):
                if self._idle[index][0] == wanted:
                    return self._idle.pop(index)[1]
        return self._idle.pop(0)[1] if self._idle else None

    async def run(self, fn, *args):
        """``fn(*args)`` in the server's threads (sandbox calls block)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # --- the environment calls --------------------------------------------------------------------
    async def reset(self, session: Session, request: m.ResetRequest) -> dict:
        async with self._active(session):
            try:
                outcome = await self.run(session.episode.reset, request.seed)
            except SandboxUnavailable as exc:  # the machine, not the environment (see spade-rl doctor)
                raise m.Refused(503, m.EXECUTION_ERROR, f"the sandbox cannot run here: {exc}") from None
            session.episode_id = request.episode_id or session.episode_id
            answer = m.wire(outcome, 0, reset=True)
            if outcome.done and session.kind == "http":  # failed at reset: over at once
                await self._finish(session)
            return answer

    async def step(self, session: Session, payload: Any, timeout_s: float | None = None) -> dict:
        action = self.parse_action(payload)
        async with self._active(session):
            episode = session.episode
            if not episode.started:
                raise m.Refused(409, m.EXECUTION_ERROR, "step before reset: send a reset first")
            if episode.done:
                raise m.Refused(409, m.EXECUTION_ERROR, "the episode is over: send a reset to start another")
            outcome = await self.run(episode.step, action, timeout_s)
            answer = m.wire(outcome, episode.turns, reset=False)
            if outcome.done and session.kind == "http":
                await self._finish(session)
            return answer

    async def _finish(self, session: Session) -> None:
        """Close the session of a finished HTTP episode now and keep its last state for ``GET /state``.
        Its caller holds the session's lock, so no request of this episode runs in between; the episode
        id is unbound before anything is awaited, so that a ``/reset`` of it meanwhile opens a new one."""
        key = (session.entry.name, session.episode_id or "")
        with self._lock:
            if self.http_sessions.get(key) is session:
                del self.http_sessions[key]
            self.finished[key] = self.state(session)
            self.finished.move_to_end(key)
            while len(self.finished) > FINISHED_KEPT:
                self.finished.popitem(last=False)
        await self.run(self.close, session, FINISHED)

    def finished_state(self, name: str, episode_id: str) -> dict | None:
        """The last state of the finished HTTP episode ``episode_id`` of ``name``, if still kept."""
        with self._lock:
            return self.finished.get((name, episode_id))

    def open_http(self, entry: EnvEntry, episode_id: str) -> Session:
        """The HTTP session of ``episode_id`` (a new one unless it is playing): a reset of it starts its
        next episode, and its finished record goes."""
        key = (entry.name, episode_id)
        session = self.http_sessions.get(key)
        if session is None or session.closed:
            session = self.open(entry, "http")
            session.episode_id = episode_id
            with self._lock:
                self.http_sessions[key] = session
                self.finished.pop(key, None)
        return session

    def parse_action(self, payload: Any) -> str:
        """The action's text; ``Refused`` 422 saying what a SpadeAction is."""
        if not isinstance(payload, dict):
            raise m.Refused(
                422,
                m.VALIDATION_ERROR,
                f"an action is a JSON object {{'message': str}}, got {m.kind_of(payload)}",
            )
        try:
            action = m.SpadeAction.model_validate(payload)
        except ValidationError as exc:
            raise m.Refused(
                422,
                m.VALIDATION_ERROR,
                "an action is {'message': <the agent's text>} (and optional 'metadata'): "
                + m.validation_summary(exc),
                errors=exc.errors(include_url=False, include_context=False, include_input=False),
            ) from None
        if len(action.message) > self.config.max_action_chars:
            raise m.Refused(
                422,
                m.VALIDATION_ERROR,
                f"the action has {len(action.message)} characters; at most {self.config.max_action_chars}",
            )
        return action.message

    def state(self, session: Session | None) -> dict:
        if session is None:  # OpenEnv's state of a fresh environment
            return m.SpadeState().model_dump()
        episode = session.episode
        return m.SpadeState(
            episode_id=session.episode_id,
            step_count=episode.turns,
            env=session.entry.name,
            seed=episode.seed,
            done=episode.done,
            episode_return=episode.episode_return,
        ).model_dump()

    @asynccontextmanager
    async def _active(self, session: Session):
        """One call at a time per session; not idle while it runs."""
        async with session.lock:
            if session.closed and session.expired == FINISHED:  # a request that waited on the last step
                raise m.Refused(
                    409, m.EXECUTION_ERROR, f"{FINISHED}: POST /reset with this episode_id to play another"
                )
            if session.closed:
                raise m.Refused(
                    410, m.SESSION_ERROR, f"the session was closed: {session.expired or 'closed'}"
                )
            session.busy += 1
            try:
                yield
            finally:
                session.busy -= 1
                session.last_active = time.monotonic()

    # --- idle sessions and shutdown -----------------------------------------------------------------
    async def reap(self) -> None:
        """Close sessions idle for ``idle_timeout_s``, until cancelled."""
        idle = self.config.idle_timeout_s
        while True:
            await asyncio.sleep(min(max(idle / 4, 0.05), 5.0))
            now = time.monotonic()
            with self._lock:
                stale = [s for s in self.sessions.values() if not s.busy and now - s.last_active > idle]
            for session in stale:
                why = f"idle for more than {idle:g} s (--idle-timeout)"
                await self.run(self.close, session, why)

    def shutdown(self) -> None:
        """Close every session and stop every worker (once: later calls do nothing)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            sessions = list(self.sessions.values())
        for session in sessions:
            self.close(session, "the server shut down")
        with self._lock:
            idle, self._idle = self._idle, []
        for _, sandbox in idle:
            sandbox.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("server shut down: %d sessions closed", len(sessions))


def create_app(server: EnvServer) -> FastAPI:
    """The FastAPI application of ``server``: its routes at ``/envs/{name}/...`` (and at the root when
    one environment is served), the idle reaper, and the shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        reaper = asyncio.create_task(server.reap())
        try:
            yield
        finally:
            reaper.cancel()
            await asyncio.get_running_loop().run_in_executor(None, server.shutdown)

    app = FastAPI(title="spade-rl environments (OpenEnv)", version=__version__, lifespan=lifespan)

    @app.exception_handler(m.Refused)
    async def refused(request: Request, exc: m.Refused) -> JSONResponse:
        # A full server is a moment's state: say when to retry (HTTP's Retry-After, in seconds).
        headers = {"Retry-After": "1"} if exc.code == m.CAPACITY_REACHED else None
        body = {"detail": str(exc), "code": exc.code, **m.json_safe(exc.extra)}
        return JSONResponse(body, exc.status, headers=headers)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "healthy"}

    @app.get("/envs")
    async def envs() -> dict:
        return {
            "environments": [
                {"name": e.name, "setting": e.setting, "origin": e.origin, "path": f"/envs/{e.name}"}
                for e in server.entries.values()
            ],
            "active_sessions": len(server.sessions),
            "max_sessions": server.config.max_sessions,
            "finished_kept": len(server.finished),
        }

    for prefix in ("", "/envs/{name}"):
        _add_env_routes(app, server, prefix)
    return app


def _add_env_routes(app: FastAPI, server: EnvServer, prefix: str) -> None:
    def entry_of(params: dict) -> EnvEntry:
        return server.entry(params.get("name"))

    @app.post(prefix + "/reset")
    async def reset(request: Request) -> dict:
        entry = entry_of(request.path_params)
        body = await _request_model(request, m.ResetRequest, allow_empty=True)
        if body.episode_id is None:  # OpenEnv's stateless reset: one fresh instance, reset, closed
            session = server.open(entry, "once")
            try:
                return await server.reset(session, body)
            finally:
                await server.run(server.close, session)
        return await server.reset(server.open_http(entry, body.episode_id), body)

    @app.post(prefix + "/step")
    async def step(request: Request) -> dict:
        entry = entry_of(request.path_params)
        body = await _request_model(request, m.StepRequest)
        server.parse_action(body.action)  # a malformed request is 422 whatever state its episode is in
        session = _http_session(server, entry, body.episode_id)
        return await server.step(session, body.action, body.timeout_s)

    @app.get(prefix + "/state")
    async def state(request: Request, episode_id: str | None = None) -> dict:
        entry = entry_of(request.path_params)
        if episode_id is None:
            return server.state(None)
        if len(episode_id) > 255:
            raise m.Refused(422, m.VALIDATION_ERROR, "an episode_id has at most 255 characters")
        session = server.http_sessions.get((entry.name, episode_id))
        if session is None or session.closed:
            finished = server.finished_state(entry.name, episode_id)
            if finished is not None:
                return finished
        return server.state(_http_session(server, entry, episode_id))

    @app.get(prefix + "/schema")
    async def schema(request: Request) -> dict:
        entry_of(request.path_params)
        return {
            "action": m.SpadeAction.model_json_schema(),
            "observation": m.SpadeObservation.model_json_schema(),
            "state": m.SpadeState.model_json_schema(),
        }

    @app.get(prefix + "/metadata")
    async def metadata(request: Request) -> dict:
        entry = entry_of(request.path_params)
        return {
            "name": entry.name,
            "description": reference.DESCRIPTIONS.get(entry.name, "")
            if entry.origin == "reference"
            else f"a spade-rl environment ({entry.setting}) from {entry.origin}",
            "readme_content": None,
            "version": __version__,
            "author": "spade-rl",
            "documentation_url": None,
        }

    if prefix:  # the root's /health is the server's

        @app.get(prefix + "/health")
        async def env_health(request: Request) -> dict:
            entry_of(request.path_params)
            return {"status": "healthy"}

    @app.websocket(prefix + "/ws")
    async def ws(websocket: WebSocket) -> None:
        await serve_socket(server, websocket)


def _http_session(server: EnvServer, entry: EnvEntry, episode_id: str | None) -> Session:
    if episode_id is None:
        raise m.Refused(
            409,
            m.EXECUTION_ERROR,
            "OpenEnv's HTTP /step is stateless and cannot continue a game: play over the WebSocket session "
            "at .../ws (OpenEnv's EnvClient), or POST /reset with an episode_id and send the same "
            "episode_id to /step",
        )
    session = server.http_sessions.get((entry.name, episode_id))
    if (session is None or session.closed) and server.finished_state(entry.name, episode_id) is not None:
        raise m.Refused(
            409,
            m.EXECUTION_ERROR,
            f"{FINISHED}: episode {episode_id!r} of {entry.name} is done; POST /reset with this episode_id "
            "to play another",
        )
    if session is None or session.closed:
        raise m.Refused(
            404,
            m.SESSION_ERROR,
            f"no episode {episode_id!r} of {entry.name}: POST /reset with this episode_id first "
            f"(episodes close after {server.config.idle_timeout_s:g} s idle; the last "
            f"{FINISHED_KEPT} finished ones are kept)",
        )
    return session


async def _request_model(request: Request, model, allow_empty: bool = False):
    """The request's JSON body as ``model`` (an empty body is ``{}`` when allowed); ``Refused`` 413 for
    a body over ``MAX_BODY_BYTES``, 422 for one that is not JSON, nests too deep, is not an object or not
    that model; each message says what a body of ``model`` looks like."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise m.Refused(
                413, m.VALIDATION_ERROR, f"the body is larger than {MAX_BODY_BYTES} bytes, the most allowed"
            )
        chunks.append(chunk)
    raw = b"".join(chunks)
    example = EXAMPLES[model]
    try:
        body = {} if allow_empty and not raw.strip() else m.parse_json(raw, "the body")
    except m.Refused as exc:
        raise m.Refused(exc.status, exc.code, f"{exc}; a {model.__name__} is {example}") from None
    if not isinstance(body, dict):
        raise m.Refused(
            422,
            m.VALIDATION_ERROR,
            f"the body is a JSON object, got {m.kind_of(body)}; a {model.__name__} is {example}",
        )
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise m.Refused(
            422,
            m.VALIDATION_ERROR,
            f"not a valid {model.__name__}: {m.validation_summary(exc)}; a {model.__name__} is {example}",
        ) from None


def serve(entries: list[EnvEntry], config: ServeConfig) -> int:
    """Serve ``entries`` until SIGINT or SIGTERM (``spade-rl envs serve``), close every session and return
    how many it served; two sandboxes start first (``SandboxUnavailable`` without a required layer).
    uvicorn catches both signals, shuts down, then raises the signal again with the handlers it found:
    ours only note it, so a stop asked for returns (status 0, not 130 or 143: a service's failure)."""
    import uvicorn

    server = EnvServer(entries, config)
    stops: list[int] = []
    noted = lambda signum, frame: stops.append(signum)  # noqa: E731
    previous = {sig: signal.signal(sig, noted) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.warm(2)
        if not stops:  # a signal during the warm-up: nothing served
            uvicorn.run(
                create_app(server),
                host=config.host,
                port=config.port,
                ws_max_size=MAX_BODY_BYTES,
                # Connections beyond this are answered 503 by uvicorn itself: sessions are bounded by
                # max_sessions, and this bounds the requests and refused connections around them.
                limit_concurrency=config.max_sessions * 4 + 32,
                timeout_graceful_shutdown=5,
                log_level="info",
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.shutdown()  # done already by the lifespan, unless stopped before uvicorn served
    return server.closed_sessions
