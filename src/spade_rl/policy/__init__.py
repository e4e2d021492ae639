"""The policy: one interface to generate text, with token ids and log-probabilities, for a batch of chats.

    from spade_rl.policy import PolicyConfig, SamplingSettings, make_policy
    policy = make_policy(PolicyConfig())    # transformers + the offline default model (SmolLM2-135M)
    chat = [{"role": "user", "content": "Name a prime."}]
    [g] = policy.generate([chat], SamplingSettings(max_new_tokens=16))
    g.text, g.prompt_token_ids, g.completion_token_ids, g.completion_logprobs, g.finish_reason

Backends: ``TransformersPolicy`` (in process, CPU or GPU), ``OpenAIPolicy`` (any OpenAI-compatible server),
``VLLMPolicy`` (in process, GPU extra), ``ServerPolicy`` (token prompts split across vLLM servers, whose
weights ``spade_rl.policy.weight_sync`` keeps in step with a trainer), and ``FakePolicy`` (scripted: for
model-free tests and ``spade-rl design --from-jsonl``; ``spade_rl.testing.fake_vllm`` serves a model the way
vLLM does, on loopback). Models: ``resolve_model`` / ``load_pretrained`` (the packaged default, hub ids,
folders) and ``tiny_random_model``.
This package knows nothing of environments or the sandbox. Heavy imports (torch, transformers, openai,
vllm) happen only when a backend or model is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spade_rl.policy.base import (
    FINISH_REASONS,
    Chat,
    FinishReason,
    Generation,
    Message,
    Policy,
    PolicyError,
    SamplingSettings,
    derive_seed,
)
from spade_rl.policy.config import (
    BACKENDS,
    WEIGHT_SYNCS,
    OpenAIConfig,
    PolicyConfig,
    ServersConfig,
    TransformersConfig,
    VLLMConfig,
)
from spade_rl.policy.factory import make_policy
from spade_rl.policy.fake import FakePolicy
from spade_rl.policy.models import (
    DEFAULT_MODEL,
    ModelNotAvailableError,
    cache_root,
    default_tokenizer,
    load_pretrained,
    load_tokenizer,
    resolve_model,
    tiny_random_model,
)

if TYPE_CHECKING:
    from spade_rl.policy.openai_backend import OpenAIPolicy
    from spade_rl.policy.servers import ServerPolicy
    from spade_rl.policy.transformers_backend import TransformersPolicy
    from spade_rl.policy.vllm_backend import VLLMPolicy

_LAZY = {
    "TransformersPolicy": "spade_rl.policy.transformers_backend",
    "OpenAIPolicy": "spade_rl.policy.openai_backend",
    "VLLMPolicy": "spade_rl.policy.vllm_backend",
    "ServerPolicy": "spade_rl.policy.servers",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL",
    "FINISH_REASONS",
    "WEIGHT_SYNCS",
    "Chat",
    "FakePolicy",
    "FinishReason",
    "Generation",
    "Message",
    "ModelNotAvailableError",
    "OpenAIConfig",
    "OpenAIPolicy",
    "Policy",
    "PolicyConfig",
    "PolicyError",
    "SamplingSettings",
    "ServerPolicy",
    "ServersConfig",
    "TransformersConfig",
    "TransformersPolicy",
    "VLLMConfig",
    "VLLMPolicy",
    "cache_root",
    "default_tokenizer",
    "derive_seed",
    "load_pretrained",
    "load_tokenizer",
    "make_policy",
    "resolve_model",
    "tiny_random_model",
]
