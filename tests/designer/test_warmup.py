"""The designer's warm-up: synthetic designs that validate, and a cached fine-tune of a real (tiny) model."""

from __future__ import annotations

import random

import pytest
import torch

from spade_rl.corpus import Corpus
from spade_rl.design import ValidationSettings, validate_source
from spade_rl.design.parse import parse_question_design
from spade_rl.designer.phase import DesignPhaseConfig
from spade_rl.designer.prompts import QUESTION_PREFIX
from spade_rl.designer.synthetic import FAMILIES, LEVELS, document_words, synthetic_design
from spade_rl.designer.warmup import WarmupConfig, WarmupError, warm_up, warmup_examples
from spade_rl.loop.config import ConfigError, load_config
from spade_rl.policy import FakePolicy, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0, load_timeout_s=4.0)) as p:
        yield p


def test_document_words_are_usable_names():
    words = document_words("The class Honey-bees visit 3 flowers; def lambda return flowers GARDEN x")
    assert words == ["honey", "bees", "visit", "flowers", "garden"]


@pytest.mark.parametrize("skill", sorted(FAMILIES))
def test_synthetic_designs_validate_in_the_sandbox(pool, skill):
    corpus = Corpus.from_config()
    rng = random.Random(skill)
    for level in LEVELS:  # easy, medium and hard designs all validate
        code, hint = synthetic_design(rng, skill, corpus.sample(rng, 1)[0].text, level)
        parsed = parse_question_design(f"```python\n{code}```")
        assert parsed.ok and parsed.hint == hint, parsed
        report = validate_source(pool, parsed.source, ValidationSettings(max_turns=4), hint=parsed.hint)
        assert report.valid, (report, code)


def test_examples_are_the_design_phase_prompt_and_a_closed_block():
    design = DesignPhaseConfig(form="question")
    examples = warmup_examples(WarmupConfig(designs=6), design, Corpus.from_config())
    assert len(examples) == 6
    for chat, answer in examples:
        assert chat[0]["role"] == "system" and "QuestionTask" in chat[0]["content"]
        assert parse_question_design(QUESTION_PREFIX + answer).ok
        assert answer.endswith("```") and not answer.startswith("class")
    assert examples == warmup_examples(WarmupConfig(designs=6), design, Corpus.from_config())  # seeded


@pytest.mark.slow
def test_warm_up_trains_the_model_and_is_found_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPADE_RL_CACHE", str(tmp_path / "cache"))
    # one batch of the 4 designs, 3 steps on it: the last step's loss is on the data of the first (with two
    # batches, the first and last losses were of different designs, and the comparison the luck of the draw)
    config = WarmupConfig(designs=4, epochs=3, batch_size=4, learning_rate=1e-3)
    design = DesignPhaseConfig(form="question")
    model, tokenizer = tiny_random_model(seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    first = warm_up(TransformersPolicy(model, tokenizer), config, design, Corpus.from_config())
    assert first["warmup/cached"] == 0.0 and first["warmup/loss_last"] < first["warmup/loss_first"]
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    assert any(not (before[k] == trained[k]).all() for k in before)
    assert len(list((tmp_path / "cache" / "warmup").iterdir())) == 1
    again, _ = tiny_random_model(seed=0)  # the same starting weights: the same cache entry
    second = warm_up(TransformersPolicy(again, tokenizer), config, design, Corpus.from_config())
    assert second["warmup/cached"] == 1.0
    assert all((again.state_dict()[k] == trained[k]).all() for k in trained)
    other, _ = tiny_random_model(seed=1)  # other weights: another entry
    assert (
        warm_up(TransformersPolicy(other, tokenizer), config, design, Corpus.from_config())["warmup/cached"]
        == 0.0
    )


def test_warm_up_refuses_what_it_cannot_train():
    with pytest.raises(WarmupError, match="transformers"):
        warm_up(
            FakePolicy(["x"]),
            WarmupConfig(designs=2),
            DesignPhaseConfig(form="question"),
            Corpus.from_config(),
        )
    with pytest.raises(ConfigError, match=r"design\.form"):
        load_config(None, ["warmup.designs=8", "design.form='module'"])
    with pytest.raises(ConfigError, match=r"warmup\.designs must be"):
        load_config(None, ["warmup.designs=-1"])
    assert not WarmupConfig().enabled  # off unless asked for


@pytest.mark.slow
def test_the_cpu_default_mechanisms_end_to_end_with_a_tiny_model(tmp_path, monkeypatch):
    """Warm-up, designs in the question form written by the model itself through the forced opening,
    validation in the real sandbox, answer-first turns, and a GRPO update: one iteration of the CPU
    default's loop, with the tiny random model in place of SmolLM2."""
    from spade_rl.loop.run import SelfPlay

    model, tokenizer = tiny_random_model(seed=0)  # (built before the cache moves: its tokenizer is cached)
    monkeypatch.setenv("SPADE_RL_CACHE", str(tmp_path / "cache"))
    overrides = [
        "loop.iterations=1",
        "warmup.designs=4",
        "warmup.epochs=1",
        "design.max_new_tokens=48",
        # guess up to 20 takes 5 binary-search guesses at worst; validation plays fresh seeds each time
        "rollout.max_turns=5",
        "pool.reference=['guess', 'codebreaker']",
        "train.learning_rate=1e-3",
    ]
    with SelfPlay(
        load_config(None, overrides), tmp_path / "run", policy=TransformersPolicy(model, tokenizer)
    ) as run:
        [metrics] = list(run.iterations())
        designs = [run.archive.get(i) for i in run.archive.ids(origin="designer")]
        played = run._play(run.archive.ids(origin="reference"), random.Random(0), 2)
    assert (tmp_path / "run" / "warmup.json").exists()
    assert metrics["designer/proposed"] == 4 and len(designs) >= 1
    assert sum(metrics["designer/reasons"].values()) == 4
    for episode in (e for p in played for e in p.nohint + p.hint):
        assert episode.turns and all(t.action.startswith("\\boxed{") for t in episode.turns)
        assert episode.spec.env_kwargs["max_turns"] == 5
    assert metrics["agent/envs"] >= 1


@pytest.mark.slow
def test_the_warm_up_renders_the_prompts_with_the_designers_thinking_switch(tmp_path, monkeypatch):
    """design.thinking = "off" on a template with the switch: the warm-up trains on the prompts the design
    phase renders (their empty think block included), in a cache entry of its own."""
    from chat_templates import THINKING_TEMPLATE, with_template

    monkeypatch.setenv("SPADE_RL_CACHE", str(tmp_path / "cache"))
    model, tokenizer = tiny_random_model(seed=0)
    switch = with_template(tokenizer, THINKING_TEMPLATE)
    policy = TransformersPolicy(model, switch)
    seen = []
    render = policy.render
    policy.render = lambda chat, **kwargs: (seen.append(kwargs.get("thinking")), render(chat, **kwargs))[1]
    config = WarmupConfig(designs=2, epochs=1, batch_size=2, learning_rate=1e-3)
    warm_up(policy, config, DesignPhaseConfig(form="question", thinking="off"), Corpus.from_config())
    assert seen and set(seen) == {False}
    seen.clear()
    fresh, _ = tiny_random_model(seed=0)
    policy = TransformersPolicy(fresh, switch)
    policy.render = lambda chat, **kwargs: (seen.append(kwargs.get("thinking")), render(chat, **kwargs))[1]
    result = warm_up(policy, config, DesignPhaseConfig(form="question"), Corpus.from_config())
    assert result["warmup/cached"] == 0.0 and set(seen) == {None}  # "template": another entry, no switch


def test_recomputed_activations_give_the_same_warm_up(monkeypatch):
    """warmup.activation_tokens: rows longer than it recompute a share of their layers' activations in
    the backward pass (graduated by length); the warmed-up weights are those of holding them all, the
    model is handed back without checkpointing, and the cache key does not change."""
    from spade_rl.designer.warmup import _train, cache_key
    from spade_rl.train import learner as learner_module
    from spade_rl.train.learner import checkpointed_layers

    assert checkpointed_layers(30, 640, 448) == 9 and checkpointed_layers(30, 448, 448) == 0
    assert checkpointed_layers(30, 100_000, 448) == 30 and checkpointed_layers(30, 640, 0) == 0
    design = DesignPhaseConfig(form="question")
    examples = warmup_examples(WarmupConfig(designs=4), design, Corpus.from_config())
    plain = WarmupConfig(designs=4, epochs=1, batch_size=2, learning_rate=1e-3)
    recomputing = WarmupConfig(designs=4, epochs=1, batch_size=2, learning_rate=1e-3, activation_tokens=64)
    _, tokenizer = tiny_random_model(seed=0)
    trained = []
    score = learner_module.trained_logps
    for config in (plain, recomputing):
        model, _ = tiny_random_model(seed=0)
        policy = TransformersPolicy(model, tokenizer)
        key = cache_key(policy, config, design, Corpus.from_config().config)
        switched = []

        def recording(scored_model, *args, switched=switched, model=model, **kwargs):
            switched.append(
                sum(bool(getattr(m, "gradient_checkpointing", False)) for m in model.model.layers)
            )
            return score(scored_model, *args, **kwargs)

        monkeypatch.setattr(learner_module, "trained_logps", recording)
        losses = _train(policy, examples, config)
        trained.append((key, losses, {k: v.clone() for k, v in model.state_dict().items()}, switched))
        assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    (key_a, losses_a, weights_a, off), (key_b, losses_b, weights_b, on) = trained
    layers = model.config.num_hidden_layers
    assert set(off) == {0} and max(on) == layers  # rows of hundreds of tokens: every layer recomputes
    assert key_a == key_b and losses_a == pytest.approx(losses_b, rel=1e-6)
    for name, value in weights_a.items():
        assert torch.allclose(value, weights_b[name], rtol=1e-5, atol=1e-7), name
    with pytest.raises(ValueError, match=r"warmup\.activation_tokens must be"):
        WarmupConfig(activation_tokens=-1)
    with pytest.raises(ConfigError, match=r"warmup\.activation_tokens must be"):
        load_config(None, ["warmup.activation_tokens=1.5"])
