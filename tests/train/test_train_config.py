"""The GRPO update's configuration (spade_rl.train.config): every key validated by name, with the allowed
values; importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spade_rl.train import TrainConfig


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"loss_type": "ppo"}, "loss_type"),
        ({"old_logprobs": "vllm"}, "old_logprobs"),
        ({"report_to": "mlflow"}, "report_to"),
        ({"lr_scheduler_type": "step"}, "lr_scheduler_type"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"epsilon_low": 1.0}, "epsilon_low"),
        ({"epsilon_high": -0.1}, "epsilon_high"),
        ({"beta": -0.001}, "beta"),
        ({"temperature": 0}, "temperature"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm"),
        ({"group_size": 1}, "group_size"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size"),
        ({"gradient_accumulation_steps": 1.5}, "gradient_accumulation_steps"),
        ({"max_completion_length": 0}, "max_completion_length"),
        ({"group_size": 8, "per_device_train_batch_size": 4}, "at least one group of group_size"),
        ({"loss_type": "cispo"}, "TRL's own losses"),
        ({"lora_target_modules": ()}, "lora_target_modules"),
        ({"lora_target_modules": ("q_proj", "lm_head")}, "lm_head"),
        ({"use_lora": "yes"}, "use_lora"),
        ({"bf16": "always"}, "bf16"),
        ({"cast_lm_head_to_fp32": "auto"}, "cast_lm_head_to_fp32"),
        ({"output_dir": ""}, "output_dir"),
        ({"report_to": "tensorboard"}, "output_dir must be set"),
    ],
)
def test_config_validation_names_the_key(change, key):
    with pytest.raises(ValueError, match=key):
        TrainConfig(**change)


def test_config_messages_list_the_allowed_values():
    with pytest.raises(ValueError, match=r"\['grpo', 'dapo', 'dr_grpo', 'bnpo'"):
        TrainConfig(loss_type="ppo")
    assert TrainConfig(per_device_train_batch_size=4, gradient_accumulation_steps=4).rows_per_update == 16


def test_importing_the_package_does_not_load_trl():
    code = "import sys, spade_rl.train; print('trl' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
