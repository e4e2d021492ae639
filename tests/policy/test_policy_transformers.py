"""TransformersPolicy over the tiny random model: padding, seeds, log-probs, stopping, the chat template."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from spade_rl.policy import SamplingSettings, TransformersConfig, tiny_random_model
from spade_rl.policy.sampling import filter_top_k, filter_top_p
from spade_rl.policy.transformers_backend import TransformersPolicy

CHATS = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "You play games."},
        {"role": "user", "content": "Describe the board, then move."},
    ],
    [
        {
            "role": "user",
            "content": "A somewhat longer question about mazes, keys and doors, please answer it.",
        }
    ],
]
GREEDY = SamplingSettings(max_new_tokens=12, temperature=0)


def forward_logprobs(
    model: Any, prompt: tuple[int, ...], completion: tuple[int, ...], temperature: float
) -> torch.Tensor:
    """Log-probs of ``completion`` after ``prompt`` from one plain forward pass over the whole sequence."""
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_prompts_come_from_the_tokenizer_chat_template(tiny_policy: TransformersPolicy) -> None:
    tokenizer = tiny_policy.tokenizer
    generations = tiny_policy.generate(CHATS, GREEDY)
    for chat, g in zip(CHATS, generations, strict=True):
        expected = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
        assert list(g.prompt_token_ids) == expected
        assert g.prompt_text == tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, tokenize=False
        )
        assert g.prompt_text.endswith("<|im_start|>assistant\n")
    assert tiny_policy.render(CHATS[0]) == list(generations[0].prompt_token_ids)
    assert tiny_policy.render(CHATS[1], add_generation_prompt=False)[-2:] == tokenizer.encode("<|im_end|>\n")


def test_batched_left_padded_greedy_matches_one_at_a_time(tiny_policy: TransformersPolicy) -> None:
    batched = tiny_policy.generate(CHATS, GREEDY)
    assert len({len(g.prompt_token_ids) for g in batched}) == 3  # different lengths: real padding
    for chat, together in zip(CHATS, batched, strict=True):
        [alone] = tiny_policy.generate([chat], GREEDY)
        assert alone.completion_token_ids == together.completion_token_ids
        assert alone.text == together.text
    small_batches = TransformersPolicy(
        tiny_policy.model, tiny_policy.tokenizer, TransformersConfig(batch_size=2)
    )
    assert [g.completion_token_ids for g in small_batches.generate(CHATS, GREEDY)] == [
        g.completion_token_ids for g in batched
    ]


def test_seeds_reproduce_and_different_seeds_differ(tiny_policy: TransformersPolicy) -> None:
    hot = SamplingSettings(max_new_tokens=10, temperature=1.0, seed=11)
    first = tiny_policy.generate(CHATS, hot)
    again = tiny_policy.generate(CHATS, hot)
    other = tiny_policy.generate(CHATS, SamplingSettings(max_new_tokens=10, temperature=1.0, seed=12))
    assert [g.completion_token_ids for g in first] == [g.completion_token_ids for g in again]
    assert all(a.completion_token_ids != b.completion_token_ids for a, b in zip(first, other, strict=True))
    # Sample 0 draws from its own generator: the same whatever else shares its batch.
    [alone] = tiny_policy.generate(CHATS[:1], hot)
    assert alone.completion_token_ids == first[0].completion_token_ids


def test_logprobs_match_a_separate_forward_pass(tiny_policy: TransformersPolicy) -> None:
    model = tiny_policy.model
    for settings, temperature in (
        (SamplingSettings(max_new_tokens=8, temperature=0.7, seed=3), 0.7),
        (GREEDY, 1.0),
    ):
        for g in tiny_policy.generate(CHATS, settings):
            expected = forward_logprobs(model, g.prompt_token_ids, g.completion_token_ids, temperature)
            assert len(g.completion_logprobs) == len(g.completion_token_ids)
            torch.testing.assert_close(torch.tensor(g.completion_logprobs), expected, atol=2e-4, rtol=1e-4)
    [quiet] = tiny_policy.generate(CHATS[:1], SamplingSettings(max_new_tokens=3, logprobs=False))
    assert quiet.completion_logprobs is None


def test_n_samples_per_chat_in_chat_major_order(tiny_policy: TransformersPolicy) -> None:
    generations = tiny_policy.generate(CHATS[:2], SamplingSettings(max_new_tokens=6, n=3, seed=5))
    assert len(generations) == 6
    assert [g.prompt_token_ids for g in generations[:3]] == [tuple(tiny_policy.render(CHATS[0]))] * 3
    assert generations[3].prompt_token_ids == tuple(tiny_policy.render(CHATS[1]))
    assert len({g.completion_token_ids for g in generations[:3]}) == 3


def test_top_k_one_and_tiny_top_p_sample_the_greedy_token(tiny_policy: TransformersPolicy) -> None:
    greedy = [g.completion_token_ids for g in tiny_policy.generate(CHATS, GREEDY)]
    for settings in (
        SamplingSettings(max_new_tokens=12, temperature=1.0, top_k=1, seed=9),
        SamplingSettings(max_new_tokens=12, temperature=1.0, top_p=1e-6, seed=9),
    ):
        assert [g.completion_token_ids for g in tiny_policy.generate(CHATS, settings)] == greedy
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0]])
    assert torch.isinf(filter_top_k(logits, 2)).tolist() == [[False, True, False, True]]
    # softmax(3, 1, 2, 0) = 0.64, 0.09, 0.24, 0.03: top-p 0.7 keeps the two most likely (0.64 < 0.7 <= 0.88).
    assert torch.isinf(filter_top_p(logits, 0.7)).tolist() == [[False, True, False, True]]


def test_finish_reasons_length_and_stop_token(tiny_policy: TransformersPolicy) -> None:
    [long] = tiny_policy.generate(CHATS[1:2], GREEDY)
    assert long.finish_reason == "length" and len(long.completion_token_ids) == GREEDY.max_new_tokens
    ids = long.completion_token_ids
    stop_at = next(i for i in range(3, len(ids)) if ids[i] not in ids[:i])  # first occurrence at i
    settings = SamplingSettings(max_new_tokens=12, temperature=0, stop_token_ids=(ids[stop_at],))
    [stopped] = tiny_policy.generate(CHATS[1:2], settings)
    assert stopped.finish_reason == "stop"
    assert stopped.completion_token_ids == ids[: stop_at + 1]  # the stop token is kept in the ids...
    assert stopped.text == tiny_policy.tokenizer.decode(
        ids[:stop_at], skip_special_tokens=True
    )  # ...not the text


def test_every_end_of_sequence_id_of_the_generation_config_stops(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    model, _ = tiny_random_model(seed=1, tokenizer=tokenizer)
    [free] = TransformersPolicy(model, tokenizer).generate(CHATS[:1], GREEDY)
    ids = free.completion_token_ids
    stop_at = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])
    # Chat models often list several end ids (e.g. <|eot_id|> and <|end_of_text|>); each must end a sequence.
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, ids[stop_at]]
    [g] = TransformersPolicy(model, tokenizer).generate(CHATS[:1], GREEDY)
    assert g.finish_reason == "stop" and g.completion_token_ids == ids[: stop_at + 1]


def test_stop_strings_cut_the_text_and_keep_the_tokens(tiny_policy: TransformersPolicy) -> None:
    [full] = tiny_policy.generate(CHATS[2:], GREEDY)
    text = full.text
    stop = next(
        text[i : i + 3] for i in range(2, len(text) - 3) if text[i : i + 3].strip() and text[i] != " "
    )
    cut = text.find(stop)
    settings = SamplingSettings(max_new_tokens=12, temperature=0, stop=(stop, "never-seen-xyz"))
    [g] = tiny_policy.generate(CHATS[2:], settings)
    assert g.finish_reason == "stop_string"
    assert g.text == text[:cut]
    assert full.completion_token_ids[: len(g.completion_token_ids)] == g.completion_token_ids
    assert stop in tiny_policy.tokenizer.decode(g.completion_token_ids, skip_special_tokens=True)
    [kept] = tiny_policy.generate(
        CHATS[2:], SamplingSettings(max_new_tokens=12, temperature=0, stop=(stop,), include_stop_string=True)
    )
    assert kept.text == text[: cut + len(stop)]


def test_token_prompts_continue_a_conversation_exactly(tiny_policy: TransformersPolicy) -> None:
    [first] = tiny_policy.generate(CHATS[:1], GREEDY)
    turn = [*CHATS[0], {"role": "assistant", "content": "ok"}]
    suffix = tiny_policy.render_suffix(turn, [*turn, {"role": "user", "content": "Go on."}])
    assert (
        tiny_policy.tokenizer.decode(suffix) == "<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n"
    )
    sequence = [*first.prompt_token_ids, *first.completion_token_ids, *suffix]
    [second] = tiny_policy.generate_tokens([sequence], GREEDY)
    assert second.prompt_token_ids == tuple(sequence) and second.prompt_text is None


def test_generation_uses_the_live_weights_and_restores_train_mode(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    model, _ = tiny_random_model(seed=2, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer)
    [before] = policy.generate(CHATS[:1], GREEDY)
    model.train()
    with torch.no_grad():  # what an optimiser step does: change the parameters in place
        for parameter in model.model.layers[0].parameters():
            parameter.mul_(-3.0)
    [after] = policy.generate(CHATS[:1], GREEDY)
    assert model.training and policy.model is model
    assert after.completion_token_ids != before.completion_token_ids


def test_prompt_longer_than_the_model_is_refused(tiny_policy: TransformersPolicy) -> None:
    with pytest.raises(
        ValueError, match=r"prompt 0 has 4090 tokens; with max_new_tokens=12 that exceeds the model's 4096"
    ):
        tiny_policy.generate_tokens([[5] * 4090], GREEDY)


def test_each_prompt_ends_at_its_own_budget(tiny_policy: TransformersPolicy) -> None:
    prompts = [tiny_policy.render(chat) for chat in CHATS]
    for settings in (GREEDY, SamplingSettings(max_new_tokens=12, temperature=1.0, seed=4, n=2)):
        whole = tiny_policy.generate_tokens(prompts, settings)
        cut = tiny_policy.generate_tokens(prompts, settings, budgets=[3, 12, 7])
        for k, (w, c) in enumerate(zip(whole, cut, strict=True)):
            budget = [3, 12, 7][k // settings.n]
            # the same row, seed and tokens, ended at its own budget while the others ran on
            assert c.completion_token_ids == w.completion_token_ids[:budget]
            assert c.completion_logprobs == pytest.approx(w.completion_logprobs[:budget], abs=1e-5)
            if len(w.completion_token_ids) > budget:
                assert c.finish_reason == "length"
    # the model's positions are checked against each prompt's own budget
    [g] = tiny_policy.generate_tokens([[5] * 4090], GREEDY, budgets=[6])
    assert len(g.completion_token_ids) <= 6
    with pytest.raises(ValueError, match=r"each budget must be an int from 1 to max_new_tokens=12, got 13"):
        tiny_policy.generate_tokens(prompts, GREEDY, budgets=[3, 13, 7])
    with pytest.raises(ValueError, match=r"budgets has 2 entries for 3 prompts"):
        tiny_policy.generate_tokens(prompts, GREEDY, budgets=[3, 4])
