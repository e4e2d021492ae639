"""Thinking mode per role (``rollout.thinking``, ``design.thinking``) through the real sandbox.

The agent's and the designer's thinking (``<think>...</think>``) is cut from what the environment and the
design parser read, and kept in the token ids, the mask and the transcript. The templates are hand-written
ChatML ones with Qwen3's ``enable_thinking`` switch, set on copies of the default tokenizer (the unit tests
of the switch and of the stripping are in ``tests/policy/test_policy_thinking.py``)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from chat_templates import (
    CHATML,
    EMPTY_BLOCK,
    OPENING_TEMPLATE,
    REWRITING_TEMPLATE,
    with_template,
)
from spade_rl.archive import Archive
from spade_rl.corpus import Corpus
from spade_rl.design import ValidationSettings
from spade_rl.designer.phase import DesignPhaseConfig, design_environments
from spade_rl.envs import reference
from spade_rl.policy import FakePolicy, PolicyError, tiny_random_model
from spade_rl.policy.thinking import strip_thinking
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes

VALID_DESIGN = (Path(__file__).parents[1] / "design" / "designs" / "valid_multi_turn.py").read_text()
SETTINGS = ValidationSettings(call_timeout_s=1.0)


def thinking_guesser(chat):
    """A perfect player of `guess` that thinks first: the thinking holds a decoy answer."""
    low, high = 1, 100
    for number, direction in re.findall(r"(\d+) is too (low|high)", " ".join(m["content"] for m in chat)):
        if direction == "low":
            low = max(low, int(number) + 1)
        else:
            high = min(high, int(number) - 1)
    return (
        f"<think>\nNot \\boxed{{0}}: the range is {low}-{high}.\n</think>\n\n\\boxed{{{(low + high) // 2}}}"
    )


def model_text(episode, tokenizer):
    return tokenizer.decode([t for t, m in zip(episode.token_ids, episode.mask, strict=True) if m])


def test_the_settings_are_checked():
    assert RolloutConfig().thinking == "template" and DesignPhaseConfig().thinking == "template"
    with pytest.raises(ValueError, match=r"rollout\.thinking must be one of \['template', 'on', 'off'\]"):
        RolloutConfig(thinking="yes")
    with pytest.raises(ValueError, match=r"design\.thinking must be one of"):
        DesignPhaseConfig(thinking=True)
    # A forced opening of the turn leaves no room to think before it.
    with pytest.raises(ValueError, match=r"rollout\.action_prefix"):
        RolloutConfig(thinking="on", action_prefix={"games": "\\boxed{"})
    RolloutConfig(thinking="off", action_prefix={"games": "\\boxed{"})
    with pytest.raises(ValueError, match=r"form 'question'"):
        DesignPhaseConfig(thinking="on", form="question")


def test_the_agent_thinks_in_its_tokens_and_the_environment_reads_the_action(sandbox, thinking_tokenizer):
    policy = FakePolicy(thinking_guesser, tokenizer=thinking_tokenizer)
    spec = EpisodeSpec(reference.source("guess"), seed=5)
    [episode] = run_episodes(policy, sandbox, [spec], RolloutConfig(thinking="on"))
    assert episode.won and 1 < len(episode.turns) <= 7  # the decoy \boxed{0} never reached the game
    for turn in episode.turns:
        assert re.fullmatch(r"\\boxed\{\d+\}", turn.action), turn.action
        assert turn.text.startswith("<think>\nNot \\boxed{0}") and turn.text.endswith(turn.action)
    # The transcript keeps the whole text; the model's tokens (thinking included) are masked in.
    assistant = [m["content"] for m in episode.messages if m["role"] == "assistant"]
    assert assistant == [turn.text for turn in episode.turns]
    tokenizer = thinking_tokenizer
    assert model_text(episode, tokenizer) == "".join(t.text + tokenizer.eos_token for t in episode.turns)
    assert len(episode.token_ids) == len(episode.mask) == len(episode.logprobs)
    rendered = tokenizer.apply_chat_template(episode.messages, tokenize=False, enable_thinking=True)
    assert tokenizer.decode(episode.token_ids) == rendered.rstrip("\n")


def test_a_template_that_drops_past_thinking_still_plays_token_exact(sandbox, tokenizer):
    """Qwen3's template writes past turns without their thinking: the conversation keeps what the model
    saw (its thinking included), and each observation is appended as the template writes it."""
    rewriting = with_template(tokenizer, REWRITING_TEMPLATE)
    policy = FakePolicy(thinking_guesser, tokenizer=rewriting)
    [episode] = run_episodes(
        policy, sandbox, [EpisodeSpec(reference.source("guess"), seed=5)], RolloutConfig(thinking="on")
    )
    assert episode.won and len(episode.turns) > 1
    plain = with_template(tokenizer, CHATML)  # every message as it is, thinking included
    assert (
        rewriting.decode(episode.token_ids)
        == plain.apply_chat_template(episode.messages, tokenize=False)[:-1]
    )
    assert model_text(episode, rewriting) == "".join(t.text + rewriting.eos_token for t in episode.turns)


def test_thinking_off_closes_an_empty_block_before_every_turn(sandbox, thinking_tokenizer):
    policy = FakePolicy(lambda chat: "\\boxed{50}", tokenizer=thinking_tokenizer)
    config = RolloutConfig(thinking="off", max_turns=3)
    [episode] = run_episodes(policy, sandbox, [EpisodeSpec(reference.source("guess"), seed=5)], config)
    decoded = thinking_tokenizer.decode(episode.token_ids)
    assert decoded.count("<|im_start|>assistant\n" + EMPTY_BLOCK + "\\boxed{50}") == len(episode.turns) == 3
    assert [t.action for t in episode.turns] == ["\\boxed{50}"] * 3 and all(
        t.text == "" for t in episode.turns
    )
    assert model_text(episode, thinking_tokenizer) == ("\\boxed{50}" + thinking_tokenizer.eos_token) * 3
    # The same play with the template's default: the same model tokens, no empty blocks.
    [default] = run_episodes(
        FakePolicy(lambda chat: "\\boxed{50}", tokenizer=thinking_tokenizer),
        sandbox,
        [EpisodeSpec(reference.source("guess"), seed=5)],
        RolloutConfig(max_turns=3),
    )
    assert "<think>" not in thinking_tokenizer.decode(default.token_ids)
    assert model_text(default, thinking_tokenizer) == model_text(episode, thinking_tokenizer)


def test_a_forced_opening_starts_the_action_even_where_the_prompt_opened_thinking(sandbox, tokenizer):
    opening = with_template(tokenizer, OPENING_TEMPLATE)  # its default: the prompt opens <think>
    policy = FakePolicy(lambda chat: "50}", tokenizer=opening)
    config = RolloutConfig(max_turns=2, action_prefix={"games": "\\boxed{"}, action_stop={"games": ["}"]})
    [episode] = run_episodes(policy, sandbox, [EpisodeSpec(reference.source("guess"), seed=5)], config)
    assert [t.action for t in episode.turns] == ["\\boxed{50}"] * 2


def test_a_template_without_the_switch_is_refused_before_anything_plays(sandbox, tokenizer):
    policy = FakePolicy(lambda chat: "\\boxed{50}", tokenizer=tokenizer)
    with pytest.raises(PolicyError, match=r"rollout\.thinking = 'off'.*no thinking switch"):
        run_episodes(policy, sandbox, [EpisodeSpec(reference.source("guess"))], RolloutConfig(thinking="off"))
    assert policy.calls == []


def designer_output(source: str, hint: str) -> str:
    return f"Here it is.\n```python\n{source}```\n<hint>{hint}</hint>\n"


def test_the_design_parser_reads_the_text_without_the_thinking(sandbox, thinking_tokenizer, tmp_path):
    decoy = "class DecoyEnv:\n    pass\n"
    # Unstripped, the decoy code block makes two *Env classes (multiple_env_classes).
    thought = f"<think>\nA first sketch:\n```python\n{decoy}```\nNo, better:\n</think>\n\n"
    policy = FakePolicy(
        [thought + designer_output(VALID_DESIGN, "Move toward it.")], tokenizer=thinking_tokenizer
    )
    config = DesignPhaseConfig(n=1, validation=SETTINGS, max_new_tokens=8192, thinking="off")
    with Archive(tmp_path / "archive.sqlite") as archive:
        [design] = design_environments(
            policy, Corpus.from_config(), archive, sandbox, config, random.Random(0), 1
        )
    assert design.valid and design.proposal.parsed.hint == "Move toward it."
    generation = design.proposal.generation
    assert generation.text.startswith("<think>")  # the designer's sample keeps its thinking
    assert "DecoyEnv" in thinking_tokenizer.decode(generation.completion_token_ids)
    assert generation.prompt_text.endswith("<|im_start|>assistant\n" + EMPTY_BLOCK)


def test_the_separate_hint_call_thinks_too_and_is_read_without_it(sandbox, thinking_tokenizer, tmp_path):
    answers = iter(
        [
            f"```python\n{VALID_DESIGN}```",
            "<hint>Move toward the target.</hint>\n<think>or should the hint be <hint>Guess.</hint>",
        ]
    )
    policy = FakePolicy(lambda chat: next(answers), tokenizer=thinking_tokenizer)
    config = DesignPhaseConfig(
        n=1, hint_mode="separate", validation=SETTINGS, max_new_tokens=8192, thinking="on"
    )
    with Archive(tmp_path / "archive.sqlite") as archive:
        [design] = design_environments(
            policy, Corpus.from_config(), archive, sandbox, config, random.Random(0), 1
        )
        assert design.valid and archive.get(design.env_id).hint == "Move toward the target."
    assert design.proposal.hint_generation.text.endswith("<hint>Guess.</hint>")


def test_a_designer_template_without_the_switch_is_refused(sandbox, tokenizer, tmp_path):
    policy = FakePolicy(["never asked"], tokenizer=tokenizer)
    config = DesignPhaseConfig(n=1, validation=SETTINGS, thinking="on")
    with (
        Archive(tmp_path / "archive.sqlite") as archive,
        pytest.raises(PolicyError, match=r"design\.thinking"),
    ):
        design_environments(policy, Corpus.from_config(), archive, sandbox, config, random.Random(0), 1)
    assert policy.calls == []


def test_the_tiny_model_plays_with_thinking_on_through_the_sandbox(sandbox, tokenizer):
    """The real model end to end: the generation prompt opens ``<think>`` (OPENING_TEMPLATE), so what the
    model writes is thinking until it closes the block; the environment gets what follows (here, nearly
    surely nothing), and the tokens are the model's, masked in, with their log-probs."""
    opening = with_template(tokenizer, OPENING_TEMPLATE)
    model, _ = tiny_random_model(seed=0, tokenizer=opening)
    policy = TransformersPolicy(model, opening)
    config = RolloutConfig(thinking="on", max_turns=2, max_new_tokens=12, temperature=1.0)
    specs = [EpisodeSpec(reference.source(name), seed=1) for name in ("guess", "maze")]
    episodes = run_episodes(policy, sandbox, specs, config, seed=3)
    for episode in episodes:
        assert episode.stop_reason in ("max_turns", "terminated", "truncated"), episode.error
        assert len(episode.token_ids) == len(episode.mask) == len(episode.logprobs)
        decoded = opening.decode(episode.token_ids[: episode.prompt_length])
        assert decoded.endswith("<|im_start|>assistant\n<think>\n")  # the prompt opened the thinking
        texts = [m["content"] for m in episode.messages if m["role"] == "assistant"]
        assert len(texts) == len(episode.turns) >= 1
        for turn, text in zip(episode.turns, texts, strict=True):
            assert turn.action == strip_thinking(text, opened=True)
            assert (turn.text or turn.action) == text
        model_ids = [t for t, m in zip(episode.token_ids, episode.mask, strict=True) if m]
        assert model_ids and all(lp < 0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if m)
        # The model's tokens are its completions, untouched: decoding them gives the transcript's texts.
        assert opening.decode(model_ids, skip_special_tokens=True) == "".join(texts)


def test_a_run_refuses_thinking_on_a_template_without_the_switch_before_anything_runs(tmp_path):
    from fixture_envs import SMALL
    from spade_rl.loop.config import load_config
    from spade_rl.loop.run import SelfPlay
    from spade_rl.policy import PolicyError, tiny_random_model
    from spade_rl.policy.transformers_backend import TransformersPolicy

    model, tokenizer = tiny_random_model(seed=0)
    config = load_config(None, [*SMALL, "rollout.thinking='on'"], processes=1)
    with pytest.raises(
        PolicyError, match=r"rollout\.thinking = 'on', but the chat template .* has no thinking switch"
    ):
        SelfPlay(config, tmp_path / "run", policy=TransformersPolicy(model, tokenizer))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
