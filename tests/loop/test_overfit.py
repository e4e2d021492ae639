"""Can the trainer overfit? The first test of an RL trainer: one game at one instance, driven to winning
by the update alone, and on a repeated batch the loss falls and the winning answers' log-probs rise.

The tiny in-process model (random weights) plays through the real sandbox and the real TRL update, with
the CPU learning settings' levers (groups of 8 plays sharing one seed, steps of a few groups, two epochs,
no hint episodes); only the learning rate is the tiny model's (1e-3: README, the CPU learning settings).
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest
import torch

from spade_rl.loop.config import load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy
from spade_rl.train import Learner, Sample, TrainConfig

# One instance whatever the seed: a one-token answer wins when it starts with a vowel (about a fifth of
# the tiny model's random tokens), so only which token the model writes decides the return.
VOWEL_SOURCE = '''
class VowelEnv:
    """Answer with a word that starts with a vowel."""

    def __init__(self, max_turns: int = 1):
        self.max_turns = max_turns
        self.turn = 0

    def reset(self, seed=None):
        self.turn = 0
        return "Say a word that starts with a vowel.", {}

    def step(self, action):
        self.turn += 1
        word = action.strip() if isinstance(action, str) else ""
        if word[:1].lower() in ("a", "e", "i", "o", "u") and "%" not in word:
            return "You win.", 1.0, True, False, {}
        return "No.", 0.0, False, self.turn >= self.max_turns, {}

    def solution(self):
        return ["apple"]
'''


def write_pool(path):
    """A one-environment pool in the format of ``spade-rl envs export`` (the run validates it again)."""
    entry = {
        "format": "spade-rl-env/1",
        "env_id": 1,
        "source": VOWEL_SOURCE,
        "source_hash": hashlib.sha256(VOWEL_SOURCE.encode()).hexdigest(),
        "hint": "A, e, i, o or u.",
        "valid": True,
        "reason": "ok",
        "message": "",
        "class_name": "VowelEnv",
        "skill": "pattern",
        "setting": "games",
        "document_id": None,
        "iteration": 0,
        "origin": "designer",
        "created_at": 0.0,
        "parents": [],
        "times_proposed": 1,
        "metadata": {},
        "stats": [],
    }
    path.write_text(json.dumps(entry) + "\n")


@pytest.mark.slow
def test_the_update_alone_drives_one_game_to_90_percent_wins(tmp_path):
    pool = tmp_path / "vowel.jsonl"
    write_pool(pool)
    model, tokenizer = tiny_random_model(seed=0)
    overrides = [
        "loop.iterations=40",
        "designer.source='none'",
        "warmup.designs=0",
        "pool.reference=[]",
        f"pool.jsonl='{pool}'",
        "design.validation.trivial_seeds=0",  # a trivial answer wins here on purpose
        "loop.envs_per_iteration=4",
        "loop.plays_per_env=8",
        "loop.hint_plays_per_env=0",
        "loop.group_seeds='shared'",
        "loop.pool_replace=true",
        "loop.groups_per_step=2",
        "loop.update_epochs=2",
        "loop.checkpoint_every=100",
        "train.group_size=8",
        "train.per_device_train_batch_size=8",
        "train.gradient_accumulation_steps=2",
        "train.learning_rate=1e-3",
        # generation is in float32 here (TransformersPolicy's default): so is the update, or bfloat16
        # rounding alone puts half of a flat distribution's ratios outside the clip range
        "train.bf16=false",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=1",
        "rollout.action_prefix={}",
        "rollout.action_stop={}",
    ]
    config = load_config(None, overrides)
    wins = []
    with SelfPlay(config, tmp_path / "run", policy=TransformersPolicy(model, tokenizer)) as run:
        for metrics in run.iterations():
            wins.append(metrics["agent/win_rate"])
            if len(wins) >= 3 and min(wins[-3:]) >= 0.9:
                break
    assert sum(wins[:3]) / 3 < 0.8, wins  # it does not start there
    assert min(wins[-3:]) >= 0.9, wins  # three iterations in a row (96 episodes) at 90% or more


def token_logprobs(model, prompt: tuple[int, ...], completion: tuple[int, ...]) -> list[float]:
    """log pi(token | what came before) of each completion token, at temperature 1."""
    ids = torch.tensor([list(prompt + completion)])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    logp = torch.log_softmax(logits, -1)
    start = len(prompt) - 1
    return logp[torch.arange(start, ids.shape[1] - 1), ids[0, start + 1 :]].tolist()


def completion_logprob(model, sample: Sample) -> float:
    return sum(token_logprobs(model, sample.prompt_ids, sample.completion_ids))


def test_on_a_repeated_batch_the_loss_falls_and_winning_answers_gain_probability():
    """Four groups of 8 answers, the winners (advantage > 0) and the losers fixed; the same batch
    trained 8 times, its ratio taken against the log-probs it was "sampled" with (the model at the start):
    the loss, -mean(A * clipped ratio), is 0 at the first step (ratio 1, centred advantages) and falls
    as the winners' ratios rise, and the winners gain log-probability against the losers."""
    model, tokenizer = tiny_random_model(seed=1)
    rng = random.Random(0)
    prompt = tuple(tokenizer("Say a word that starts with a vowel.")["input_ids"])
    samples = []
    for group in range(4):
        for k in range(8):
            completion = tuple(rng.randrange(100, 5000) for _ in range(3))
            advantage = 1.0 if k % 2 == 0 else -1.0
            logprobs = tuple(token_logprobs(model, prompt, completion))  # the "sampler": the model at start
            samples.append(Sample("agent", prompt, completion, (1, 1, 1), logprobs, advantage, group))
    config = TrainConfig(
        learning_rate=1e-3,
        group_size=8,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=4,
        temperature=1.0,
    )
    learner = Learner(model, tokenizer, config)
    try:

        def margin() -> float:
            scores = [(s.advantage, completion_logprob(model, s)) for s in samples]
            win = [lp for a, lp in scores if a > 0]
            lose = [lp for a, lp in scores if a < 0]
            return sum(win) / len(win) - sum(lose) / len(lose)

        before = margin()
        losses = [learner.step(samples)["train/loss"] for _ in range(8)]
        after = margin()
    finally:
        learner.close()
    assert after > before + 1.0, (before, after)
    assert abs(losses[0]) < 1e-6 and losses[-1] < -0.1, losses
