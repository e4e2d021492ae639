"""Settings that train: full fine-tuning whose AdamW steps would round to nothing is refused at load, naming
the fixes; no shipped configuration does it; where another engine samples, the update recomputes the old
log-probs with truncated importance sampling unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_rl.loop.config import ConfigError, load_config
from spade_rl.train.config import LOWEST_LR_16BIT, rounds_away

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "configs").glob("*.toml"))
GPU = ["policy.transformers.device='cuda'", "warmup.designs=0"]


def test_rounding_is_decided_by_dtype_learning_rate_and_lora():
    assert rounds_away("bfloat16", 1e-6, use_lora=False) is not None
    assert rounds_away("float16", 5e-6, use_lora=False) is not None
    assert rounds_away("bfloat16", LOWEST_LR_16BIT, use_lora=False) is None
    assert rounds_away("bfloat16", 1e-6, use_lora=True) is None  # LoRA's adapters are float32
    assert rounds_away("float32", 1e-7, use_lora=False) is None


@pytest.mark.parametrize("dtype", ["'bfloat16'", "'float16'", "'auto'"])
def test_full_fine_tuning_of_16_bit_weights_below_1e_5_is_refused_naming_the_fixes(dtype):
    """dtype 'auto' is bfloat16 on a GPU: refused there as bfloat16 is."""
    overrides = [*GPU, f"policy.transformers.dtype={dtype}", "train.learning_rate=1e-6"]
    with pytest.raises(ConfigError) as refused:
        load_config(None, overrides, processes=1)
    message = str(refused.value)
    assert message.startswith("train.learning_rate: full fine-tuning of")
    for fix in ("policy.transformers.dtype = 'float32'", "train.use_lora = true", "at least 1e-05"):
        assert fix in message, message


def test_what_does_not_round_is_accepted():
    for fixed in (
        ["policy.transformers.dtype='float32'", "train.learning_rate=1e-6"],
        ["policy.transformers.dtype='bfloat16'", "train.learning_rate=1e-6", "train.use_lora=true"],
        ["policy.transformers.dtype='bfloat16'", "train.learning_rate=1e-5"],
        # the trainer's copy of an inference-only run is never trained
        [
            "policy.backend='servers'",
            "policy.servers.weight_sync='none'",
            "policy.transformers.dtype='bfloat16'",
            "train.learning_rate=1e-6",
        ],
    ):
        load_config(None, [*GPU, *fixed], processes=1)


def test_the_warm_up_learning_rate_is_checked_too():
    overrides = [
        "policy.transformers.dtype='bfloat16'",
        "warmup.learning_rate=1e-6",
        "train.learning_rate=1e-4",
    ]
    with pytest.raises(ConfigError, match=r"^warmup.learning_rate: full fine-tuning of bfloat16"):
        load_config(None, overrides, processes=1)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_no_shipped_configuration_trains_16_bit_weights_in_full_below_1e_5(path):
    """Machine-independent: dtype 'auto' counts as bfloat16 wherever the device may be a GPU."""
    config = load_config(path, processes=1)  # passes the check at load
    settings = config.policy.transformers
    weights = settings.dtype
    if weights == "auto" and settings.device != "cpu":
        weights = "bfloat16"
    for rate in (config.train.learning_rate, config.warmup.learning_rate if config.warmup.enabled else 1.0):
        assert rounds_away(weights, rate, config.train.use_lora) is None, (path.name, weights, rate)


def test_another_engine_s_samples_are_corrected_by_truncated_importance_sampling_by_default():
    bare = [
        "profile='none'",
        "train.gradient_accumulation_steps=3",
    ]  # the components' defaults, 24 rows a step
    served = load_config(None, [*bare, "policy.backend='servers'"], processes=1)
    assert served.train.old_logprobs == "auto"
    assert (served.update_config.old_logprobs, served.update_config.tis_cap) == ("recompute", 2.0)
    own = load_config(None, bare, processes=1)
    assert (own.update_config.old_logprobs, own.update_config.tis_cap) == ("sampling", None)
    with pytest.raises(ConfigError, match=r"tis_cap = 2.0 .* the trainer samples itself"):
        load_config(None, [*bare, "train.tis_cap=2.0"], processes=1)
    vllm = load_config(ROOT / "configs" / "servers-vllm.toml", processes=1)
    assert (vllm.update_config.old_logprobs, vllm.update_config.tis_cap) == ("recompute", 2.0)
