"""The precision generation computes in (:class:`spade_rl.policy.transformers_backend.TransformersPolicy`).

``autocast_dtype`` reads ``TransformersConfig.autocast`` for a model; ``generation_precision`` is the
context one forward pass of generation runs in: no gradients, and with bfloat16 autocast the output head
kept in float32 (the log-probs keep float32 precision), the linear layers on packed weights where the CPU
can multiply them (:mod:`spade_rl.policy.packed_weights`). torch is imported only when these are called.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spade_rl.policy.models import cpu_has_fast_bf16
from spade_rl.policy.packed_weights import PackedLinears, why_not_packed_weights

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def autocast_dtype(model: PreTrainedModel, setting: str) -> Any:
    """The dtype generation autocasts to (None: none), from ``TransformersConfig.autocast``."""
    import torch

    first = next(model.parameters(), None)
    if setting == "off" or first is None or first.dtype != torch.float32:
        return None  # weights already in a lower precision compute in it
    if setting == "bfloat16":
        return torch.bfloat16
    if first.device.type == "cuda":  # "gpu" and "auto"
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    return (
        torch.bfloat16 if setting == "auto" and first.device.type == "cpu" and cpu_has_fast_bf16() else None
    )


@contextlib.contextmanager
def generation_precision(
    model: PreTrainedModel, dtype: Any, setting: str, packed: PackedLinears
) -> Iterator[Any]:
    """No gradients, in the precision of generation: bfloat16 autocast when ``dtype`` (from
    :func:`autocast_dtype`) is set, with the output head in float32 (one position per row). Yields the
    dtype the call's key/value caches hold (None: as computed). ``packed`` holds the packed weights
    between calls.

    Autocast casts a weight once per context and reuses the copy only for parameters that require
    gradients, and never under ``inference_mode``: ``no_grad`` here (under ``inference_mode`` a forward
    pass of the default model took 104 ms against 26 ms, and 57 ms in float32), also without autocast of
    ours, since a model trained with ``train.bf16`` has its forward wrapped in autocast by accelerate. With
    frozen weights (LoRA's base model) every pass would cast them again: ``setting`` "gpu" and "auto" compute
    in float32 then."""
    import torch

    if dtype is not None and setting in ("gpu", "auto"):
        if not all(p.requires_grad for p in model.parameters() if p.is_floating_point()):
            dtype = None
    if dtype is None:
        with torch.no_grad(), _linears(model, packed, None, None):
            yield None
        return
    device = next(model.parameters()).device.type
    head = model.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        with torch.no_grad(), torch.autocast(device, dtype=dtype):
            yield dtype
        return
    own = head.__dict__.get("forward")  # a forward set on the instance (accelerate's hooks do)
    with contextlib.ExitStack() as stack:
        forward = stack.enter_context(_linears(model, packed, dtype, head)) or head.forward

        def float32_head(hidden: torch.Tensor) -> torch.Tensor:
            with torch.autocast(device, enabled=False):
                return forward(hidden.to(head.weight.dtype))

        head.forward = float32_head
        try:
            with torch.no_grad(), torch.autocast(device, dtype=dtype):
                yield dtype
        finally:
            if own is None:
                del head.forward  # the class's forward again
            else:
                head.forward = own


def _linears(
    model: PreTrainedModel, packed: PackedLinears, dtype: Any, head: Any
) -> contextlib.AbstractContextManager[Any]:
    """The linear layers on packed weights where they can be, computing in ``dtype`` (None: float32), but
    ``head`` (float32, its packed forward yielded, None when it has none); else as they are."""
    if why_not_packed_weights(model, dtype):
        return contextlib.nullcontext()
    return packed.installed(model, dtype, head)
