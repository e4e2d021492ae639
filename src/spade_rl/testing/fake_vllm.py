"""A loopback stand-in for a vLLM server: the routes this project uses, answered by an in-process model.

    transport = LoopbackTransport()
    with FakeVLLMServer(TransformersPolicy(model, tokenizer), transport=transport) as server:
        policy = ServerPolicy(ServersConfig(base_urls=(server.base_url,)), tokenizer=tokenizer)
        ...                                       # server.calls: every (route, body) in order

For tests and for trying the ``servers`` backend without a GPU. It answers, in the shapes vLLM 0.31 uses:

- ``GET /health``, ``GET /v1/models`` (with ``max_model_len``), and ``POST /v1/completions`` with a token
  prompt, ``return_token_ids``, ``logprobs``, ``seed``, ``stop``, ``stop_token_ids``, ``top_k``: one
  ``TransformersPolicy.generate_tokens`` call per request (its log-probs are the tempered, "processed" ones;
  a request without a seed draws one from the server's own generator);
- what verifiers' clients call (issue 57): ``POST /v1/chat/completions`` (its eval client: messages rendered
  with the policy's chat template, the answer as ``message.content``) and ``POST /inference/v1/generate``
  (its train client: ``token_ids`` and ``sampling_params`` in, vLLM's answer out: ``choices[].token_ids``,
  ``logprobs.content[]`` as ``{"token": "token_id:<id>", "logprob": ...}``, ``finish_reason``);
- development-mode routes (``dev_mode=True``, as with ``VLLM_SERVER_DEV_MODE=1``; 404 otherwise):
  ``GET /server_info`` (``model_config.dtype`` / ``logprobs_mode``, ``weight_transfer_config``,
  ``scheduler_config.max_num_seqs``),
  ``GET /get_world_size``, ``GET /weight_info``, ``POST /reset_prefix_cache``, ``/update_weight_version``,
  the NCCL weight-transfer routes ``/init_weight_transfer_engine``, ``/start_weight_update``,
  ``/update_weights``, ``/finish_weight_update`` (with a weight-transfer engine configured), and
  ``/collective_rpc`` with ``reload_weights`` (safetensors from ``weights_path``).

The NCCL data plane is replaced by a :class:`LoopbackTransport` object shared with the trainer side: the
server's ``/init_weight_transfer_engine`` waits for the trainer to join its rendezvous, ``/update_weights``
receives the tensors the trainer broadcasts, checks them against the announced names, dtypes and shapes,
and loads them into the model, as vLLM's packed NCCL receiver does. It never touches a GPU or NCCL: those
paths are exercised only on a GPU machine (tests/gpu, bench/gpu_check.sh).
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from spade_rl.policy.base import SamplingSettings

log = logging.getLogger(__name__)

SERVED_MODEL = "fake-vllm"


class LoopbackTransport:
    """The NCCL group of a weight sync, in process: the trainer side joins and broadcasts, servers receive.

    ``connect`` and ``broadcast`` are what :class:`spade_rl.policy.weight_sync.NCCLWeightSync` calls on its
    transport; ``joined`` and ``receive`` are the servers' side."""

    def __init__(self) -> None:
        self.rendezvous: dict[str, Any] | None = None
        self._joined = threading.Event()
        self._rounds: queue.Queue[list[tuple[str, Any]]] = queue.Queue()
        self.broadcasts: list[list[tuple[str, str, tuple[int, ...]]]] = []  # (name, dtype, shape) per round
        self._receivers = 0

    # trainer side
    def default_host(self) -> str:
        return "127.0.0.1"

    def connect(self, host: str, port: int, world_size: int) -> None:
        self.rendezvous = {"master_address": host, "master_port": port, "world_size": world_size}
        self._joined.set()

    def broadcast(self, named: Iterable[tuple[str, Any]]) -> None:
        tensors = [(name, tensor.detach().clone()) for name, tensor in named]
        self.broadcasts.append([(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in tensors])
        for _ in range(max(1, self._receivers)):
            self._rounds.put(tensors)

    def close(self) -> None:
        self._joined.clear()

    # server side
    def join(self, timeout_s: float) -> dict[str, Any]:
        self._receivers += 1
        if not self._joined.wait(timeout_s):
            raise TimeoutError("the trainer never joined the weight-transfer rendezvous")
        return dict(self.rendezvous or {})

    def receive(self, timeout_s: float) -> list[tuple[str, Any]]:
        return self._rounds.get(timeout=timeout_s)


class FakeVLLMServer(ThreadingHTTPServer):
    """See the module docstring. ``world_size`` is what ``/get_world_size`` reports (tensor x data parallel);
    ``fail_next`` makes the next requests fail with HTTP 503."""

    daemon_threads = True

    def __init__(
        self,
        policy: Any,
        *,
        transport: LoopbackTransport | None = None,
        dev_mode: bool = True,
        weight_transfer: bool = True,
        logprobs_mode: str = "processed_logprobs",
        dtype: str = "float32",
        world_size: int = 1,
        max_model_len: int = 4096,
        max_num_seqs: int | None = 256,
        timeout_s: float = 60.0,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.policy = policy
        self.transport = transport
        self.dev_mode = dev_mode
        self.weight_transfer = weight_transfer
        self.logprobs_mode = logprobs_mode
        self.dtype = dtype
        self.world_size = world_size
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs  # None: /server_info leaves scheduler_config out
        self._unseeded = random.Random(0)  # the seeds of requests that carry none
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.calls: list[tuple[str, Any]] = []  # (route, body) of every request, in order of arrival
        self.chats: list[list[dict]] = []  # every chat /v1/chat/completions answered
        self.generated: list[tuple[list[int], list[int]]] = []  # /inference/v1/generate: (prompt, completion)
        self.fail_next = 0
        self.weight_version: str | None = None
        self.prefix_cache_resets = 0
        self.init_info: dict[str, Any] | None = None
        self._updating = False
        self._thread: threading.Thread | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def routes(self) -> list[str]:
        """The routes called so far, in order (without the generation requests)."""
        return [route for route, _ in self.calls if route not in ("/v1/completions", "/v1/models", "/health")]

    def start(self) -> FakeVLLMServer:
        self._thread = threading.Thread(target=self.serve_forever, name="fake-vllm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeVLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what the routes do ------------------------------------------------------------------------------

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
            raise ValueError("this fake takes one token-id prompt per request")
        settings = SamplingSettings(
            max_new_tokens=body.get("max_tokens") or 16,
            temperature=body.get("temperature", 1.0),
            top_p=body.get("top_p", 1.0),
            top_k=max(0, body.get("top_k") or 0),
            # an unseeded request draws from the server's own generator, as vLLM's does
            seed=body["seed"] if body.get("seed") is not None else self._unseeded.randrange(2**31),
            stop=tuple(body.get("stop") or ()),
            stop_token_ids=tuple(body.get("stop_token_ids") or ()),
            include_stop_string=body.get("include_stop_str_in_output", False),
            n=body.get("n", 1),
            logprobs=body.get("logprobs") is not None,
        )
        with self.lock:
            generations = self.policy.generate_tokens([prompt], settings)
        choices = []
        for index, g in enumerate(generations):
            stop_reason: int | str | None = None
            if g.finish_reason == "stop_string":
                full = self.policy.tokenizer.decode(g.completion_token_ids, skip_special_tokens=True)
                found = [(full.find(s), s) for s in settings.stop if s in full]
                stop_reason = min(found)[1] if found else None
            elif g.completion_token_ids and g.completion_token_ids[-1] in settings.stop_token_ids:
                stop_reason = g.completion_token_ids[-1]
            choice: dict[str, Any] = {
                "index": index,
                "text": g.text,
                "finish_reason": "length" if g.finish_reason == "length" else "stop",
                "stop_reason": stop_reason,
                "logprobs": None,
            }
            if settings.logprobs:
                choice["logprobs"] = {
                    "tokens": [f"token_id:{t}" for t in g.completion_token_ids],
                    "token_logprobs": list(g.completion_logprobs),
                    "top_logprobs": [None] * len(g.completion_token_ids),
                    "text_offset": [0] * len(g.completion_token_ids),
                }
            if body.get("return_token_ids"):
                choice["token_ids"] = list(g.completion_token_ids)
                choice["prompt_token_ids"] = list(prompt)
            choices.append(choice)
        completion_tokens = sum(len(g.completion_token_ids) for g in generations)
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": int(time.time()),
            "model": SERVED_MODEL,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt) + completion_tokens,
            },
        }

    def _settings(self, params: dict[str, Any], logprobs: bool) -> SamplingSettings:
        """vLLM's sampling parameters (as the chat and generate routes take them) as spade-rl's."""
        budget = params.get("max_tokens") or params.get("max_completion_tokens") or 16
        stop = params.get("stop") or ()
        return SamplingSettings(
            max_new_tokens=int(budget),
            temperature=float(1.0 if params.get("temperature") is None else params["temperature"]),
            top_p=float(params.get("top_p") or 1.0),
            top_k=max(0, int(params.get("top_k") or 0)),
            seed=params["seed"] if params.get("seed") is not None else self._unseeded.randrange(2**31),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            stop_token_ids=tuple(params.get("stop_token_ids") or ()),
            include_stop_string=bool(params.get("include_stop_str_in_output", False)),
            logprobs=logprobs,
        )

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """``/v1/chat/completions``: the messages rendered by the policy's chat template, one completion."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list")
        chat = [{"role": str(m.get("role")), "content": _text(m.get("content"))} for m in messages]
        settings = self._settings(body, logprobs=False)
        with self.lock:
            prompt = self.policy.render(chat, add_generation_prompt=True)
            [g] = self.policy.generate_tokens([prompt], settings)
            self.chats.append(chat)
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": g.text},
                    "finish_reason": "length" if g.finish_reason == "length" else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(g.completion_token_ids or ()),
                "total_tokens": len(prompt) + len(g.completion_token_ids or ()),
            },
        }

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        """``/inference/v1/generate``: a token prompt in, vLLM's token-level answer out."""
        prompt = body.get("token_ids")
        if not isinstance(prompt, list) or not prompt or not all(type(t) is int for t in prompt):
            raise ValueError("token_ids must be a non-empty list of token ids")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise ValueError("sampling_params must be an object")
        settings = self._settings(params, logprobs=True)
        with self.lock:
            [g] = self.policy.generate_tokens([prompt], settings)
            ids = list(g.completion_token_ids or ())
            self.generated.append((list(prompt), ids))
            request = len(self.generated)
        content = [
            {"token": f"token_id:{t}", "logprob": float(lp)}
            for t, lp in zip(ids, g.completion_logprobs or (), strict=True)
        ]
        return {
            "request_id": f"gen-{request}",
            "prompt_token_ids": list(prompt),
            "choices": [
                {
                    "index": 0,
                    "token_ids": ids,
                    "logprobs": {"content": content},
                    "finish_reason": "length" if g.finish_reason == "length" else "stop",
                }
            ],
        }

    def server_info(self) -> dict[str, Any]:
        return {
            "vllm_config": {
                "model_config": {
                    "model": SERVED_MODEL,
                    "dtype": f"torch.{self.dtype}",
                    "logprobs_mode": self.logprobs_mode,
                    "max_model_len": self.max_model_len,
                },
                "parallel_config": {"tensor_parallel_size": self.world_size, "data_parallel_size": 1},
                **(
                    {"scheduler_config": {"max_num_seqs": self.max_num_seqs}}
                    if self.max_num_seqs is not None
                    else {}
                ),
                "weight_transfer_config": {"backend": "nccl"} if self.weight_transfer else None,
            },
            "vllm_env": {"VLLM_SERVER_DEV_MODE": True},
        }

    def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        if not self.weight_transfer:
            raise RuntimeError("Weight transfer not configured (start vLLM with --weight-transfer-config)")
        if self.transport is None:
            raise RuntimeError("this fake server has no loopback transport")
        for key in ("master_address", "master_port", "rank_offset", "world_size"):
            if key not in init_info:
                raise ValueError(f"init_info lacks {key}")
        rendezvous = self.transport.join(self.timeout_s)
        for key in ("master_address", "master_port", "world_size"):
            if rendezvous.get(key) != init_info[key]:
                raise ValueError(
                    f"init_info {key}={init_info[key]!r} but the trainer joined with {rendezvous}"
                )
        self.init_info = dict(init_info)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        if self.init_info is None:
            raise RuntimeError("update_weights before init_weight_transfer_engine")
        if not self._updating:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        names, dtypes, shapes = update_info["names"], update_info["dtype_names"], update_info["shapes"]
        if not len(names) == len(dtypes) == len(shapes):
            raise ValueError("names, dtype_names and shapes differ in length")
        assert self.transport is not None
        received = self.transport.receive(self.timeout_s)
        announced = [(n, d, tuple(s)) for n, d, s in zip(names, dtypes, shapes, strict=True)]
        got = [(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in received]
        if got != announced:
            raise ValueError(f"received tensors differ from the announced ones: {got[:3]} vs {announced[:3]}")
        self._load(received)

    def reload_weights(self, weights_path: str) -> None:
        from safetensors.torch import load_file

        folder = Path(weights_path)
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors in {folder}")
        tensors: list[tuple[str, Any]] = []
        for file in files:
            tensors += list(load_file(str(file)).items())
        self._load(tensors)

    def _load(self, tensors: list[tuple[str, Any]]) -> None:
        import torch

        model = self.policy.model
        params = dict(model.named_parameters())
        with self.lock, torch.no_grad():
            for name, tensor in tensors:
                if name not in params:
                    raise KeyError(f"the served model has no parameter {name!r}")
                if tuple(params[name].shape) != tuple(tensor.shape):
                    raise ValueError(f"{name}: shape {tuple(tensor.shape)} != {tuple(params[name].shape)}")
                params[name].copy_(tensor.to(params[name].dtype))

    def reset_prefix_cache(self) -> None:
        self.prefix_cache_resets += 1
        clear = getattr(self.policy, "clear_prefix_cache", None)
        if callable(clear):
            clear()


_DEV_ROUTES = {
    "/server_info",
    "/get_world_size",
    "/weight_info",
    "/reset_prefix_cache",
    "/update_weight_version",
    "/init_weight_transfer_engine",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
    "/collective_rpc",
}


def _text(content: Any) -> str:
    """A chat message's content as text (a list of parts: their text joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class _Handler(BaseHTTPRequestHandler):
    server: FakeVLLMServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        route, query = url.path.rstrip("/") or "/", parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "invalid JSON"}})
            return
        server = self.server
        with server.lock:
            server.calls.append((route, body))
            if server.fail_next > 0:
                server.fail_next -= 1
                self._send(503, {"error": {"message": "busy, try again", "type": "server_error"}})
                return
        if route in _DEV_ROUTES and not server.dev_mode:
            self._send(404, {"detail": "Not Found"})
            return
        try:
            status, payload = self._route(method, route, query, body)
        except (ValueError, KeyError, RuntimeError, TimeoutError, FileNotFoundError) as error:
            status, payload = 400 if isinstance(error, ValueError | KeyError) else 500, {"error": str(error)}
        self._send(status, payload)

    def _route(self, method: str, route: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        server = self.server
        get, post = method == "GET", method == "POST"
        if get and route == "/health":
            return 200, None
        if get and route == "/v1/models":
            card = {
                "id": SERVED_MODEL,
                "object": "model",
                "owned_by": "fake",
                "max_model_len": server.max_model_len,
            }
            return 200, {"object": "list", "data": [card]}
        if post and route == "/v1/completions":
            if body.get("model") != SERVED_MODEL:
                return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
            return 200, server.complete(body)
        if post and route in ("/v1/chat/completions", "/inference/v1/generate"):
            if not isinstance(body, dict):
                return 400, {"error": {"message": "the body must be a JSON object"}}
            if body.get("model") != SERVED_MODEL:
                return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
            answer = server.chat if route == "/v1/chat/completions" else server.generate
            return 200, answer(body)
        if get and route == "/server_info":
            if query.get("config_format") != ["json"]:
                return 200, {"vllm_config": "text form"}
            return 200, server.server_info()
        if get and route == "/get_world_size":
            return 200, {"world_size": server.world_size}
        if get and route == "/weight_info":
            return 200, {"weight_version": server.weight_version}
        if post and route == "/reset_prefix_cache":
            server.reset_prefix_cache()
            return 200, {"success": True}
        if post and route == "/update_weight_version":
            server.weight_version = body["new_version"]
            return 200, {"success": True, "new_version": server.weight_version}
        if post and route == "/init_weight_transfer_engine":
            server.init_weight_transfer(body["init_info"])
            return 200, {"message": "Weight transfer initialized"}
        if post and route == "/start_weight_update":
            if server._updating:
                raise RuntimeError("start_weight_update called while a weight update is already active.")
            server._updating = True
            return 200, {"message": "Weight update started"}
        if post and route == "/update_weights":
            server.update_weights(body["update_info"])
            return 200, {"message": "Weights updated"}
        if post and route == "/finish_weight_update":
            if not server._updating:
                raise RuntimeError("finish_weight_update called without a matching start_weight_update.")
            server._updating = False
            if body.get("weight_version") is not None:
                server.weight_version = body["weight_version"]
            return 200, {"message": "Weight update finished"}
        if post and route == "/collective_rpc":
            if body.get("method") != "reload_weights":
                return 400, {"error": f"this fake only runs reload_weights, not {body.get('method')!r}"}
            server.reload_weights(body.get("kwargs", {})["weights_path"])
            return 200, None
        return 404, {"detail": "Not Found"}

    def _send(self, status: int, payload: Any) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
