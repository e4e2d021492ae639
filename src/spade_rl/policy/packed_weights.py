"""The linear layers of generation on the CPU in bfloat16 with their weights packed once, not at every call.

Under bfloat16 autocast each ``nn.Linear`` multiplies by a bfloat16 copy of its float32 weight, and oneDNN
lays that copy out in its blocked format again at every product: for the few rows of a decoding step the
re-layout costs more than the product (the 210 products of one decoding step of the default model took
30 ms at 4 rows and 17 ms with weights packed beforehand; 42 against 30 ms at 19 rows). Here the weights are
cast and packed once (``torch.ops.mkldnn._reorder_linear_weight``, 0.2 s for the default model's 106M linear
parameters) and kept until they change; during a generation call each plain ``nn.Linear`` (the output head
aside: it stays float32, :meth:`TransformersPolicy._precision`) runs oneDNN's product on the packed weight.
The products are the ones autocast computes (bfloat16 inputs and weights, float32 accumulation, a bfloat16
result): the same values.

:class:`PackedLinears` holds the packed weights with the fingerprint of the weights they were made from
(:func:`spade_rl.policy.prefix_cache.weights_fingerprint`), and :meth:`PackedLinears.clear` drops them
(``TransformersPolicy.clear_prefix_cache``, before each update: 212 MB for the default model).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from spade_rl.policy.prefix_cache import same_fingerprint, weights_fingerprint

# The row count oneDNN's layout is chosen for (a hint: any count multiplies correctly).
ROWS_HINT = 16


def why_not_packed(model: Any, dtype: Any) -> str:
    """Why the model's linear layers cannot run on packed weights ("" when they can): bfloat16 autocast of
    float32 weights on the CPU, with oneDNN's packed products in this torch."""
    import torch

    if dtype != torch.bfloat16:
        return f"generation computes in {dtype}, not bfloat16"
    if not torch.backends.mkldnn.is_available():
        return "this torch has no oneDNN"
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return "this torch has no packed oneDNN linear products"
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu" or first.dtype != torch.float32:
        return "the model's weights are not float32 on the CPU"
    return ""


class PackedLinears:
    """Packed bfloat16 weights of a model's plain linear layers, made again when the weights change."""

    def __init__(self) -> None:
        self._fingerprint: tuple[Any, Any] | None = None
        self._packed: list[tuple[Any, Any, Any]] = []  # (module, packed weight, bfloat16 bias or None)

    def clear(self) -> None:
        self._fingerprint, self._packed = None, []

    def _refresh(self, model: Any, skip: Any) -> None:
        import torch

        fingerprint = weights_fingerprint(model)
        if self._fingerprint is not None and same_fingerprint(fingerprint, self._fingerprint):
            return
        self.clear()
        packed = []
        with torch.no_grad():
            for module in model.modules():
                # Plain linear layers only (not LoRA's, not quantised ones, not one whose forward a hook
                # replaced on the instance), and not the output head.
                if type(module) is not torch.nn.Linear or module is skip or "forward" in module.__dict__:
                    continue
                weight = module.weight.detach().to(torch.bfloat16)
                bias = None if module.bias is None else module.bias.detach().to(torch.bfloat16)
                packed.append((module, torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT), bias))
        self._packed, self._fingerprint = packed, fingerprint

    @contextlib.contextmanager
    def installed(self, model: Any, skip: Any = None) -> Iterator[int]:
        """While inside, every plain ``nn.Linear`` of ``model`` but ``skip`` multiplies by its packed weight
        (packed first if the weights changed); yields how many layers do."""
        import torch

        self._refresh(model, skip)
        pointwise = torch.ops.mkldnn._linear_pointwise

        def packed_forward(packed: Any, bias: Any) -> Any:
            def forward(x: torch.Tensor) -> torch.Tensor:
                return pointwise(x.to(torch.bfloat16).contiguous(), packed, bias, "none", [], "")

            return forward

        for module, packed, bias in self._packed:
            module.forward = packed_forward(packed, bias)
        try:
            yield len(self._packed)
        finally:
            for module, _, _ in self._packed:
                module.__dict__.pop("forward", None)
