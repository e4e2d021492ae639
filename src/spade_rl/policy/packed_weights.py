"""The linear layers of generation on the CPU with their weights packed once for oneDNN, not at every call.

Under bfloat16 autocast each ``nn.Linear`` multiplies by a bfloat16 copy of its float32 weight, and oneDNN
lays that copy out in its blocked format again at every product; in float32 the products go to MKL, whose
few-row products are slow too. For the few rows of a decoding step that costs more than the product: the
210 products of one decoding step of the default model took 30 ms at 4 rows under autocast and 17 ms with
weights packed beforehand (42 against 30 ms at 19 rows), and the float32 output head (49152 x 576) took
19 ms at 4 rows and 5 ms packed (30 against 8 ms at 19 rows). Here the weights are cast and packed once
(``torch.ops.mkldnn._reorder_linear_weight``, 0.2 s for the default model) and kept until they change;
during a generation call each plain ``nn.Linear`` runs oneDNN's product on its packed weight: in bfloat16
under autocast (the products autocast computes: bfloat16 operands, float32 accumulation, a bfloat16
result), in float32 otherwise and for the output head (float32 in both,
:meth:`TransformersPolicy._precision`), equal to MKL's float32 products up to the order of accumulation.

:class:`PackedLinears` holds the packed weights with the fingerprint of the weights they were made from
(:func:`spade_rl.policy.prefix_cache.weights_fingerprint`), and :meth:`PackedLinears.clear` drops them
(``TransformersPolicy.clear_prefix_cache``, before each update: 325 MB for the default model under autocast).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from spade_rl.policy.prefix_cache import same_fingerprint, weights_fingerprint

# The row count oneDNN's layout is chosen for (a hint: any count multiplies correctly).
ROWS_HINT = 16


def why_not_packed_weights(model: Any, dtype: Any) -> str:
    """Why the model's linear layers cannot run on packed weights ("" when they can): float32 weights on
    the CPU computing in float32 (``dtype`` None) or under bfloat16 autocast, with oneDNN's packed
    products in this torch."""
    import torch

    if dtype not in (None, torch.bfloat16):
        return f"generation computes in {dtype}, not bfloat16 or float32"
    if not torch.backends.mkldnn.is_available():
        return "this torch has no oneDNN"
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return "this torch has no packed oneDNN linear products"
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu" or first.dtype != torch.float32:
        return "the model's weights are not float32 on the CPU"
    if dtype is torch.bfloat16 and not _onednn_bf16():
        # oneDNN refuses to pack a bfloat16 weight on such a CPU (AMD EPYC without AVX-512, for one);
        # autocast's own products still compute in bfloat16 there
        return "this CPU has no oneDNN bfloat16 products (they need AVX-512 BW/VL/DQ or AVX-NE-CONVERT)"
    return ""


def _onednn_bf16() -> bool:
    """Whether oneDNN computes bfloat16 products on this CPU (torch's own check, where this torch has it)."""
    import torch

    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return True if check is None else bool(check())


def _packed_forward(module: Any, packed: Any, bias: Any, dtype: Any, under_autocast: bool) -> Any:
    """``module``'s forward on its packed weight; a float32 one that finds autocast on (a forward that
    accelerate wrapped in it) leaves the product to autocast, as it would be without packing."""
    import torch

    pointwise = torch.ops.mkldnn._linear_pointwise
    plain = torch.nn.Linear.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if not under_autocast and torch.is_autocast_enabled("cpu"):
            return plain(module, x)
        return pointwise(x.to(dtype).contiguous(), packed, bias, "none", [], "")

    return forward


class PackedLinears:
    """Packed weights of a model's plain linear layers, made again when the weights or the precision
    change."""

    def __init__(self) -> None:
        self._key: tuple[Any, Any, Any] | None = None  # (fingerprint, compute dtype, head) packed for
        self._packed: list[tuple[Any, Any]] = []  # (module, its packed forward)

    def clear(self) -> None:
        self._key, self._packed = None, []

    def _refresh(self, model: Any, dtype: Any, head: Any) -> None:
        import torch

        fingerprint = weights_fingerprint(model)
        if self._key is not None and self._key[1:] == (dtype, id(head)):
            if same_fingerprint(fingerprint, self._key[0]):
                return
        self.clear()
        packed = []
        with torch.no_grad():
            for module in model.modules():
                # Plain linear layers only (not LoRA's, not quantised ones, not one whose forward a hook
                # replaced on the instance).
                if type(module) is not torch.nn.Linear or "forward" in module.__dict__:
                    continue
                as_dtype = torch.float32 if dtype is None or module is head else dtype
                weight = module.weight.detach().to(as_dtype)
                bias = None if module.bias is None else module.bias.detach().to(as_dtype)
                reordered = torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT)
                under_autocast = dtype is not None and module is not head
                packed.append((module, _packed_forward(module, reordered, bias, as_dtype, under_autocast)))
        self._packed, self._key = packed, (fingerprint, dtype, id(head))

    @contextlib.contextmanager
    def installed(self, model: Any, dtype: Any, head: Any = None) -> Iterator[Any]:
        """While inside, every plain ``nn.Linear`` of ``model`` multiplies by its packed weight (packed
        first if the weights changed), in ``dtype`` (None: float32), but ``head``, packed in float32 and
        not installed: yields its packed forward (None if it has none) for the caller to call."""
        self._refresh(model, dtype, head)
        head_forward = None
        for module, forward in self._packed:
            if module is head:
                head_forward = forward
            else:
                module.forward = forward
        try:
            yield head_forward
        finally:
            for module, _ in self._packed:
                if module is not head:
                    module.__dict__.pop("forward", None)
