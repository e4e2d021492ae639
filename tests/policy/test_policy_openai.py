"""OpenAIPolicy against a real HTTP server on loopback that serves the tiny model (see conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from spade_rl.policy import OpenAIConfig, PolicyConfig, PolicyError, SamplingSettings, make_policy
from spade_rl.policy.openai_backend import OpenAIPolicy
from spade_rl.policy.transformers_backend import TransformersPolicy

CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours."}],
]
GREEDY = SamplingSettings(max_new_tokens=10, temperature=0)


def client(server: Any, **options: Any) -> OpenAIPolicy:
    return OpenAIPolicy(OpenAIConfig(base_url=server.base_url, max_retries=0, timeout_s=30, **options))


def test_server_token_ids_and_logprobs_match_local_generation(
    loopback_server: Any, tiny_policy: TransformersPolicy
) -> None:
    local = tiny_policy.generate(CHATS, GREEDY)
    with client(loopback_server, server_token_ids=True) as policy:
        remote = policy.generate(CHATS, GREEDY)
        assert policy.model == "tiny-random"  # asked from /v1/models once
    for r, lo in zip(remote, local, strict=True):
        assert r.text == lo.text and r.finish_reason == lo.finish_reason == "length"
        assert r.prompt_token_ids == lo.prompt_token_ids
        assert r.completion_token_ids == lo.completion_token_ids
        torch.testing.assert_close(torch.tensor(r.completion_logprobs), torch.tensor(lo.completion_logprobs))
        assert r.prompt_text is None  # no local tokenizer configured
    request = loopback_server.requests[-1]
    assert request["return_token_ids"] is True and request["logprobs"] is True
    assert "top_k" not in request  # extensions only when used: OpenAI itself rejects unknown fields


def test_without_server_ids_a_local_tokenizer_retokenises(
    loopback_server: Any, tiny_policy: TransformersPolicy
) -> None:
    stop = SamplingSettings(max_new_tokens=10, temperature=0, stop=("never-seen-xyz",))
    local = tiny_policy.generate(CHATS, stop)
    policy = OpenAIPolicy(
        OpenAIConfig(base_url=loopback_server.base_url, max_retries=0),
        model="tiny-random",
        tokenizer=tiny_policy.tokenizer,
    )
    remote = policy.generate(CHATS, stop)
    for r, lo in zip(remote, local, strict=True):
        assert r.prompt_token_ids == lo.prompt_token_ids and r.prompt_text == lo.prompt_text
        assert r.text == lo.text
        assert r.completion_token_ids == tuple(
            tiny_policy.tokenizer(r.text, add_special_tokens=False)["input_ids"]
        )
        ids, logprobs = r.completion_token_ids, r.completion_logprobs
        assert logprobs is None or len(logprobs) == len(ids)  # kept only where they align
    assert loopback_server.requests[-1]["stop"] == ["never-seen-xyz"]


def test_a_configured_tokenizer_folder_renders_prompts(
    loopback_server: Any, tmp_path: Path, tiny_policy: Any
) -> None:
    tiny_policy.tokenizer.save_pretrained(tmp_path)
    config = OpenAIConfig(base_url=loopback_server.base_url, max_retries=0, tokenizer=str(tmp_path))
    [g] = OpenAIPolicy(config, model="tiny-random").generate(CHATS[:1], GREEDY)
    assert g.prompt_token_ids == tuple(tiny_policy.render(CHATS[0]))


def test_without_any_tokenizer_ids_are_none_but_text_and_logprobs_come(loopback_server: Any) -> None:
    policy = OpenAIPolicy(OpenAIConfig(base_url=loopback_server.base_url, max_retries=0), model="tiny-random")
    [g] = policy.generate(CHATS[:1], GREEDY)
    assert g.prompt_token_ids is None and g.completion_token_ids is None
    assert g.text and g.completion_logprobs is not None and len(g.completion_logprobs) == 10


def test_sampling_settings_reach_the_server(loopback_server: Any, tiny_policy: TransformersPolicy) -> None:
    policy = client(loopback_server, server_token_ids=True)
    settings = SamplingSettings(max_new_tokens=5, temperature=0.8, top_p=0.9, top_k=40, seed=4, n=2)
    generations = policy.generate(CHATS, settings)
    assert len(generations) == 4
    first, second = loopback_server.requests[-2:]
    sent = sorted((first, second), key=lambda r: r["messages"] != CHATS[0])
    assert sent[0]["seed"] != sent[1]["seed"]  # one seed per chat
    assert sent[0]["top_k"] == 40 and sent[0]["n"] == 2 and sent[0]["max_tokens"] == 5
    assert sent[0]["temperature"] == 0.8 and sent[0]["top_p"] == 0.9
    again = policy.generate(CHATS, settings)
    assert [g.completion_token_ids for g in again] == [g.completion_token_ids for g in generations]


def test_stop_strings_through_the_server_give_stop_string(
    loopback_server: Any, tiny_policy: TransformersPolicy
) -> None:
    [full] = tiny_policy.generate(CHATS[1:], GREEDY)
    stop = next(full.text[i : i + 3] for i in range(2, len(full.text) - 3) if full.text[i] not in " \n")
    policy = client(loopback_server, server_token_ids=True)
    [g] = policy.generate(CHATS[1:], SamplingSettings(max_new_tokens=10, temperature=0, stop=(stop,)))
    assert g.finish_reason == "stop_string" and g.text == full.text[: full.text.find(stop)]


def test_retries_a_failing_server(loopback_server: Any) -> None:
    loopback_server.fail_next = 1
    policy = OpenAIPolicy(OpenAIConfig(base_url=loopback_server.base_url, max_retries=1), model="tiny-random")
    [g] = policy.generate(CHATS[:1], GREEDY)
    assert g.text and loopback_server.fail_next == 0


def test_server_errors_are_explained(loopback_server: Any) -> None:
    loopback_server.fail_next = 1
    with pytest.raises(PolicyError, match=r"server at http://127.0.0.1:\d+/v1 failed on chat 0 \(HTTP 503"):
        client(loopback_server).generate(CHATS[:1], GREEDY)
    wrong_model = OpenAIPolicy(OpenAIConfig(base_url=loopback_server.base_url, max_retries=0), model="gpt-9")
    with pytest.raises(PolicyError, match=r"HTTP 404.*gpt-9"):
        wrong_model.generate(CHATS[:1], GREEDY)


def test_unreachable_server_is_explained() -> None:
    policy = make_policy(
        PolicyConfig(
            backend="openai", model="m", openai=OpenAIConfig(base_url="http://127.0.0.1:9/v1", max_retries=0)
        )
    )
    with pytest.raises(
        PolicyError, match=r"server at http://127.0.0.1:9/v1 failed on chat 0 \(APIConnectionError"
    ):
        policy.generate(CHATS[:1], GREEDY)
