"""Build the configured policy: ``make_policy(PolicyConfig(...))`` -> a ready :class:`Policy`.

Examples:

    policy = make_policy(PolicyConfig())                                  # transformers, the default model
    policy = make_policy(PolicyConfig(backend="openai", model="served-name",
                                      openai=OpenAIConfig(base_url="http://127.0.0.1:8000/v1")))
    policy = make_policy(PolicyConfig(backend="servers", model="/models/qwen3-8b",
                                      servers=ServersConfig(base_urls=("http://a:8000/v1", "http://b:8000/v1"))))
"""

from __future__ import annotations

import logging

from spade_rl.policy.base import Policy
from spade_rl.policy.config import BACKENDS, PolicyConfig

log = logging.getLogger(__name__)


def make_policy(config: PolicyConfig) -> Policy:
    """The backend that ``config.backend`` names, with ``config.model``, seeded by ``config.seed``."""
    if not isinstance(config, PolicyConfig):
        raise TypeError(f"make_policy takes a PolicyConfig, got {type(config).__name__}")
    log.info(
        "policy: backend %s, model %s, seed %d", config.backend, config.model or "(default)", config.seed
    )
    if config.backend == "transformers":
        from spade_rl.policy.transformers_backend import TransformersPolicy

        return TransformersPolicy.from_pretrained(config.model, config.transformers)
    if config.backend == "openai":
        from spade_rl.policy.openai_backend import OpenAIPolicy

        return OpenAIPolicy(config.openai, model=config.model)
    if config.backend == "vllm":
        from spade_rl.policy.vllm_backend import VLLMPolicy

        return VLLMPolicy(config.model, config.vllm, seed=config.seed)
    if config.backend == "servers":
        from spade_rl.policy.servers import ServerPolicy

        return ServerPolicy(config.servers, model=config.model)
    raise ValueError(f"policy backend {config.backend!r} is not allowed; allowed: {list(BACKENDS)}")
