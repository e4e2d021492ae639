"""Generation on one or more vLLM servers: token prompts in, sampled token ids and log-probs out.

    policy = ServerPolicy(ServersConfig(base_urls=("http://10.0.0.5:8000/v1", "http://10.0.0.6:8000/v1")),
                          model="/models/qwen3-8b")       # the tokenizer that renders prompts
    generations = policy.generate_tokens(prompt_ids, SamplingSettings(max_new_tokens=256, temperature=0.6))

The multi-turn rollouts continue conversations as token ids (``Policy.generate_tokens``), so this backend
speaks the part of vLLM's OpenAI-compatible server that takes and returns tokens: ``POST /v1/completions``
with ``prompt`` a list of token ids and vLLM's ``return_token_ids`` extension, which returns the prompt's
ids (``prompt_token_ids``) and the sampled ones (``token_ids``) on every choice; ``logprobs: 0`` returns the
log-probability of each sampled token under the server's ``--logprobs-mode`` (start servers with
``processed_logprobs``, as ``trl vllm-serve`` does, so that they are those of the tempered distribution that
the update's importance ratio compares against). This is the request TRL 1.16's ``VLLMClient.generate``
sends. A server that returns no token ids (an OpenAI-compatible server other than vLLM) is refused with a
message, never re-tokenised: re-tokenised ids differ from what was sampled.

**Several servers.** A batch of prompts is cut into contiguous, equal shares (sizes differ by at most one),
one per server, in the order of ``base_urls``; all samples of a prompt go to the server of that prompt, so
they share its prefix cache. Every sample is its own request (``n = 1``); with ``seed_requests`` it carries
the seed ``derive_seed(settings.seed, i * n + j)``, as in the in-process backends, so which server drew a
sample does not change its seed (off by default: vLLM samples seeded requests one at a time, and unseeded
sampling is not repeatable from run to run). Each server gets as many requests at once as it runs sequences
(its ``max_num_seqs``, unless ``concurrency`` is set), and vLLM batches them.

At construction every server is asked ``GET /v1/models``: an unreachable server, or servers serving
different models, stop the run before anything runs. Weights are not this module's business: see
:mod:`spade_rl.policy.weight_sync`. :func:`request_json` is the plain-HTTP helper both modules use for
vLLM's own (non-OpenAI) routes.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from spade_rl.policy.base import (
    Generation,
    Policy,
    PolicyError,
    SamplingSettings,
    check_budgets,
    check_token_prompts,
    cut_at_stop,
    derive_seed,
)
from spade_rl.policy.config import DEFAULT_SERVER_CONCURRENCY, ServersConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


def split_evenly(count: int, parts: int) -> list[range]:
    """``count`` items in ``parts`` contiguous ranges whose sizes differ by at most one, larger first."""
    if parts < 1 or count < 0:
        raise ValueError(f"cannot split {count} items into {parts} parts")
    size, extra = divmod(count, parts)
    ranges, start = [], 0
    for part in range(parts):
        stop = start + size + (1 if part < extra else 0)
        ranges.append(range(start, stop))
        start = stop
    return ranges


def request_json(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    *,
    timeout_s: float,
    api_key: str | None = None,
) -> Any:
    """One JSON request to a server's own route; the parsed answer (``None`` for an empty body).

    Raises ``PolicyError`` naming the URL, the HTTP status and the server's message."""
    data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:500]
        hint = ""
        if error.code == 404:
            hint = (
                " (vLLM serves its weight-sync and cache routes only in development mode: start it with "
                "VLLM_SERVER_DEV_MODE=1, or with `trl vllm-serve`)"
            )
        raise PolicyError(f"{method} {url} failed with HTTP {error.code}: {detail}{hint}") from error
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise PolicyError(f"{method} {url} failed: {reason}") from error
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise PolicyError(f"{method} {url} answered something that is not JSON: {raw[:200]!r}") from error


class ServerPolicy(Policy):
    """Token-prompt generation split across vLLM servers (see the module docstring)."""

    supports_token_prompts = True

    def __init__(
        self,
        config: ServersConfig | None = None,
        model: str | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        try:
            import openai
        except ImportError as error:
            raise PolicyError("the servers backend needs the openai package: pip install openai") from error
        self.config = config if config is not None else ServersConfig()
        self.roots = self.config.roots
        self.api_key = os.environ.get(self.config.api_key_env) or None
        self._openai = openai
        self._clients = [
            openai.OpenAI(
                base_url=f"{root}/v1",
                api_key=self.api_key or "EMPTY",
                timeout=self.config.timeout_s,
                max_retries=self.config.max_retries,
            )
            for root in self.roots
        ]
        if tokenizer is None:
            from spade_rl.policy.models import load_tokenizer

            tokenizer = load_tokenizer(self.config.tokenizer or model)
        self._tokenizer = (
            tokenizer  # no weights here: the trainer holds its own copy (spade_rl.loop.updating)
        )
        self.served_model, self.context_lengths = self._check_servers()
        known = [length for length in self.context_lengths.values() if length is not None]
        self.max_model_len = min(known) if known else None  # the least context over the servers
        self.concurrency = [self._concurrency(i) for i in range(len(self.roots))]  # requests in flight each
        self._pools = [
            ThreadPoolExecutor(max_workers=count, thread_name_prefix=f"server{i}")
            for i, count in enumerate(self.concurrency)
        ]
        log.info(
            "generating on %d server(s): %s (model %s)",
            len(self.roots),
            ", ".join(self.roots),
            self.served_model,
        )

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    def server_info(self, index: int) -> dict[str, Any]:
        """Server ``index``'s resolved vLLM configuration (``GET /server_info``; development mode only)."""
        answer = request_json(
            "GET",
            f"{self.roots[index]}/server_info?config_format=json",
            timeout_s=self.config.timeout_s,
            api_key=self.api_key,
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("vllm_config"), dict):
            raise PolicyError(f"{self.roots[index]}/server_info gave no vllm_config; is it a vLLM server?")
        return answer["vllm_config"]

    def check_context(self, max_context_tokens: int, key: str) -> None:
        """Refuse, before anything runs, a server whose context is shorter than the conversations the run
        will send it (``key`` names the configuration's limit): it would answer HTTP 400 mid-run."""
        short = {
            root: n for root, n in self.context_lengths.items() if n is not None and n < max_context_tokens
        }
        if short:
            root, length = next(iter(short.items()))
            raise PolicyError(
                f"the server {root} serves {self.served_model!r} with max_model_len {length}, shorter than "
                f"{key} = {max_context_tokens}: a conversation that grows past {length} tokens would fail "
                f"there with HTTP 400. Set {key} to at most {min(short.values())}, or restart the server "
                f"with --max-model-len {max_context_tokens} or more"
                + (f" (also short: {[r for r in short if r != root]})" if len(short) > 1 else "")
            )
        unknown = [root for root, n in self.context_lengths.items() if n is None]
        if unknown:
            log.warning(
                "the server(s) %s do not report max_model_len: %s = %d is not checked against them",
                ", ".join(unknown),
                key,
                max_context_tokens,
            )

    def generate_tokens(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        settings: SamplingSettings,
        *,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        prompts = check_token_prompts(prompt_token_ids)
        limits = check_budgets(budgets, len(prompts), settings)
        futures: list[Future[Generation]] = []
        for server, share in enumerate(split_evenly(len(prompts), len(self.roots))):
            for i in share:
                for j in range(settings.n):
                    k = i * settings.n + j
                    futures.append(
                        self._pools[server].submit(self._sample, server, prompts[i], k, limits[i], settings)
                    )
        return [future.result() for future in futures]  # chat-major: prompt i, sample j at i * n + j

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
        for client in self._clients:
            client.close()

    # --- one request -----------------------------------------------------------------------------------

    def _sample(
        self, server: int, prompt: list[int], k: int, budget: int, settings: SamplingSettings
    ) -> Generation:
        request: dict[str, Any] = {
            "model": self.served_model,
            "prompt": prompt,
            "max_tokens": budget,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "n": 1,
        }
        if self.config.seed_requests and not settings.greedy:
            request["seed"] = derive_seed(settings.seed, k)
        if settings.logprobs:
            request["logprobs"] = 0  # the sampled token's log-prob only
        if settings.stop:
            request["stop"] = list(settings.stop)
        extra: dict[str, Any] = {"return_token_ids": True}
        if settings.top_k:
            extra["top_k"] = settings.top_k
        if settings.stop_token_ids:
            extra["stop_token_ids"] = list(settings.stop_token_ids)
        if settings.include_stop_string:
            extra["include_stop_str_in_output"] = True
        try:
            response = self._clients[server].completions.create(**request, extra_body=extra)
        except self._openai.APIError as error:
            status = getattr(error, "status_code", None)
            detail = f"HTTP {status}: {error}" if status else f"{type(error).__name__}: {error}"
            raise PolicyError(f"the server {self.roots[server]} failed on sample {k} ({detail})") from error
        return self._generation(server, prompt, response, settings)

    def _generation(
        self, server: int, prompt: list[int], response: Any, settings: SamplingSettings
    ) -> Generation:
        where = self.roots[server]
        if len(response.choices) != 1:
            raise PolicyError(f"{where} returned {len(response.choices)} choices for a request of n=1")
        choice = response.choices[0]
        ids = getattr(choice, "token_ids", None)
        if ids is None:
            raise PolicyError(
                f"{where} returned no token ids: the servers backend needs vLLM's return_token_ids "
                "extension of /v1/completions (a vLLM server); use backend 'openai' for other servers"
            )
        echoed = getattr(choice, "prompt_token_ids", None)
        if echoed is not None and list(echoed) != prompt:
            raise PolicyError(f"{where} generated from other prompt tokens than it was sent")
        logprobs = None
        if settings.logprobs:
            values = list(choice.logprobs.token_logprobs) if choice.logprobs is not None else []
            if len(values) != len(ids) or any(v is None for v in values):
                raise PolicyError(
                    f"{where} returned {len(values)} log-probs for {len(ids)} sampled tokens; "
                    "it must return one per token (logprobs=0)"
                )
            logprobs = [float(v) for v in values]
        stop_reason = getattr(choice, "stop_reason", None)
        if choice.finish_reason == "length":
            finish = "length"
        elif isinstance(stop_reason, str):
            finish = "stop_string"
        else:
            finish = "stop"  # end of sequence (stop_reason None) or a stop token (its id)
        text = choice.text or ""
        if finish == "stop_string":  # vLLM cut at the stop string already; one rule everywhere
            text = cut_at_stop(text, settings.stop, settings.include_stop_string)[0]
        return Generation(
            text=text,
            prompt_token_ids=tuple(prompt),
            completion_token_ids=tuple(int(t) for t in ids),
            completion_logprobs=tuple(logprobs) if logprobs is not None else None,
            finish_reason=finish,
        )

    # --- start-up ----------------------------------------------------------------------------------------

    def _concurrency(self, index: int) -> int:
        """Requests in flight on server ``index``: ``policy.servers.concurrency`` when set; else the
        server's capacity (its ``max_num_seqs``, from ``/server_info``), or the documented default."""
        if self.config.concurrency is not None:
            return self.config.concurrency
        root = self.roots[index]
        try:
            scheduler = self.server_info(index).get("scheduler_config")
        except PolicyError as error:
            log.info(
                "%s does not report its capacity (%s): %d requests at a time (policy.servers.concurrency)",
                root,
                str(error)[:200],
                DEFAULT_SERVER_CONCURRENCY,
            )
            return DEFAULT_SERVER_CONCURRENCY
        capacity = scheduler.get("max_num_seqs") if isinstance(scheduler, dict) else None
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            log.info(
                "%s reports no max_num_seqs: %d requests at a time (policy.servers.concurrency)",
                root,
                DEFAULT_SERVER_CONCURRENCY,
            )
            return DEFAULT_SERVER_CONCURRENCY
        log.info("%s runs up to %d sequences at once: as many requests at a time", root, capacity)
        return capacity

    def _check_servers(self) -> tuple[str, dict[str, int | None]]:
        """Every server answers ``/v1/models`` and serves the same model; its name, and each server's
        context length (its ``max_model_len``; ``None`` where it does not say)."""
        listed: list[list[dict[str, Any]]] = []
        for root, client in zip(self.roots, self._clients, strict=True):
            try:
                models = [m.model_dump() for m in client.models.list()]
            except self._openai.APIError as error:
                raise PolicyError(
                    f"the server {root} does not answer GET /v1/models ({type(error).__name__}: {error}); "
                    "is it running, and is its URL right?"
                ) from error
            if not models:
                raise PolicyError(f"the server {root} serves no model")
            listed.append(models)
        wanted = self.config.served_model or listed[0][0]["id"]
        lengths: dict[str, int | None] = {}
        for root, models in zip(self.roots, listed, strict=True):
            match = [m for m in models if m.get("id") == wanted]
            if not match:
                names = [m.get("id") for m in models]
                raise PolicyError(
                    f"the server {root} does not serve {wanted!r} (it serves {names}); every server must "
                    "serve the same model (set policy.servers.served_model to its name)"
                )
            length = match[0].get("max_model_len")
            lengths[root] = length if isinstance(length, int) and not isinstance(length, bool) else None
        return wanted, lengths
