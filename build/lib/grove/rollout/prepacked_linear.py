"""Linear layers of a frozen generation model with their weights prepacked in oneDNN's blocked layout (CPU).

On the CPU, a bfloat16 ``F.linear`` hands the ``[out, in]`` weight to oneDNN, which reorders it into its
blocked layout on **every call**: at decode shapes (1 to 64 rows) that reorder costs as much as the product.
In a profile of one SmolLM2-135M decode step in bf16 these products take most of the step, at one row and
at 64 rows alike. Reordering each weight once, when the generation copy is (re)built, with
``torch.ops.mkldnn._reorder_linear_weight``, and running the product with ``torch.ops.mkldnn._linear_pointwise``
(the pair PyTorch's own inductor uses for frozen CPU linear layers) skips the per-call reorder:

* bfloat16: **the same values bit for bit**, faster products at decode shapes;
* float32 (against MKL's sgemm): the same products summed in oneDNN's order (differences at float32 rounding,
  ≈ 1e-4 on logits), also faster at decode shapes.

The speed-ups are measured by ``benchmarks/generation_levers.py`` (generation alone, plain vs prepacked) and
``benchmarks/roofline.py --decode-steps-timed`` (the one-token decode step); results in docs/benchmarks.md.

The packed weight is an opaque oneDNN tensor: it cannot be deep-copied, saved, moved or trained, so only a
frozen copy that is rebuilt from the policy after each optimizer step uses it
(:class:`grove.rollout.generation_weights.GenerationWeights`, ``rollout.prepacked_weights``). The output
projection is packed too, as its own copy when it is tied to the input embedding (the embedding lookup needs
the dense weight): +0.06 GB for the 135M default while generating; the copy is released during the update.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["PrepackedLinear", "prepack_linear_layers", "prepacking_supported"]

ROWS_HINT = 64  # the batch size oneDNN picks the blocked layout for (a full decode step's rows)


def prepacking_supported(dtype: torch.dtype, device: torch.device | str) -> bool:
    """Whether linear weights of ``dtype`` on ``device`` can be prepacked: float32, or bfloat16 where oneDNN has
    bfloat16 kernels, on a CPU with oneDNN."""
    if torch.device(device).type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    try:
        if not hasattr(ops, "_reorder_linear_weight"):
            return False
        return dtype == torch.float32 or bool(ops._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


class PrepackedLinear(nn.Module):
    """``y = x Wᵀ + b`` with ``W`` held in oneDNN's blocked layout (inference only; see the module docstring).

    ``source`` names the parameter of the policy the weight is copied from (:meth:`repack` takes it again
    after each optimizer step); :meth:`release` frees the packed weight until then."""

    def __init__(self, weight: Tensor, bias: Tensor | None, source: str, *, keep_dense: bool = False) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.source = source
        self.dtype = weight.dtype
        self.keep_dense = keep_dense
        self.packed: Tensor | None = None
        self.dense: Tensor | None = None  # the [out, in] weight as well, with keep_dense (an untied output projection)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.repack(weight)

    @torch.no_grad()
    def repack(self, weight: Tensor) -> None:
        """Pack ``weight`` (``[out, in]``, cast to this layer's dtype) in place of the current packed weight."""
        dense = weight.detach().to(self.dtype).contiguous()
        self.packed = None  # free the old one first
        self.packed = torch.ops.mkldnn._reorder_linear_weight(dense, ROWS_HINT)
        if self.keep_dense:
            self.dense = dense if dense.data_ptr() != weight.data_ptr() else dense.clone()

    def release(self) -> None:
        self.packed = None
        self.dense = None

    def forward(self, x: Tensor) -> Tensor:
        if self.packed is None:
            raise RuntimeError(f"the prepacked weight of {self.source} was released; refresh the generation copy")
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, source={self.source}"


def prepack_linear_layers(
    model: nn.Module, parameter_names: dict[int, str], keep_dense: frozenset[int] = frozenset()
) -> list[PrepackedLinear]:
    """Replace every plain ``nn.Linear`` of ``model`` by a :class:`PrepackedLinear` of its weight; returns them.

    ``parameter_names`` maps ``id(weight)`` to the weight's name in the policy the copy mirrors; the layers whose
    weight's id is in ``keep_dense`` hold the dense weight too (an untied output projection, whose top logits
    :mod:`grove.rollout.exact_logits` recomputes from it). Linear layers anywhere inside an adapter (a module with
    a ``base_layer``, as peft's LoRA layers are: the base layer and the ``lora_A`` / ``lora_B`` dictionaries) are
    left alone: the adapter reads their weights."""
    in_adapters = {id(m) for a in model.modules() if hasattr(a, "base_layer") for m in a.modules()}
    replaced: list[PrepackedLinear] = []
    for parent in list(model.modules()):
        if id(parent) in in_adapters:
            continue
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            packed = PrepackedLinear(
                child.weight, child.bias, parameter_names[id(child.weight)], keep_dense=id(child.weight) in keep_dense
            )
            setattr(parent, name, packed)
            replaced.append(packed)
    return replaced
