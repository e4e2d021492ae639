"""The in-process vLLM engine: the GPU extra (``pip install vllm``; trl 1.16 accepts vllm 0.22 to 0.31).

    policy = VLLMPolicy("/models/qwen3-8b", VLLMConfig(gpu_memory_utilization=0.4), seed=0)
    generations = policy.generate(chats, SamplingSettings(max_new_tokens=256, temperature=0.6, seed=3))

vllm is imported only when a ``VLLMPolicy`` is made, so this module imports anywhere; without vllm (it does
not install CPU-only from the package index) the constructor raises a ``PolicyError`` that says so.
Prompts go to ``LLM.generate`` as token ids (``{"prompt_token_ids": [...]}``), rendered here with the
tokenizer's chat template like every other backend, so ``generate_tokens`` continues multi-turn sequences
exactly. Each sample is its own request with its own ``SamplingParams(seed=derive_seed(seed, i))``;
``logprobs=0`` returns the log-prob of the sampled token only, under the engine's ``logprobs_mode``
(``processed_logprobs`` by default here: the distribution sampled from, as the transformers backend reports).

Not verified on a GPU in this project yet: written against vLLM's documented offline API (``LLM``,
``SamplingParams``, ``RequestOutput.outputs[i].token_ids / logprobs / finish_reason / stop_reason``).
Updating the engine's weights from a trainer is left to the training layer (TRL's vLLM integration).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
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
from spade_rl.policy.config import VLLMConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


def vllm_available() -> bool:
    """Whether vllm can be imported here (it needs a GPU build; tests skip without it)."""
    return importlib.util.find_spec("vllm") is not None


class VLLMPolicy(Policy):
    """Generates with a ``vllm.LLM`` engine held in this process."""

    supports_token_prompts = True

    def __init__(self, model: str | None = None, config: VLLMConfig | None = None, *, seed: int = 0) -> None:
        try:
            import vllm
        except ImportError as error:
            raise PolicyError(
                "the vllm backend needs vllm, a GPU-only extra that this machine lacks (pip install vllm "
                "on a CUDA machine); use backend 'transformers' on CPU, or 'openai' against a vLLM server"
            ) from error
        from spade_rl.policy.models import resolve_model

        self.config = config if config is not None else VLLMConfig()
        self._vllm = vllm
        path = str(resolve_model(model))
        options: dict[str, Any] = {
            "model": path,
            "seed": seed,
            "dtype": self.config.dtype,
            "gpu_memory_utilization": self.config.gpu_memory_utilization,
            "tensor_parallel_size": self.config.tensor_parallel_size,
            "enforce_eager": self.config.enforce_eager,
            "logprobs_mode": self.config.logprobs_mode,
        }
        if self.config.max_model_len is not None:
            options["max_model_len"] = self.config.max_model_len
        log.info("starting vLLM on %s", path)
        self.llm = vllm.LLM(**options)
        self._tokenizer = self.llm.get_tokenizer()

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    def generate_tokens(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        settings: SamplingSettings,
        *,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        prompts = check_token_prompts(prompt_token_ids)
        limits = check_budgets(budgets, len(prompts), settings)
        requests, params = [], []
        for i, prompt in enumerate(prompts):
            for j in range(settings.n):
                requests.append({"prompt_token_ids": prompt})
                seed = derive_seed(settings.seed, i * settings.n + j)
                params.append(self._sampling_params(settings, seed, limits[i]))
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return [self._generation(request_output, settings) for request_output in outputs]

    def _sampling_params(self, settings: SamplingSettings, seed: int, budget: int) -> Any:
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=budget,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=settings.top_k if settings.top_k > 0 else -1,
            seed=seed if self.config.seed_requests and not settings.greedy else None,
            stop=list(settings.stop) or None,
            stop_token_ids=list(settings.stop_token_ids) or None,
            include_stop_str_in_output=settings.include_stop_string,
            logprobs=0 if settings.logprobs else None,
            skip_special_tokens=True,
        )

    def _generation(self, request_output: Any, settings: SamplingSettings) -> Generation:
        [output] = request_output.outputs
        ids = list(output.token_ids)
        logprobs = None
        if settings.logprobs and output.logprobs is not None:
            # One entry per sampled token: a mapping token id -> Logprob that always holds the sampled token.
            logprobs = [
                float(entry[token].logprob) for token, entry in zip(ids, output.logprobs, strict=True)
            ]
        if output.finish_reason == "length":
            finish = "length"
        elif isinstance(output.stop_reason, str):
            finish = "stop_string"
        else:
            finish = "stop"  # end of sequence (stop_reason None) or a stop token (its id)
        text = output.text
        # vLLM cuts at the stop string already; cutting again is harmless and keeps one rule everywhere.
        if finish == "stop_string":
            text = cut_at_stop(text, settings.stop, settings.include_stop_string)[0]
        return Generation(
            text=text,
            prompt_token_ids=tuple(request_output.prompt_token_ids),
            completion_token_ids=tuple(ids),
            completion_logprobs=tuple(logprobs) if logprobs is not None else None,
            finish_reason=finish,  # type: ignore[arg-type]
        )

    def close(self) -> None:
        if self.__dict__.pop("llm", None) is not None:
            try:
                import gc

                import torch

                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            except ImportError:  # pragma: no cover - torch comes with vllm
                pass
