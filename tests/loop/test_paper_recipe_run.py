"""The paper configuration scaled down (tiny model, two iterations): every reference mechanism spade-rl
has goes through one real run (skill rotation, the separate hint call at its own temperature, retries of
invalid designs, the reference memory, the delayed designer reward, scaled designer advantages, recomputed
old log-probs with truncated importance sampling, the reference's optimiser settings), through the real
sandbox; once with the paper's blend and once with the learning-potential ablation."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixture_envs import HANGS, PARITY
from spade_rl.loop.config import load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import FakePolicy, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy

PAPER = Path(__file__).resolve().parents[2] / "configs" / "spade-paper-games.toml"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blend", "learning_potential"])
def test_the_paper_recipe_runs_end_to_end_at_tiny_scale(tmp_path, mode):
    scaled_down = [
        "policy.transformers.device='cpu'",
        "policy.transformers.dtype='float32'",
        "train.bf16=false",
        "train.gradient_checkpointing=false",
        "train.report_to='none'",
        f"train.output_dir='{tmp_path / 'trainer'}'",
        "train.learning_rate=1e-3",
        "train.group_size=4",
        "train.per_device_train_batch_size=4",
        "train.gradient_accumulation_steps=6",  # 2 environments and 2 skills of 2 design phases at the end
        "loop.iterations=2",
        "loop.regenerate_every=1",
        "rewards.delay=1",  # D = regenerate_every, as in both paper configurations
        f"rewards.mode='{mode}'",
        "loop.designs_per_iteration=2",
        "loop.envs_per_iteration=2",
        "loop.plays_per_env=4",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "rollout.max_context_tokens=2048",
        "design.max_new_tokens=2048",
        "design.hint_max_new_tokens=32",
        "design.validation.trivial_seeds=0",
        "design.validation.call_timeout_s=0.5",
        "sandbox.call_timeout_s=0.5",
        "sandbox.pool_size=2",
        "sandbox.max_workers=8",
        "pool.reference=['guess']",
        "pool.reference_kwargs={guess={high=3}}",
    ]
    config = load_config(PAPER, scaled_down, processes=1)
    assert config.design.hint_mode == "separate" and config.archive.memory_mode == "reference"
    assert config.train.old_logprobs == "recompute" and config.train.tis_cap == 2.0
    assert config.rewards.scale == "reference" and config.rewards.mask_negative
    assert load_config(PAPER, processes=1).rewards.delay == 4
    model, tokenizer = tiny_random_model(seed=0)
    written = []

    def designer_script(chat):
        """The first two designs: one valid, one that hangs (then retried: valid); hints to every call."""
        if chat[0]["content"].startswith("You write short hints"):
            return "<hint>Count the characters.</hint>"
        written.append(chat)
        source = {1: PARITY, 2: HANGS}.get(len(written), PARITY.replace("ParityEnv", "RetriedEnv"))
        return f"```python\n{source}```"

    designer = FakePolicy(designer_script, tokenizer=tokenizer)
    with SelfPlay(
        config, tmp_path / "run", policy=TransformersPolicy(model, tokenizer), designer_policy=designer
    ) as run:
        metrics = list(run.iterations())
        optimizer = run.updater.trainer.optimizer
        assert optimizer.param_groups[0]["betas"] == (0.9, 0.98)
        assert any(g["weight_decay"] == 0.1 for g in optimizer.param_groups)
    assert [m["iteration"] for m in metrics] == [1, 2]
    first = metrics[0]
    assert first["designer/reasons"] == {"ok": 2, "timeout": 1}  # the hanging slot was asked again
    assert first["designer/proposed"] == 3
    # Delayed: the two valid designs of iteration 1 are held (the hanging one, retried, has no gradient) and
    # trained in iteration 2 with the two of iteration 2 (the last iteration rewards everything held).
    assert (first["designer/held"], first["designer/rewarded"], first["samples/designer"]) == (2, 0, 0)
    assert (metrics[1]["designer/held"], metrics[1]["designer/rewarded"]) == (0, 4)
    if mode == "learning_potential":
        assert any(key.startswith("designer/lp/") for key in metrics[1])
    # min(N_agent / N_designer * regenerate_every 1, 50): the 4 designs trained in iteration 2 count
    last = metrics[1]
    assert last.get("designer/advantage_scale", 1.0) == (min(last["samples/agent"] / 4, 50) or 1.0)
    assert any("train/loss" in m for m in metrics)  # updated, with recomputed old log-probs and TIS
    # Per iteration a design call and a hint call (iteration 1: again for the retried slot).
    assert len(designer.calls) == 6 and len(written) == 5
