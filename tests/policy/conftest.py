"""Fixtures of the policy tests: the tiny random model, and a real OpenAI-compatible HTTP server on loopback.

The server answers ``POST /v1/chat/completions`` and ``GET /v1/models`` by running a ``TransformersPolicy``
over the tiny model, the way vLLM answers them: log-probs in ``choices[i].logprobs.content``, and, when the
request asks ``return_token_ids``, ``prompt_token_ids`` and ``choices[i].token_ids``. Requests it was sent are
kept in ``server.requests``; ``server.fail_next`` makes the next requests fail with HTTP 503.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from spade_rl.policy import SamplingSettings, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy

SERVED_MODEL = "tiny-random"


@pytest.fixture(scope="session")
def tiny() -> tuple[Any, Any]:
    """(model, tokenizer): the seeded 2-layer random Llama with the default tokenizer."""
    return tiny_random_model(seed=0)


@pytest.fixture(scope="session")
def tiny_policy(tiny: tuple[Any, Any]) -> TransformersPolicy:
    model, tokenizer = tiny
    return TransformersPolicy(model, tokenizer)


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, policy: TransformersPolicy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.policy = policy
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.fail_next = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest's output clean
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(
                200, {"object": "list", "data": [{"id": SERVED_MODEL, "object": "model", "owned_by": "t"}]}
            )
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append(body)
            if self.server.fail_next > 0:
                self.server.fail_next -= 1
                self._send(503, {"error": {"message": "busy, try again", "type": "server_error"}})
                return
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        if body.get("model") != SERVED_MODEL:
            self._send(404, {"error": {"message": f"model {body.get('model')!r} does not exist"}})
            return
        try:
            settings = SamplingSettings(
                max_new_tokens=body.get("max_tokens") or 16,
                temperature=body.get("temperature", 1.0),
                top_p=body.get("top_p", 1.0),
                top_k=body.get("top_k", 0),
                seed=body.get("seed") or 0,
                stop=tuple(body.get("stop") or ()),
                include_stop_string=body.get("include_stop_str_in_output", False),
                n=body.get("n", 1),
            )
        except ValueError as error:
            self._send(400, {"error": {"message": str(error), "type": "invalid_request_error"}})
            return
        with self.server.lock:
            generations = self.server.policy.generate([body["messages"]], settings)
        self._send(200, _response(body, generations, self.server.policy.tokenizer))

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _response(body: dict[str, Any], generations: list[Any], tokenizer: Any) -> dict[str, Any]:
    choices = []
    for index, g in enumerate(generations):
        choice: dict[str, Any] = {
            "index": index,
            "message": {"role": "assistant", "content": g.text},
            "finish_reason": "length" if g.finish_reason == "length" else "stop",
            "stop_reason": _stop_reason(g, body, tokenizer),
            "logprobs": None,
        }
        if body.get("logprobs"):
            content = []
            for token, logprob in zip(g.completion_token_ids, g.completion_logprobs, strict=True):
                piece = tokenizer.decode([token])
                name = f"token_id:{token}" if body.get("return_tokens_as_token_ids") else piece
                content.append(
                    {"token": name, "logprob": logprob, "bytes": list(piece.encode()), "top_logprobs": []}
                )
            choice["logprobs"] = {"content": content}
        if body.get("return_token_ids"):
            choice["token_ids"] = list(g.completion_token_ids)
        choices.append(choice)
    completion_tokens = sum(len(g.completion_token_ids) for g in generations)
    response: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": SERVED_MODEL,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(generations[0].prompt_token_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(generations[0].prompt_token_ids) + completion_tokens,
        },
    }
    if body.get("return_token_ids"):
        response["prompt_token_ids"] = list(generations[0].prompt_token_ids)
    return response


def _stop_reason(generation: Any, body: dict[str, Any], tokenizer: Any) -> str | None:
    """vLLM's ``stop_reason``: the stop string that ended the completion, else None."""
    if generation.finish_reason != "stop_string":
        return None
    full = tokenizer.decode(generation.completion_token_ids, skip_special_tokens=True)
    found = [(full.find(s), s) for s in body.get("stop") or () if s in full]
    return min(found)[1] if found else None


@pytest.fixture(scope="module")
def loopback_server(tiny_policy: TransformersPolicy) -> Iterator[LoopbackServer]:
    """A real HTTP server on 127.0.0.1 (a free port) serving the tiny model; stopped after the module."""
    server = LoopbackServer(tiny_policy)
    thread = threading.Thread(target=server.serve_forever, name="openai-loopback", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
