"""VLLMPolicy: its translation to and from vLLM's offline API (with a stand-in ``vllm`` module, on any
machine), and the real engine where vllm and a GPU are present (skipped elsewhere)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

from spade_rl.policy import SamplingSettings, VLLMConfig
from spade_rl.policy.base import derive_seed
from spade_rl.policy.vllm_backend import VLLMPolicy, vllm_available

CHAT = [{"role": "user", "content": "Hi"}]


class _Logprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


class _FakeLLM:
    """Records what VLLMPolicy asks of ``vllm.LLM`` and answers like vLLM's RequestOutput objects do."""

    instances: ClassVar[list[_FakeLLM]] = []

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.calls: list[tuple[list[dict[str, Any]], list[Any]]] = []
        _FakeLLM.instances.append(self)

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def generate(self, prompts: list[dict[str, Any]], params: list[Any], use_tqdm: bool) -> list[Any]:
        self.calls.append((prompts, params))
        outputs = []
        for prompt, p in zip(prompts, params, strict=True):
            stopped_by_string = bool(p.kwargs["stop"])
            ids = [11, 12] if stopped_by_string else [11, 12, 2]
            output = types.SimpleNamespace(
                text="ab",
                token_ids=ids,
                logprobs=[{t: _Logprob(-0.5 * (k + 1)), 99: _Logprob(-9.0)} for k, t in enumerate(ids)],
                finish_reason="stop",
                stop_reason=p.kwargs["stop"][0] if stopped_by_string else None,
            )
            outputs.append(
                types.SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=[output])
            )
        return outputs


class _FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tiny: tuple[Any, Any]) -> type[_FakeLLM]:
    module = types.ModuleType("vllm")
    module.LLM = _FakeLLM  # type: ignore[attr-defined]
    module.SamplingParams = _FakeSamplingParams  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(_FakeLLM, "tokenizer", tiny[1], raising=False)
    _FakeLLM.instances.clear()
    return _FakeLLM


def test_engine_options_and_sampling_params(fake_vllm: type[_FakeLLM], tmp_path: Path) -> None:
    policy = VLLMPolicy(str(tmp_path), VLLMConfig(gpu_memory_utilization=0.3, max_model_len=2048), seed=4)
    [llm] = fake_vllm.instances
    assert llm.options["model"] == str(tmp_path.resolve()) and llm.options["seed"] == 4
    assert llm.options["logprobs_mode"] == "processed_logprobs" and llm.options["max_model_len"] == 2048
    settings = SamplingSettings(max_new_tokens=7, temperature=0.6, top_k=0, seed=3, n=2)
    generations = policy.generate([CHAT], settings)
    prompts, params = llm.calls[-1]
    assert prompts == [{"prompt_token_ids": policy.render(CHAT)}] * 2  # token prompts, one request per sample
    first, second = (p.kwargs for p in params)
    assert first["max_tokens"] == 7 and first["top_k"] == -1 and first["logprobs"] == 0 and first["n"] == 1
    assert first["seed"] is None and second["seed"] is None  # unseeded by default: vLLM batches them
    assert [g.finish_reason for g in generations] == ["stop", "stop"]
    assert generations[0].completion_token_ids == (11, 12, 2)
    assert generations[0].completion_logprobs == (-0.5, -1.0, -1.5)  # the sampled token's, not the others
    assert generations[0].prompt_text is not None and generations[0].prompt_text.endswith("assistant\n")
    policy.close()


def test_per_request_seeds_only_when_asked(fake_vllm: type[_FakeLLM], tmp_path: Path) -> None:
    policy = VLLMPolicy(str(tmp_path), VLLMConfig(seed_requests=True))
    settings = SamplingSettings(max_new_tokens=7, temperature=0.6, seed=3, n=2)
    policy.generate([CHAT], settings)
    first, second = (p.kwargs for p in fake_vllm.instances[0].calls[-1][1])
    assert first["seed"] == derive_seed(3, 0) and second["seed"] == derive_seed(3, 1)
    with pytest.raises(ValueError, match="vllm seed_requests must be true or false, got 'yes'"):
        VLLMConfig(seed_requests="yes")  # type: ignore[arg-type]


def test_greedy_stop_strings_and_no_logprobs(fake_vllm: type[_FakeLLM], tmp_path: Path) -> None:
    policy = VLLMPolicy(str(tmp_path))
    settings = SamplingSettings(temperature=0, stop=("b",), logprobs=False)
    [g] = policy.generate([CHAT], settings)
    [params] = fake_vllm.instances[0].calls[-1][1]
    assert params.kwargs["seed"] is None and params.kwargs["logprobs"] is None
    assert g.finish_reason == "stop_string" and g.text == "a" and g.completion_logprobs is None


@pytest.mark.skipif(not vllm_available(), reason="vllm is a GPU extra, not installed here")
def test_real_engine_generates_with_logprobs(tmp_path: Path, tiny: tuple[Any, Any]) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vllm needs a GPU")
    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    policy = VLLMPolicy(str(tmp_path), VLLMConfig(gpu_memory_utilization=0.2, enforce_eager=True))
    try:
        settings = SamplingSettings(max_new_tokens=8, temperature=1.0, seed=1)
        first = policy.generate([CHAT, CHAT], settings)
        assert [g.completion_token_ids for g in policy.generate([CHAT, CHAT], settings)] == [
            g.completion_token_ids for g in first
        ]
        for g in first:
            assert g.completion_logprobs is not None and len(g.completion_logprobs) == len(
                g.completion_token_ids
            )
            assert g.prompt_token_ids == tuple(policy.render(CHAT))
    finally:
        policy.close()
