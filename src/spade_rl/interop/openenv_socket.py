"""The WebSocket session of spade-rl's OpenEnv server: OpenEnv's ``/ws`` protocol, one environment
instance per connection (:class:`spade_rl.interop.openenv_server.EnvServer` holds the sessions).

The client sends ``{"type": "reset", "data": {"seed": 3}}``, ``{"type": "step", "data": {"message":
"..."}}``, ``{"type": "state"}`` or ``{"type": "close"}``; each is answered in order with an
observation, a state, or an error in OpenEnv's form (:mod:`spade_rl.interop.openenv_models`). A
session that cannot be opened (unknown environment, no capacity) or that the server closed (idle) is
not refused at the handshake, where OpenEnv's client would only see a closed connection: the first
message is answered with the error, then the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from spade_rl.interop import openenv_models as m

if TYPE_CHECKING:
    from spade_rl.interop.openenv_server import EnvServer, Session


async def serve_socket(server: EnvServer, websocket: WebSocket) -> None:
    """One WebSocket session. A refused session (unknown environment, no capacity) answers the first
    message with its error and closes; so does an expired one."""
    await websocket.accept()
    session: Session | None = None
    refusal: m.Refused | None = None
    try:
        session = server.open(server.entry(websocket.path_params.get("name")), "ws")
    except m.Refused as exc:
        refusal = exc
    # A session may be idle up to the idle limit (then the reaper closes it); a connection that holds no
    # session (refused) waits a few seconds for the message its error answers, so that refused
    # connections cannot pile up.
    idle = server.config.idle_timeout_s
    wait_s = idle * 2 if refusal is None else min(idle, 10.0)
    try:
        while True:
            try:
                raw = await asyncio.wait_for(_receive(websocket), timeout=wait_s)
            except TimeoutError:
                break  # a connection with no message for twice the idle limit is dropped
            if raw is None:
                break
            if session is not None:
                session.last_active = time.monotonic()  # any message is activity, a state request too
            if refusal is None and session is not None and session.expired:
                refusal = m.Refused(410, m.SESSION_ERROR, f"the session was closed: {session.expired}")
            if refusal is not None:
                await _send(websocket, m.error_message(refusal.code, str(refusal), **refusal.extra))
                break
            assert session is not None
            reply = await _handle(server, session, raw)
            if reply is None:
                break
            await _send(websocket, reply)
    except WebSocketDisconnect:
        pass
    finally:
        if session is not None:
            await server.run(server.close, session, session.expired)
        try:
            await websocket.close()
        except (RuntimeError, OSError, WebSocketDisconnect):
            pass  # the client closed first (uvicorn's ClientDisconnected is an OSError)


async def _handle(server: EnvServer, session: Session, raw: str) -> dict | None:
    """The answer to one WebSocket message (None for ``close``)."""
    try:
        message = m.parse_json(raw, "the message")
    except m.Refused as exc:  # not JSON, or nested too deep (Python's parser would raise RecursionError)
        return m.error_message(exc.code, f"Invalid JSON: {exc}")
    if not isinstance(message, dict):
        return m.error_message(
            m.INVALID_JSON,
            f'a message is a JSON object such as {{"type": "reset", "data": {{"seed": 3}}}}, '
            f"got {m.kind_of(message)}",
        )
    kind = message.get("type", "")
    try:
        if kind == "reset":
            data = message.get("data", {})
            try:
                request = m.ResetRequest.model_validate(data if data is not None else {})
            except ValidationError as exc:
                return m.error_message(m.VALIDATION_ERROR, f"Invalid message: {m.validation_summary(exc)}")
            return {"type": "observation", "data": await server.reset(session, request)}
        if kind == "step":
            if "data" not in message:
                return m.error_message(
                    m.VALIDATION_ERROR, "Invalid message: a step needs 'data' (the action)"
                )
            return {"type": "observation", "data": await server.step(session, message["data"])}
        if kind == "state":
            return {"type": "state", "data": server.state(session)}
        if kind == "close":
            return None
    except m.Refused as exc:
        return m.error_message(exc.code, str(exc), **exc.extra)
    return m.error_message(
        m.UNKNOWN_TYPE,
        f"Unknown message type: {str(kind)[:100]!r}; this server answers reset, step, state and close",
    )


async def _receive(websocket: WebSocket) -> str | None:
    """The next text message (binary: decoded as UTF-8), None when the client went away."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        return None
    if message.get("text") is not None:
        return message["text"]
    data = message.get("bytes") or b""
    return data.decode("utf-8", errors="replace")


async def _send(websocket: WebSocket, message: dict) -> None:
    await websocket.send_text(json.dumps(m.json_safe(message), allow_nan=False, ensure_ascii=False))
