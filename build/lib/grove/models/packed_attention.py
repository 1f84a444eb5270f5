"""Variable-length attention for the packed training forward: PyTorch's flex attention under a ``BlockMask``
built from a packed row's segment ids, so no query attends across packed samples and no ``[T, T]`` mask exists.

A packed row (:class:`grove.models.packed_forward.PackedLayout`) holds one prompt (segment 0) and its responses
(segments 1, 2, ...) back to back, then padding (segment -1). The rule of its attention is the dense mask's:
causal, a response sees its prompt and its own earlier tokens (never a sibling), nothing sees padding, and a
padding query sees itself only. :func:`packed_block_mask` states that rule as a flex-attention ``mask_mod`` and
compresses it into a ``BlockMask`` (per 128 × 128 tile: skipped, full, or partial), so the kernel computes only the
tiles a row's samples need and its memory is linear in the row length.

The model's attention layers receive the ``BlockMask`` as their ``attention_mask`` (transformers passes a 4-D mask
through unchanged). Importing this module wraps transformers' ``sdpa`` and grove's ``grove_sdpa``
implementations so that a ``BlockMask`` goes to flex attention and every other mask to the original function, bit
for bit: the model's configured implementation is never switched, so a recomputation under activation
checkpointing (which runs after the forward returns) takes the same route. Flex attention is compiled on CUDA
(the fused Triton kernel, forward and backward), also inside passes that force compiled code to run eagerly
(``torch.compiler.set_stance("force_eager")``: eager flex attention would materialise the full score matrix); on a
CPU PyTorch runs it without gradients only.

``train.packed_attention`` selects the kernel (:func:`resolve_packed_attention`): ``auto`` uses flex attention on
CUDA where the model's attention implementation dispatches it, else the dense mask; ``flex`` requires it;
``dense_mask`` keeps the dense boolean ``[U, 1, T, T]`` mask.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import cache

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import grove.rollout.decode_attention  # noqa: F401  (registers grove_sdpa, which is wrapped below)

try:
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError:  # a PyTorch without flex attention: only the dense mask
    BlockMask = create_block_mask = flex_attention = None

__all__ = [
    "PACKED_ATTENTION",
    "flex_dispatches",
    "packed_block_mask",
    "packed_mask_mod",
    "resolve_packed_attention",
]

PACKED_ATTENTION = ("auto", "dense_mask", "flex")
_DISPATCHED = ("sdpa", "grove_sdpa", "flex_attention")  # implementations that run a BlockMask through flex


def packed_mask_mod(segment: Tensor):
    """The flex-attention ``mask_mod(b, h, q, k)`` of packed rows with segment ids ``segment [U, T]``: the rule of
    :meth:`grove.models.packed_forward.PackedLayout.attention_mask`, read per query/key pair."""

    def mask_mod(b, h, q, k):
        seg_q, seg_k = segment[b, q], segment[b, k]
        visible = (k <= q) & (seg_q >= 0) & (seg_k >= 0) & ((seg_k == 0) | (seg_k == seg_q))
        return visible | (q == k)

    return mask_mod


def packed_block_mask(segment: Tensor) -> BlockMask:
    """The ``BlockMask`` of packed rows (``segment [U, T]``: 0 prompt, ``i + 1`` response ``i``, -1 padding), one
    mask for all heads. Built by a compiled kernel on CUDA (no ``[T, T]`` tensor), on a CPU tile by tile."""
    if create_block_mask is None:
        raise NotImplementedError("this PyTorch has no flex attention (torch.nn.attention.flex_attention)")
    rows, width = segment.shape
    return create_block_mask(
        packed_mask_mod(segment), rows, None, width, width, device=segment.device, _compile=segment.is_cuda
    )


@cache
def _compiled_flex():
    return torch.compile(flex_attention)


def _flex_kernel(device: torch.device):
    """The compiled kernel on CUDA (fused forward and backward); PyTorch's unfused reference elsewhere. Inside a
    compiled region (``train.compile``'s decoder layers) the plain function, which that compilation fuses."""
    if device.type != "cuda" or torch.compiler.is_compiling():
        return flex_attention
    return _compiled_flex()


def _flex_forward(module, query, key, value, block_mask, dropout=0.0, scaling=None, **kwargs):
    """``attention(q, k, v)`` under ``block_mask``, returned ``[B, L, H, D]`` as transformers' attention functions do.
    Grouped-query heads are read in place (``enable_gqa``)."""
    if dropout or kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None:
        raise NotImplementedError("packed flex attention supports no attention dropout, soft-capping or bias")
    if query.device.type != "cuda" and torch.is_grad_enabled() and query.requires_grad:
        raise NotImplementedError(
            "PyTorch's flex attention has no backward on a CPU; set train.packed_attention: dense_mask (or auto)"
        )
    kernel = _flex_kernel(query.device)
    # the compiled kernel stays compiled where a caller forces eager execution of compiled code (the token-details
    # pass, which keeps train.compile's layers eager): eager flex attention materialises every score
    stance = nullcontext() if kernel is flex_attention else torch.compiler.set_stance("default")
    with stance:
        out = kernel(query, key, value, block_mask=block_mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _dispatching(inner):
    """``inner`` (an attention implementation), except that a ``BlockMask`` mask runs flex attention."""

    def attention(module: nn.Module, query, key, value, attention_mask, *args, **kwargs):
        if BlockMask is not None and isinstance(attention_mask, BlockMask):
            return _flex_forward(module, query, key, value, attention_mask, *args, **kwargs)
        return inner(module, query, key, value, attention_mask, *args, **kwargs)

    attention.dispatches_block_masks = True
    return attention


def _install() -> None:
    for name in ("sdpa", "grove_sdpa"):
        inner = ALL_ATTENTION_FUNCTIONS[name]
        if not getattr(inner, "dispatches_block_masks", False):
            AttentionInterface.register(name, _dispatching(inner))


if flex_attention is not None:
    _install()


def flex_dispatches(model: nn.Module) -> bool:
    """Whether ``model``'s attention layers run a ``BlockMask`` through flex attention (``sdpa``, ``grove_sdpa``,
    ``flex_attention``; not ``eager`` nor the flash-attention implementations)."""
    config = getattr(model, "config", None)
    return flex_attention is not None and getattr(config, "_attn_implementation", None) in _DISPATCHED


def resolve_packed_attention(setting: str, model: nn.Module, device: torch.device) -> str:
    """``"flex"`` or ``"dense_mask"``: the kernel ``train.packed_attention`` (``setting``) selects for ``model`` on
    ``device``. ``auto`` picks flex attention on CUDA where the model dispatches it, else the dense mask."""
    if setting not in PACKED_ATTENTION:
        raise ValueError(f"unknown packed attention {setting!r}; choose one of {list(PACKED_ATTENTION)}")
    if setting == "auto":
        return "flex" if device.type == "cuda" and flex_dispatches(model) else "dense_mask"
    if setting == "flex" and not flex_dispatches(model):
        implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
        raise NotImplementedError(
            f"packed flex attention needs torch.nn.attention.flex_attention and a model using one of {list(_DISPATCHED)}"
            f" (this one uses {implementation!r}); set train.packed_attention: dense_mask"
        )
    return setting
