"""The precision generation computes in, decided per setting and device without a GPU: a stand-in for a
model's first parameter says where the weights are (a CUDA tensor cannot be made on a CPU machine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from spade_rl.policy import TransformersConfig
from spade_rl.policy.models import cpu_has_fast_bf16
from spade_rl.policy.precision import autocast_dtype


def weights_on(device: str, dtype: torch.dtype = torch.float32) -> SimpleNamespace:
    first = SimpleNamespace(dtype=dtype, device=SimpleNamespace(type=device))
    return SimpleNamespace(parameters=lambda: iter([first]))


@pytest.mark.parametrize("bf16_supported", [True, False])
def test_float32_weights_on_a_gpu_generate_in_bfloat16_by_default(monkeypatch, bf16_supported):
    """The default ("gpu") and "auto": bfloat16 autocast on a CUDA GPU that supports it, as train.bf16's
    default trains there, so that float32 master weights sample as they train."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_supported)
    assert TransformersConfig().autocast == "gpu"
    for setting in ("gpu", "auto"):
        expected = torch.bfloat16 if bf16_supported else None
        assert autocast_dtype(weights_on("cuda"), setting) is expected
    assert autocast_dtype(weights_on("cuda"), "off") is None
    assert autocast_dtype(weights_on("cuda", torch.bfloat16), "gpu") is None  # already computes in bf16


def test_on_a_cpu_only_auto_autocasts():
    """On a CPU the default stays float32 (cached and uncached paths agree to 1e-4); "auto" is bfloat16
    where the CPU multiplies it natively."""
    assert autocast_dtype(weights_on("cpu"), "gpu") is None
    assert autocast_dtype(weights_on("cpu"), "auto") is (torch.bfloat16 if cpu_has_fast_bf16() else None)
    assert autocast_dtype(weights_on("cpu"), "bfloat16") is torch.bfloat16
