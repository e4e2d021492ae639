"""Validation of the policy's settings and records: bad input names the key and what is allowed."""

from __future__ import annotations

import pytest

from spade_rl.policy import (
    FakePolicy,
    Generation,
    OpenAIConfig,
    PolicyConfig,
    PolicyError,
    SamplingSettings,
    TransformersConfig,
    VLLMConfig,
    derive_seed,
    make_policy,
)
from spade_rl.policy.base import check_chats, check_token_prompts, cut_at_stop


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature must be >= 0"),
        ({"temperature": float("nan")}, "temperature must be a number"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_k": -1}, "top_k must be an integer >= 0"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an integer"),
        ({"n": 0}, "n must be an integer >= 1"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"seed": True}, "seed must be an integer"),
        ({"stop": "</a>"}, r"stop must be a tuple of strings.*stop=\('</answer>',\)"),
        ({"stop": ("",)}, "non-empty strings"),
        ({"stop_token_ids": (-3,)}, "stop_token_ids"),
        ({"logprobs": "yes"}, "logprobs must be True or False"),
    ],
)
def test_sampling_settings_reject_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingSettings(**kwargs)


def test_sampling_settings_normalise_lists_and_are_frozen() -> None:
    settings = SamplingSettings(stop=["</a>", "\n\n"], stop_token_ids=[5])
    assert settings.stop == ("</a>", "\n\n") and settings.stop_token_ids == (5,)
    assert SamplingSettings(temperature=0).greedy and not settings.greedy
    with pytest.raises(AttributeError):
        settings.temperature = 0.5  # type: ignore[misc]


def test_generation_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="finish_reason 'eos' is not one of"):
        Generation("x", (1,), (2,), None, "eos")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 log-probabilities for 1 completion tokens"):
        Generation("x", (1,), (2,), (-1.0, -2.0), "stop")
    g = Generation("x", [1, 2], [3], [-0.5], "length")
    assert g.prompt_token_ids == (1, 2) and g.completion_logprobs == (-0.5,)


@pytest.mark.parametrize(
    ("chats", "message"),
    [
        ("hello", "chats must be a list of chats"),
        ([[]], "chat 0 must be a non-empty list of messages"),
        ([{"role": "user", "content": "x"}], "chat 0 must be a non-empty list"),
        ([["hi"]], "chat 0 message 0 must be a dict"),
        ([[{"role": "user"}]], "chat 0 message 0 needs a string 'content'"),
        ([[{"role": "user", "content": "a"}], [{"content": "b"}]], "chat 1 message 0 needs a string 'role'"),
    ],
)
def test_bad_chats_are_explained(chats: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_chats(chats)


def test_bad_token_prompts_are_explained() -> None:
    with pytest.raises(ValueError, match="token prompt 1 must be a non-empty list"):
        check_token_prompts([[1, 2], []])
    with pytest.raises(ValueError, match="non-negative ints"):
        check_token_prompts([[1, -2]])


def test_cut_at_stop_takes_the_earliest_stop_string() -> None:
    assert cut_at_stop("a</b>c</a>d", ("</a>", "</b>"), include=False) == ("a", True)
    assert cut_at_stop("a</b>c</a>d", ("</a>", "</b>"), include=True) == ("a</b>", True)
    assert cut_at_stop("abc", ("x",), include=False) == ("abc", False)


def test_derived_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(7, 0) == derive_seed(7, 0)
    seeds = {derive_seed(s, i) for s in range(20) for i in range(20)}
    assert len(seeds) == 400 and all(0 <= s < 2**63 for s in seeds)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PolicyConfig(backend="llamacpp"), r"policy backend 'llamacpp' is not allowed; allowed: \["),
        (lambda: PolicyConfig(model=""), "policy model must be a non-empty name or path"),
        (lambda: PolicyConfig(seed=-1), "policy seed must be an integer >= 0"),
        (lambda: PolicyConfig(openai={"base_url": "x"}), "policy openai must be a OpenAIConfig"),
        (lambda: TransformersConfig(device="tpu"), "transformers device 'tpu' is not allowed"),
        (lambda: TransformersConfig(dtype="fp8"), "transformers dtype 'fp8' is not allowed"),
        (lambda: TransformersConfig(batch_size=0), "transformers batch_size must be a positive integer"),
        (lambda: OpenAIConfig(base_url="localhost:8000"), "must start with http:// or https://"),
        (lambda: OpenAIConfig(max_retries=-1), "max_retries must be an integer >= 0"),
        (lambda: OpenAIConfig(concurrency=0), "concurrency must be a positive integer"),
        (lambda: VLLMConfig(gpu_memory_utilization=1.5), r"gpu_memory_utilization must be in \(0, 1\]"),
        (lambda: VLLMConfig(logprobs_mode="raw_logits"), "vllm logprobs_mode 'raw_logits' is not allowed"),
    ],
)
def test_bad_config_is_explained(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_allowed_backends_are_listed_in_the_error() -> None:
    with pytest.raises(ValueError) as info:
        PolicyConfig(backend="tgi")
    assert all(name in str(info.value) for name in ("transformers", "openai", "vllm"))


def test_config_from_dict_builds_nested_sections_and_rejects_unknown_keys() -> None:
    config = PolicyConfig.from_dict(
        {"backend": "openai", "model": "m", "openai": {"base_url": "http://127.0.0.1:9/v1", "max_retries": 0}}
    )
    assert config.openai == OpenAIConfig(base_url="http://127.0.0.1:9/v1", max_retries=0)
    assert config.transformers == TransformersConfig()
    with pytest.raises(ValueError, match=r"unknown policy setting\(s\) \['temprature'\]; allowed: \["):
        PolicyConfig.from_dict({"temprature": 0.5})
    with pytest.raises(ValueError, match=r"unknown policy.vllm setting\(s\) \['gpu'\]"):
        PolicyConfig.from_dict({"vllm": {"gpu": 1}})


def test_api_key_is_kept_out_of_the_repr() -> None:
    assert "sk-secret" not in repr(OpenAIConfig(api_key="sk-secret"))


def test_make_policy_wants_a_policy_config() -> None:
    with pytest.raises(TypeError, match="make_policy takes a PolicyConfig"):
        make_policy({"backend": "transformers"})  # type: ignore[arg-type]


def test_vllm_backend_without_vllm_says_what_to_do() -> None:
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is installed here")
    with pytest.raises(PolicyError, match="needs vllm, a GPU-only extra"):
        make_policy(PolicyConfig(backend="vllm"))


def test_a_policy_without_generate_tokens_says_so() -> None:
    from spade_rl.policy.openai_backend import OpenAIPolicy

    policy = OpenAIPolicy(OpenAIConfig(base_url="http://127.0.0.1:9/v1"), model="m")
    with pytest.raises(PolicyError, match="takes chats, not token prompts"):
        policy.generate_tokens([[1, 2]], SamplingSettings())
    with pytest.raises(PolicyError, match="no tokenizer to render chats with"):
        policy.render([{"role": "user", "content": "x"}])
    policy.close()
    assert isinstance(FakePolicy(["x"]), FakePolicy)
