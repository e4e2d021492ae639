"""Rollouts with a scripted policy (real tokenizer and chat template) through the real sandbox."""

from __future__ import annotations

import itertools
import re

import pytest

from spade_rl.envs import reference
from spade_rl.policy import FakePolicy, default_tokenizer
from spade_rl.rollout import SYSTEM_PROMPTS, EpisodeSpec, RolloutConfig, play_episode, run_episodes
from spade_rl.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def tokenizer():
    return default_tokenizer()


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=1.0)) as p:
        yield p


def guesser(chat):
    """Binary search from the feedback seen so far (a perfect player of `guess`)."""
    text = " ".join(m["content"] for m in chat)
    low, high = 1, 100
    for number, direction in re.findall(r"(\d+) is too (low|high)", text):
        if direction == "low":
            low = max(low, int(number) + 1)
        else:
            high = min(high, int(number) - 1)
    return f"I will try the middle. \\boxed{{{(low + high) // 2}}}"


def model_text(episode, tokenizer):
    return tokenizer.decode([t for t, m in zip(episode.token_ids, episode.mask, strict=True) if m])


def test_masks_cover_exactly_the_model_turns(pool, tokenizer):
    policy = FakePolicy(guesser, tokenizer=tokenizer)
    [episode] = run_episodes(policy, pool, [EpisodeSpec(reference.source("guess"), seed=5)], RolloutConfig())
    assert episode.won and episode.return_ == 1.0 and episode.stop_reason == "terminated"
    assert 1 < len(episode.turns) <= 7
    expected = "".join(turn.action + tokenizer.eos_token for turn in episode.turns)
    assert model_text(episode, tokenizer) == expected
    assert len(episode.token_ids) == len(episode.mask) == len(episode.logprobs)
    assert all(lp == -1.0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if m)
    # The whole sequence is what the chat template renders for the conversation.
    rendered = tokenizer.apply_chat_template(episode.messages, tokenize=False)
    assert tokenizer.decode(episode.token_ids) == rendered.rstrip("\n")
    assert episode.prompt_length == len(policy.render(episode.messages[:2]))


def test_hint_is_appended_to_the_first_observation(pool, tokenizer):
    policy = FakePolicy(guesser, tokenizer=tokenizer)
    spec = EpisodeSpec(reference.source("guess"), seed=1, hint="Halve the range.", use_hint=True)
    off = EpisodeSpec(reference.source("guess"), seed=1, hint="Halve the range.", use_hint=False)
    with_hint, without = run_episodes(policy, pool, [spec, off], RolloutConfig())
    assert with_hint.messages[1]["content"].endswith("\n\nHint: Halve the range.")
    assert "Hint:" not in without.messages[1]["content"]


def test_many_episodes_one_generation_per_turn(pool, tokenizer):
    policy = FakePolicy(lambda chat: "\\boxed{50}", tokenizer=tokenizer)
    specs = [
        EpisodeSpec(reference.source(name), seed=s) for name in ("guess", "maze", "lights") for s in (0, 1)
    ]
    episodes = run_episodes(policy, pool, specs, RolloutConfig(max_turns=4))
    assert [e.stop_reason for e in episodes].count("max_turns") + sum(e.won for e in episodes) >= 4
    assert all(len(e.turns) <= 4 for e in episodes)
    # one batched call per turn: the first carries every episode
    assert len(policy.calls[0][0]) == len(specs) and len(policy.calls) <= 4


def test_context_budget_truncates_instead_of_crashing(pool, tokenizer):
    policy = FakePolicy(lambda chat: "\\boxed{50} " + "padding " * 40, tokenizer=tokenizer)
    [episode] = run_episodes(
        policy,
        pool,
        [EpisodeSpec(reference.source("guess"), seed=5)],  # seed 5: the secret is not 50
        RolloutConfig(max_context_tokens=400, max_new_tokens=64),
    )
    assert episode.stop_reason == "context" and episode.return_ == 0.0
    assert len(episode.token_ids) <= 400


def test_environment_failures_end_only_their_episode(pool, tokenizer):
    hang = reference.source("guess").replace("self._turn += 1", "while True:\n            pass", 1)
    assert "while True" in hang
    broken = "class BrokenEnv(:\n"
    policy = FakePolicy(guesser, tokenizer=tokenizer)
    specs = [EpisodeSpec(hang, seed=5), EpisodeSpec(broken), EpisodeSpec(reference.source("guess"), seed=3)]
    hung, bad, good = run_episodes(policy, pool, specs, RolloutConfig(call_timeout_s=0.5))
    assert hung.stop_reason == "env_error" and "timeout" in hung.error and hung.return_ == 0.0
    assert bad.stop_reason == "env_error" and "syntax_error" in bad.error
    assert good.won


def test_huge_observations_are_cut(pool, tokenizer):
    chatty = reference.source("guess").replace(
        'return observation, self._info("start")', "return 'x' * 100000 + observation, self._info(\"start\")"
    )
    assert "100000" in chatty
    policy = FakePolicy(guesser, tokenizer=tokenizer)
    [episode] = run_episodes(policy, pool, [EpisodeSpec(chatty)], RolloutConfig(max_observation_chars=500))
    assert len(episode.messages[1]["content"]) < 700 and "characters cut" in episode.messages[1]["content"]


def test_tool_use_setting_uses_its_system_prompt(pool, tokenizer):
    policy = FakePolicy(lambda chat: "<answer>0</answer>", tokenizer=tokenizer)
    [episode] = run_episodes(
        policy, pool, [EpisodeSpec(reference.source("tools"), setting="tool_use")], RolloutConfig()
    )
    assert "<tool_call>" in episode.messages[0]["content"] and episode.stop_reason == "terminated"


def mask_spans(episode):
    """The runs of consecutive model tokens (mask 1), as lists of token ids."""
    spans, current = [], []
    for token, model in zip(episode.token_ids, episode.mask, strict=True):
        if model:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return spans


@pytest.mark.slow
def test_default_model_plays_through_the_sandbox_with_exact_masks(pool):
    """The real default model (SmolLM2-135M) plays reference environments in the real sandbox."""
    from spade_rl.policy import PolicyConfig, make_policy

    policy = make_policy(PolicyConfig(seed=0))
    tokenizer = policy.tokenizer
    specs = [
        EpisodeSpec(reference.source(name), seed=s, setting=reference.SETTINGS[name])
        for name in ("guess", "arithmetic", "tools")
        for s in (0, 1)
    ]
    episodes = run_episodes(policy, pool, specs, RolloutConfig(max_turns=3, max_new_tokens=32), seed=0)
    for episode in episodes:
        assert episode.stop_reason in ("terminated", "truncated", "max_turns"), episode.error
        spans = mask_spans(episode)
        assert len(spans) == len(episode.turns) >= 1
        for span, turn in zip(spans, episode.turns, strict=True):
            assert tokenizer.decode(span, skip_special_tokens=True) == turn.action
        # the sampling log-probabilities sit on the model tokens only, and are real log-probabilities
        model_logprobs = [lp for lp, m in zip(episode.logprobs, episode.mask, strict=True) if m]
        assert all(lp <= 0.0 for lp in model_logprobs) and any(lp < 0.0 for lp in model_logprobs)
        assert all(lp == 0.0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if not m)
        # the environment tokens between turns are the chat template's rendering of the observations
        rendered = tokenizer.apply_chat_template(episode.messages, tokenize=False)
        assert tokenizer.decode(episode.token_ids, skip_special_tokens=False).startswith(
            rendered[: len(rendered) // 2]
        )


def test_action_prefix_is_forced_masked_and_part_of_the_action(pool, tokenizer):
    """A forced "\\boxed{" opens every turn: environment tokens (mask 0, no log-prob), while the action
    the environment receives is the prefix plus what the model wrote, cut at the stop string."""
    policy = FakePolicy(lambda chat: "50} and some text the stop string cuts", tokenizer=tokenizer)
    config = RolloutConfig(
        max_turns=2, max_new_tokens=16, action_prefix={"games": "\\boxed{"}, action_stop={"games": ["}"]}
    )
    [episode] = run_episodes(policy, pool, [EpisodeSpec(reference.source("guess"), seed=5)], config)
    assert [t.action for t in episode.turns] == ["\\boxed{50}", "\\boxed{50}"]
    assert "too" in episode.turns[0].observation  # the environment read the guess 50
    assert policy.calls[0][1].stop == ("}",) and policy.calls[0][1].include_stop_string
    prefix_ids = tokenizer("\\boxed{", add_special_tokens=False)["input_ids"]
    start = episode.prompt_length
    assert episode.token_ids[start : start + len(prefix_ids)] == prefix_ids
    assert episode.mask[start : start + len(prefix_ids)] == [0] * len(prefix_ids)
    assert episode.logprobs[start : start + len(prefix_ids)] == [0.0] * len(prefix_ids)
    assert tokenizer.decode(episode.token_ids[start:]).startswith("\\boxed{50}")
    # what trains is only what the model wrote
    assert "\\boxed{" not in model_text(episode, tokenizer)


def test_action_prefix_applies_only_to_its_setting(pool, tokenizer):
    policy = FakePolicy(lambda chat: "<answer>1</answer>", tokenizer=tokenizer)
    config = RolloutConfig(max_turns=1, action_prefix={"games": "\\boxed{"}, action_stop={"games": ["}"]})
    specs = [EpisodeSpec(reference.source("tools"), seed=0, setting="tool_use")]
    [episode] = run_episodes(policy, pool, specs, config)
    assert episode.turns[0].action == "<answer>1</answer>" and policy.calls[0][1].stop == ()


def test_action_prefix_settings_are_checked():
    with pytest.raises(ValueError, match="allowed settings"):
        RolloutConfig(action_prefix={"chess": "\\boxed{"})
    with pytest.raises(ValueError, match="list of non-empty strings"):
        RolloutConfig(action_stop={"games": "}"})


def test_a_system_prompt_given_for_one_setting_keeps_the_others(pool, tokenizer):
    """rollout.system_prompts.games = "..." (an override, or a [rollout.system_prompts] table naming one
    setting) replaces the games prompt only: tool-use episodes keep theirs (they got the games prompt
    before), and a table without games no longer breaks every game episode."""
    games_only = RolloutConfig(max_turns=1, system_prompts={"games": "Answer inside \\boxed{}."})
    assert games_only.system_prompts == {**SYSTEM_PROMPTS, "games": "Answer inside \\boxed{}."}
    tools_only = RolloutConfig(max_turns=1, system_prompts={"tool_use": "Use the tools."})
    assert tools_only.system_prompts["games"] == SYSTEM_PROMPTS["games"]
    policy = FakePolicy(lambda chat: "\\boxed{1}", tokenizer=tokenizer)
    specs = [
        EpisodeSpec(reference.source("guess"), seed=0),
        EpisodeSpec(reference.source("tools"), seed=0, setting="tool_use"),
    ]
    cases = [
        (games_only, ("Answer inside \\boxed{}.", SYSTEM_PROMPTS["tool_use"])),
        (tools_only, (SYSTEM_PROMPTS["games"], "Use the tools.")),
    ]
    for config, prompts in cases:
        episodes = run_episodes(policy, pool, specs, config)
        assert tuple(e.messages[0]["content"] for e in episodes) == prompts
    with pytest.raises(ValueError, match=r"system_prompts has settings \['chess'\]; allowed settings"):
        RolloutConfig(system_prompts={"chess": "Play chess."})
    with pytest.raises(ValueError, match=r"system_prompts\.games must be a string"):
        RolloutConfig(system_prompts={"games": 3})
    with pytest.raises(ValueError, match="system_prompts must be a table of settings"):
        RolloutConfig(system_prompts="Play.")


def test_play_episode_takes_actions_from_a_function_with_the_rollouts_environment_side(pool):
    """What a person at ``spade-rl play --human`` gets: the same hint, turns and ends as a model's
    episode, without tokens; ``on_turn`` sees the start and every turn."""
    seen = []
    spec = EpisodeSpec(reference.source("guess"), seed=5, hint="Halve the range.", use_hint=True)

    def watch(episode):
        seen.append(len(episode.turns))

    episode = play_episode(pool, spec, RolloutConfig(), lambda ep: guesser(ep.messages), on_turn=watch)
    assert episode.won and episode.stop_reason == "terminated" and 1 < len(episode.turns) <= 7
    assert episode.messages[1]["content"].endswith("\n\nHint: Halve the range.")
    roles = [m["role"] for m in episode.messages]
    assert roles == ["system", "user", *["assistant", "user"] * (len(episode.turns) - 1), "assistant"]
    assert all(t.finish_reason == "stop" for t in episode.turns)
    assert seen == list(range(len(episode.turns) + 1))
    assert episode.token_ids == episode.mask == episode.logprobs == []
    fifty = EpisodeSpec(reference.source("guess"), seed=5)  # seed 5: the secret is not 50
    out_of_turns = play_episode(pool, fifty, RolloutConfig(max_turns=2), lambda ep: "\\boxed{50}")
    assert out_of_turns.stop_reason == "max_turns" and len(out_of_turns.turns) == 2


def test_play_episode_failures_end_the_episode_and_an_exception_of_act_propagates(pool, tokenizer):
    broken = play_episode(pool, EpisodeSpec("class BrokenEnv(:\n"), RolloutConfig(), lambda ep: "")
    assert broken.stop_reason == "env_error" and broken.error.startswith("open: syntax_error")
    no_reset = reference.source("guess").replace('return observation, self._info("start")', "return 3")
    assert "return 3" in no_reset
    failed = play_episode(pool, EpisodeSpec(no_reset), RolloutConfig(), lambda ep: "")
    assert failed.stop_reason == "env_error" and failed.error.startswith("reset: ") and not failed.turns

    class Stopped(Exception):
        pass

    def stop(episode):
        raise Stopped

    with pytest.raises(Stopped):
        play_episode(pool, EpisodeSpec(reference.source("guess")), RolloutConfig(), stop)
    policy = FakePolicy(guesser, tokenizer=tokenizer)
    [again] = run_episodes(policy, pool, [EpisodeSpec(reference.source("guess"))], RolloutConfig())
    assert again.won  # the pool still plays: the interrupted environment was closed


def test_each_episode_has_its_own_turn_budget(pool, tokenizer):
    # One episode near the end of its context must not cut the turns of the others (issue 38, item 4):
    # the crowded one's long hint leaves it 22 tokens of room at its third turn, while the other has
    # room for whole turns of 64 until its last.
    policy = FakePolicy(lambda chat: "\\boxed{50} " + "padding " * 40, tokenizer=tokenizer)
    specs = [
        EpisodeSpec(reference.source("guess"), seed=5, hint="Think about the range. " * 60, use_hint=True),
        EpisodeSpec(reference.source("guess"), seed=5),
    ]
    config = RolloutConfig(max_context_tokens=600, max_new_tokens=64)
    crowded, roomy = run_episodes(policy, pool, specs, config)
    assert policy.budget_calls[2] == [22, 64]
    # Every whole turn of the roomy episode is the script's full answer (49 tokens with its end token),
    # none cut to the crowded episode's 22.
    turn_lengths = [len(list(run)) for model, run in itertools.groupby(roomy.mask) if model]
    assert turn_lengths[:-1] == [49] * (len(roomy.turns) - 1) and len(roomy.turns) > 3
    assert crowded.stop_reason == roomy.stop_reason == "context"
    assert len(crowded.token_ids) <= 600 and len(roomy.token_ids) <= 600
