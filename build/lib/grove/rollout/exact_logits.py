"""Float32 logits at the top of each row when generation's output projection runs in bfloat16 (or float16).

A bfloat16 product accumulates in float32 and then rounds each logit to 8 significant bits: a logit near 20 is
kept to within ±0.06. Near the top of a confident policy, the logits of its few candidate tokens are often closer
than that, so rounding makes them equal or swaps them, and ``argmax`` resolves an exact tie towards the lower
token id, the same way every time. On the FrozenLake warm start (SmolLM2-135M, 100 held-out maps, greedy) the
rounding alone moved held-out success from 44-45 % (float32 logits, from float32 or bfloat16 operands) to 24-27 %
(the same products rounded to bfloat16): most of the four moves' logits differ by less than a rounding step.

:func:`refine_top_logits` keeps the cheap bfloat16 product for the whole vocabulary and recomputes the
``candidates`` largest logits of each row in float32 from the same operands (the final hidden state and those
rows of the output weight, upcast exactly). A row whose recomputed maximum is not above every other token's
largest possible value (its rounded logit plus the rounding bound ``u·|z|``, ``u`` = half the dtype's machine
epsilon) is recomputed whole, so greedy decoding picks the float32 argmax exactly; sampling draws from logits
that are float32 where the probability mass is. The rest of the vocabulary keeps its rounded values, upcast.

:func:`exact_top_logits` applies it to a causal LM's output embeddings with a forward hook, for the duration of
one generation (the rollout engine opens it around its decode loop), so the model's own forward (logit
soft-capping and all) runs unchanged and no other use of the module sees it. Float32 outputs pass through
untouched; a LoRA-adapted output projection, whose product is not its weight alone, is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

__all__ = ["DEFAULT_CANDIDATES", "exact_top_logits", "output_weight", "refine_top_logits"]

DEFAULT_CANDIDATES = 64
"""Logits per row recomputed in float32 (``rollout.exact_top_logits``)."""

_VOCAB_CHUNK = 8192  # output rows per float32 product when a whole row is recomputed


def refine_top_logits(
    logits: Tensor, hidden: Tensor, weight: Tensor, candidates: int = DEFAULT_CANDIDATES, bias: Tensor | None = None
) -> Tensor:
    """Float32 ``logits [..., V]`` whose ``candidates`` largest entries per row are ``hidden @ weight.T (+ bias)``
    computed in float32 (the others: the given low-precision values, upcast), and whose rows are recomputed whole
    when a token outside the candidates could still be the largest (see the module docstring)."""
    vocab = logits.shape[-1]
    rows = logits.reshape(-1, vocab)
    states = hidden.reshape(-1, hidden.shape[-1])
    k = min(candidates, vocab)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        top = rows.topk(k, dim=-1)
        exact = torch.bmm(weight[top.indices].float(), states.float().unsqueeze(-1)).squeeze(-1)
        if bias is not None:
            exact += bias.float()[top.indices]
        out = rows.float().scatter_(-1, top.indices, exact)
        if k < vocab:
            floor = top.values[:, -1].float()  # no other token's rounded logit is above it
            bound = torch.finfo(logits.dtype).eps / 2  # unit roundoff: |rounded - exact| <= bound * |exact|
            unsure = exact.amax(dim=-1) <= floor + 2 * bound * floor.abs() + 1e-4
            if bool(unsure.any()):
                out[unsure] = _whole_rows(states[unsure].float(), weight, bias)
    return out.view(logits.shape)


def _whole_rows(states: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``states @ weight.T (+ bias)`` in float32, a vocabulary chunk at a time (no float32 copy of the weight)."""
    parts = [states @ weight[i : i + _VOCAB_CHUNK].float().T for i in range(0, weight.shape[0], _VOCAB_CHUNK)]
    out = torch.cat(parts, dim=-1)
    return out + bias.float() if bias is not None else out


def output_weight(model: nn.Module) -> tuple[nn.Module, Tensor, Tensor | None] | None:
    """``(output projection module, its dense [V, H] weight, its bias)`` of a causal LM, or ``None`` where the
    weight alone does not give the product (a LoRA-adapted head) or no dense weight is held.

    A prepacked projection (:class:`grove.rollout.prepacked_linear.PrepackedLinear`) holds its weight in oneDNN's
    layout: its ``dense`` copy is used, or, when the output weight is tied to the input embeddings, theirs."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is None or hasattr(head, "base_layer"):
        return None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, Tensor):
        weight = getattr(head, "dense", None)
    if not isinstance(weight, Tensor) and getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        weight = model.get_input_embeddings().weight
    if not isinstance(weight, Tensor):
        return None
    bias = getattr(head, "bias", None)
    return head, weight, bias if isinstance(bias, Tensor) else None


@contextmanager
def exact_top_logits(model: nn.Module, candidates: int = DEFAULT_CANDIDATES) -> Iterator[bool]:
    """While open, the output projection of ``model`` returns :func:`refine_top_logits` of its low-precision
    logits; yields whether it applies (``candidates`` 0, or no dense weight: see :func:`output_weight`)."""
    found = output_weight(model) if candidates > 0 else None
    if found is None:
        yield False
        return
    head, weight, bias = found

    def refine(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        if output.dtype == torch.float32 or weight.numel() == 0:
            return output
        return refine_top_logits(output, args[0], weight, candidates, bias)

    handle = head.register_forward_hook(refine)
    try:
        yield True
    finally:
        handle.remove()
