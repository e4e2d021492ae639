"""ServerPolicy: token prompts split across two loopback stand-ins for vLLM servers serving the tiny model."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from spade_rl.policy import PolicyConfig, PolicyError, SamplingSettings, ServersConfig, make_policy
from spade_rl.policy.config import DEFAULT_SERVER_CONCURRENCY
from spade_rl.policy.servers import ServerPolicy, split_evenly
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.testing.fake_vllm import SERVED_MODEL, FakeVLLMServer

CHATS = [[{"role": "user", "content": f"Count to {k}."}] for k in range(5)]
GREEDY = SamplingSettings(max_new_tokens=6, temperature=0)


@pytest.fixture(scope="module")
def two_servers(tiny: tuple[Any, Any]) -> Iterator[list[FakeVLLMServer]]:
    model, tokenizer = tiny
    servers = [
        FakeVLLMServer(TransformersPolicy(copy.deepcopy(model), tokenizer), max_model_len=1000 + k)
        for k in range(2)
    ]
    for server in servers:
        server.start()
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


def client(servers: list[FakeVLLMServer], tokenizer: Any, **options: Any) -> ServerPolicy:
    urls = tuple(s.base_url for s in servers)
    return ServerPolicy(ServersConfig(base_urls=urls, **{"max_retries": 0, **options}), tokenizer=tokenizer)


def prompts_sent(server: FakeVLLMServer, since: int) -> list[list[int]]:
    return [body["prompt"] for route, body in server.calls[since:] if route == "/v1/completions"]


def test_split_evenly_is_contiguous_and_balanced() -> None:
    assert split_evenly(5, 2) == [range(0, 3), range(3, 5)]
    assert split_evenly(2, 3) == [range(0, 1), range(1, 2), range(2, 2)]
    assert split_evenly(0, 2) == [range(0, 0), range(0, 0)]
    for count in range(12):
        for parts in range(1, 5):
            ranges = split_evenly(count, parts)
            assert [i for r in ranges for i in r] == list(range(count))
            assert max(map(len, ranges)) - min(map(len, ranges)) <= 1
    with pytest.raises(ValueError):
        split_evenly(3, 0)


def test_the_batch_is_split_across_servers_and_matches_local_generation(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy
) -> None:
    policy = client(two_servers, tiny_policy.tokenizer)
    assert policy.served_model == SERVED_MODEL and policy.max_model_len == 1000  # the least of the two
    since = [len(s.calls) for s in two_servers]
    remote = policy.generate(CHATS, GREEDY)
    local = tiny_policy.generate(CHATS, GREEDY)
    for r, lo in zip(remote, local, strict=True):
        assert r.prompt_token_ids == lo.prompt_token_ids and r.completion_token_ids == lo.completion_token_ids
        assert r.text == lo.text and r.finish_reason == lo.finish_reason
        assert r.completion_logprobs == pytest.approx(lo.completion_logprobs, abs=1e-5)
        assert r.prompt_text == lo.prompt_text
    rendered = [tiny_policy.render(chat) for chat in CHATS]
    # contiguous shares of 3 and 2 (requests of one share run concurrently: any order)
    assert sorted(prompts_sent(two_servers[0], since[0])) == sorted(rendered[:3])
    assert sorted(prompts_sent(two_servers[1], since[1])) == sorted(rendered[3:])
    body = next(b for route, b in two_servers[0].calls[since[0] :] if route == "/v1/completions")
    assert body["return_token_ids"] is True and body["logprobs"] == 0 and body["n"] == 1
    assert body["model"] == SERVED_MODEL and "seed" not in body and "top_k" not in body  # greedy: no seed
    policy.close()


def test_sampling_seeds_do_not_depend_on_which_server_draws(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy
) -> None:
    settings = SamplingSettings(max_new_tokens=5, temperature=1.0, top_k=50, seed=11, n=2)
    ids = [tiny_policy.render(chat) for chat in CHATS[:3]]
    since = len(two_servers[1].calls)
    both = client(two_servers, tiny_policy.tokenizer, seed_requests=True).generate_tokens(ids, settings)
    alone = client(two_servers[1:], tiny_policy.tokenizer, seed_requests=True).generate_tokens(ids, settings)
    assert len(both) == 6
    assert [g.completion_token_ids for g in both] == [g.completion_token_ids for g in alone]
    sent = [b for route, b in two_servers[1].calls[since:] if route == "/v1/completions"]
    assert [b["prompt"] for b in sent[:2]] == [ids[2], ids[2]]  # its share of the split: prompt 2, twice
    seeds = [b["seed"] for b in sent[2:]]  # then all six samples alone, with the same seeds as split
    assert len(set(seeds)) == 6 and all(b["top_k"] == 50 and b["n"] == 1 for b in sent)
    assert {b["seed"] for b in sent[:2]} <= set(seeds)
    again = client(two_servers, tiny_policy.tokenizer, seed_requests=True).generate_tokens(ids, settings)
    assert [g.completion_token_ids for g in again] == [g.completion_token_ids for g in both]


def test_no_per_request_seeds_unless_asked(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy
) -> None:
    # vLLM samples seeded requests one at a time: by default none is sent, and the servers batch them.
    settings = SamplingSettings(max_new_tokens=3, temperature=1.0, seed=11, n=2)
    since = len(two_servers[0].calls)
    client(two_servers[:1], tiny_policy.tokenizer).generate_tokens([tiny_policy.render(CHATS[0])], settings)
    sent = [b for route, b in two_servers[0].calls[since:] if route == "/v1/completions"]
    assert len(sent) == 2 and all("seed" not in b for b in sent)
    with pytest.raises(ValueError, match="servers seed_requests must be true or false, got 1"):
        ServersConfig(seed_requests=1)  # type: ignore[arg-type]


def test_stop_strings_stop_tokens_and_length(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy
) -> None:
    policy = client(two_servers[:1], tiny_policy.tokenizer)
    [full] = tiny_policy.generate(CHATS[1:2], SamplingSettings(max_new_tokens=10, temperature=0))
    stop = next(full.text[i : i + 3] for i in range(2, len(full.text) - 3) if full.text[i] not in " \n")
    [g] = policy.generate(CHATS[1:2], SamplingSettings(max_new_tokens=10, temperature=0, stop=(stop,)))
    assert g.finish_reason == "stop_string" and g.text == full.text[: full.text.find(stop)]
    token = full.completion_token_ids[2]
    [g] = policy.generate(
        CHATS[1:2], SamplingSettings(max_new_tokens=10, temperature=0, stop_token_ids=(token,))
    )
    assert g.finish_reason == "stop" and g.completion_token_ids == full.completion_token_ids[:3]
    [g] = policy.generate(CHATS[1:2], SamplingSettings(max_new_tokens=2, temperature=0, logprobs=False))
    assert g.finish_reason == "length" and len(g.completion_token_ids) == 2 and g.completion_logprobs is None


def test_each_prompt_has_its_own_budget_of_new_tokens(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy
) -> None:
    policy = client(two_servers, tiny_policy.tokenizer)
    ids = [tiny_policy.render(chat) for chat in CHATS[:3]]
    since = [len(s.calls) for s in two_servers]
    generations = policy.generate_tokens(ids, GREEDY, budgets=[2, 6, 4])
    sent = {
        tuple(body["prompt"]): body["max_tokens"]
        for server, start in zip(two_servers, since, strict=True)
        for route, body in server.calls[start:]
        if route == "/v1/completions"
    }
    assert sent == {tuple(ids[0]): 2, tuple(ids[1]): 6, tuple(ids[2]): 4}  # max_tokens per request
    assert [len(g.completion_token_ids) for g in generations] == [2, 6, 4]
    policy.close()


def test_a_server_shorter_than_the_rollout_context_is_refused_naming_it(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    policy = client(two_servers, tiny_policy.tokenizer)  # max_model_len 1000 and 1001
    assert policy.context_lengths == {two_servers[0].root: 1000, two_servers[1].root: 1001}
    policy.check_context(1000, key="rollout.max_context_tokens")  # fits both
    with pytest.raises(PolicyError) as refused:
        policy.check_context(1001, key="rollout.max_context_tokens")
    message = str(refused.value)
    assert f"the server {two_servers[0].root} serves 'fake-vllm' with max_model_len 1000" in message
    assert "rollout.max_context_tokens = 1001" in message and "HTTP 400" in message
    assert "Set rollout.max_context_tokens to at most 1000" in message and "--max-model-len 1001" in message
    assert two_servers[1].root not in message  # 1001 holds it
    policy.context_lengths[two_servers[1].root] = None  # a server that does not say is warned about
    with caplog.at_level("WARNING"):
        policy.check_context(900, key="rollout.max_context_tokens")
    assert f"{two_servers[1].root} do not report max_model_len" in caplog.text
    policy.close()


def test_concurrency_is_each_servers_capacity_unless_set(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    servers = [
        FakeVLLMServer(TransformersPolicy(model, tokenizer), max_num_seqs=48).start(),  # reports its capacity
        FakeVLLMServer(TransformersPolicy(model, tokenizer), max_num_seqs=None).start(),  # reports none
        FakeVLLMServer(TransformersPolicy(model, tokenizer), dev_mode=False).start(),  # no /server_info
    ]
    try:
        policy = client(servers, tokenizer)
        assert policy.concurrency == [48, DEFAULT_SERVER_CONCURRENCY, DEFAULT_SERVER_CONCURRENCY]
        assert [pool._max_workers for pool in policy._pools] == [48, 256, 256]
        policy.close()
        chosen = client(servers, tokenizer, concurrency=5)  # the user's number, as it is, for every server
        assert chosen.concurrency == [5, 5, 5] and [pool._max_workers for pool in chosen._pools] == [5, 5, 5]
        chosen.close()
    finally:
        for server in servers:
            server.stop()
    with pytest.raises(ValueError, match="servers concurrency must be a positive integer"):
        ServersConfig(concurrency=0)


def test_made_from_a_policy_config(two_servers: list[FakeVLLMServer], tmp_path: Any, tiny: Any) -> None:
    tiny[1].save_pretrained(tmp_path)  # the tokenizer folder that policy.model names
    config = PolicyConfig(
        backend="servers", model=str(tmp_path), servers=ServersConfig(base_urls=(two_servers[0].root,))
    )
    policy = make_policy(config)
    assert isinstance(policy, ServerPolicy) and policy.roots == (two_servers[0].root,)
    [g] = policy.generate(CHATS[:1], GREEDY)
    assert len(g.completion_token_ids) == 6


def test_start_up_refuses_unreachable_servers_and_different_models(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy
) -> None:
    with pytest.raises(PolicyError, match=r"http://127.0.0.1:9 does not answer GET /v1/models"):
        client([*two_servers[:1], _Unreachable()], tiny_policy.tokenizer)  # type: ignore[list-item]
    with pytest.raises(PolicyError, match=r"does not serve 'other-model' \(it serves \['fake-vllm'\]\)"):
        client(two_servers, tiny_policy.tokenizer, served_model="other-model")


def test_a_server_without_token_ids_is_refused(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = client(two_servers[:1], tiny_policy.tokenizer)
    original = FakeVLLMServer.complete

    def plain_openai(self: FakeVLLMServer, body: dict[str, Any]) -> dict[str, Any]:
        answer = original(self, body)
        for choice in answer["choices"]:
            choice.pop("token_ids")
        return answer

    monkeypatch.setattr(FakeVLLMServer, "complete", plain_openai)
    with pytest.raises(PolicyError, match="returned no token ids: the servers backend needs vLLM's"):
        policy.generate(CHATS[:1], GREEDY)


def test_server_errors_are_retried_then_explained(
    two_servers: list[FakeVLLMServer], tiny_policy: TransformersPolicy
) -> None:
    server = two_servers[1]
    retrying = client([server], tiny_policy.tokenizer, max_retries=1)
    server.fail_next = 1
    [g] = retrying.generate(CHATS[:1], GREEDY)
    assert g.completion_token_ids and server.fail_next == 0
    failing = client([server], tiny_policy.tokenizer)
    server.fail_next = 1
    with pytest.raises(PolicyError, match=rf"the server {server.root} failed on sample 0 \(HTTP 503"):
        failing.generate(CHATS[:1], GREEDY)


class _Unreachable:
    base_url = "http://127.0.0.1:9/v1"
