"""Memory-bounded token log-probs and entropies from final hidden states and the output embedding.

Materialising ``[T, V]`` float32 logits for a whole batch (``T`` = all response tokens, ``V`` ~ 50k-150k) is
the largest activation of an RL step, and plain autograd would keep the logits, the log-softmax and the
softmax alive until backward. :func:`token_logprobs_and_entropy` is one autograd function with a
hand-written backward instead:

* forward: per chunk of rows, ``z = hidden @ W.T / τ``; ``log p = z - logsumexp(z)``; returns
  ``log p[y]`` and ``H = -Σ p log p``.
* backward, with ``g`` the gradient of the log-prob and ``g_H`` that of the entropy:
  ``∂L/∂z = onehot(y)·g - p·(g + g_H·(log p + H))`` (from ``∂ log p_y/∂z_k = δ_yk - p_k`` and
  ``∂H/∂z_k = -p_k (log p_k + H)``), divided by ``τ``; then ``∂L/∂hidden = ∂L/∂z @ W`` and
  ``∂L/∂W = (∂L/∂z)ᵀ @ hidden``.

Two memory modes, chosen per call by ``cache_bytes``:

* **cache** (the ``[T, V]`` probabilities and log-probs of this call fit in ``cache_bytes``): forward keeps
  them, backward reuses them. No matmul is recomputed.
* **recompute** (they don't): forward keeps only ``logsumexp`` per row; backward recomputes one chunk's
  logits at a time. Peak extra memory is ``O(chunk_size · V)``, independent of ``T``, at the price of one
  extra ``hidden @ W.T`` per chunk.

Either way the ``[T, V]`` buffers are rewritten in place (one pass per elementwise step), which is what
makes this cheaper than autograd through ``log_softmax`` + ``exp`` + ``sum`` (measured in
``docs/benchmarks.md``). Chunks are equal-sized (a 7-row remainder chunk runs its matmuls at a few
GFLOP/s on CPU).

Matmuls run in the autocast dtype when autocast is on (bf16 on CPU/GPU), else in the inputs' dtype; the
softmax, the entropy and the gradient of the logits are float32.

Inside :func:`accumulating_weight_gradient_in_place` (the single-process update opens it), the weight's
gradient is added straight into ``weight.grad`` by the backward, and autograd receives ``None`` for it. The
``[V, H]`` float32 gradient then never exists as a separate buffer. Without this, autograd holds that buffer for
a tied embedding (SmolLM2's) from the head's backward, the first step of backward, until the embedding's
backward, the last, adds its part; and a bf16 product is first widened to float32. With the softmax buffers
freed before the weight product (below), the bf16 update's peak heap in use is lower (measured with
``benchmarks/step_memory.py``; results in ``docs/benchmarks.md``). ``weight.grad`` receives the same sum, in a
different order of float additions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_SIZE",
    "accumulating_weight_gradient_in_place",
    "cache_bytes_needed",
    "reusing_weight_casts",
    "token_logprobs_and_entropy",
    "writes_weight_gradient_in_place",
]

# rows of the output projection per chunk in recompute mode and in no-grad calls: 256 × 49k vocab × 4 B =
# 50 MB per buffer; larger chunks were no faster on the CPU benchmark
DEFAULT_CHUNK_SIZE = 256
# cache mode up to 512 MiB: a micro-batch of 8 completions × 64 tokens on a 49k vocabulary needs 0.2 GB
DEFAULT_CACHE_BYTES = 512 * 2**20


def cache_bytes_needed(rows: int, vocab: int) -> int:
    """Bytes the cache mode keeps for ``rows`` predicted tokens: float32 probabilities and log-probs."""
    return 2 * 4 * rows * vocab


def _chunks(rows: int, chunk_size: int) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of at most ``chunk_size`` rows, all of (nearly) the same size."""
    if rows == 0:
        return []
    count = math.ceil(rows / chunk_size)
    size = math.ceil(rows / count)
    return [(start, min(rows, start + size)) for start in range(0, rows, size)]


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return hidden.dtype


def _logits(hidden: Tensor, weight: Tensor, bias: Tensor | None, temperature: float) -> Tensor:
    """``[rows, V]`` float32 ``(hidden @ weight.T + bias) / temperature`` (matmul in ``hidden``'s dtype)."""
    z = hidden @ weight.T
    if bias is not None:
        z = z + bias.to(z.dtype)
    z = z.float()
    if temperature != 1.0:
        z.div_(temperature)
    return z


def _softmax_stats(z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Turn logits ``z`` into log-probs in place; return ``(log p (= z), p, logsumexp)``."""
    shift = z.amax(dim=-1, keepdim=True)
    z.sub_(shift)
    p = z.exp()
    total = p.sum(dim=-1, keepdim=True)
    log_total = total.log()
    z.sub_(log_total)
    p.div_(total)
    return z, p, (shift + log_total).squeeze(-1)


def _row_dot(a: Tensor, b: Tensor) -> Tensor:
    """``(a * b).sum(-1)`` without the ``[rows, V]`` temporary."""
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).view(-1)


# weight -> (weight, version, dtype, cast) while a ``reusing_weight_casts`` block is open, else None
_weight_casts: dict[int, tuple[Tensor, int, torch.dtype, Tensor]] | None = None


@contextmanager
def reusing_weight_casts() -> Iterator[None]:
    """Within the block the output projection casts its weight to the autocast dtype once, not in every forward
    and backward.

    For the micro-batches of one optimizer step, while the weights do not change (the update loop opens it per
    mini-batch): under bf16 autocast each cast of SmolLM2's float32 ``[49152, 576]`` head reads 113 MB and writes
    57 MB, 8 times per step. A cast is reused only for the same tensor at the same version counter; the
    block's casts are dropped when it closes."""
    global _weight_casts
    outer = _weight_casts
    _weight_casts = {} if outer is None else outer
    try:
        yield
    finally:
        _weight_casts = outer


_in_place_weight_gradients = False


@contextmanager
def accumulating_weight_gradient_in_place() -> Iterator[None]:
    """Within the block, the backward of :func:`token_logprobs_and_entropy` (and of the input embedding,
    :func:`grove.kernels.token_embedding.embed_tokens`) adds a leaf weight's gradient into ``weight.grad`` itself
    (allocated as zeros when it is ``None``) instead of returning it to autograd.

    For one process only: autograd then delivers ``None`` for this part of the gradient (a tensor hook on the
    weight sees ``None``; ``torch.autograd.grad`` cannot return it), so DDP's reducer, which reduces what autograd
    accumulates, would miss it; a sharded weight (FSDP2) is not a leaf and is left to autograd anyway. The update
    opens this block when :attr:`grove.distributed.strategies.Strategy.gradients_written_in_place`."""
    global _in_place_weight_gradients
    outer = _in_place_weight_gradients
    _in_place_weight_gradients = True
    try:
        yield
    finally:
        _in_place_weight_gradients = outer


def writes_weight_gradient_in_place(weight: Tensor) -> bool:
    """Whether a backward should add ``weight``'s gradient into ``weight.grad`` itself: inside
    :func:`accumulating_weight_gradient_in_place`, for a leaf that requires grad (also the input embedding's,
    :mod:`grove.kernels.token_embedding`)."""
    return _in_place_weight_gradients and weight.is_leaf and weight.requires_grad


def _cast_weight(weight: Tensor, dtype: torch.dtype) -> Tensor:
    if weight.dtype == dtype or _weight_casts is None:
        return weight.to(dtype)
    entry = _weight_casts.get(id(weight))
    if entry is not None and entry[0] is weight and entry[1] == weight._version and entry[2] == dtype:
        return entry[3]
    cast = weight.detach().to(dtype)
    _weight_casts[id(weight)] = (weight, weight._version, dtype, cast)
    return cast


def _operands(hidden: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype):
    return hidden.to(dtype), _cast_weight(weight, dtype), (bias.to(dtype) if bias is not None else None)


def _project(hidden, weight, bias, targets, temperature, ranges, *, with_entropy, keep):
    """Per row range: the token log-probs, entropies (if ``with_entropy``) and logsumexps, concatenated,
    plus each range's ``(log p, p)`` buffers when ``keep``, and the matmul dtype. Runs with autocast off
    (the autocast dtype, if any, is applied explicitly)."""
    dtype = _compute_dtype(hidden)
    logps, entropies, lses, kept = [], [], [], []
    with torch.autocast(hidden.device.type, enabled=False):
        h, w, b = _operands(hidden, weight, bias, dtype)
        for start, end in ranges:
            logp, p, lse = _softmax_stats(_logits(h[start:end], w, b, temperature))
            logps.append(logp.gather(-1, targets[start:end, None]).squeeze(-1))
            if with_entropy:
                entropies.append(-_row_dot(p, logp))
            lses.append(lse)
            if keep:
                kept.append((logp, p))
    entropy = torch.cat(entropies) if with_entropy else None
    return torch.cat(logps), entropy, torch.cat(lses), kept, dtype


class _OutputProjectionLogprobs(torch.autograd.Function):
    """``(log p[y], H)`` of ``softmax((hidden @ W.T + b) / τ)``; see the module docstring."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size, cache):
        ctx.set_materialize_grads(False)
        ranges = [(0, hidden.shape[0])] if cache else _chunks(hidden.shape[0], chunk_size)
        token_logp, entropy, lse, kept, dtype = _project(
            hidden, weight, bias, targets, temperature, ranges, with_entropy=True, keep=cache
        )
        ctx.save_for_backward(hidden, weight, bias, targets, lse, entropy)
        ctx.kept, ctx.ranges, ctx.dtype, ctx.temperature = kept, ranges, dtype, temperature
        # its .grad receives the gradient (see the module notes)
        ctx.weight_leaf = weight if writes_weight_gradient_in_place(weight) else None
        return token_logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, lse, entropy = ctx.saved_tensors
        kept, ctx.kept = ctx.kept, []  # cached buffers are consumed (rewritten in place) below
        if grad_logp is None and grad_entropy is None:
            return (None,) * 7
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        leaf, ctx.weight_leaf = ctx.weight_leaf, None
        # one float32 matmul writes the weight gradient in place (addmm_ into zeros beat a fresh product by 8%
        # per step); a low-precision product of a single range is converted once, with no zero-filled buffer;
        # in place (accumulating_weight_gradient_in_place), every product is added into the leaf's .grad
        direct = need_w and leaf is None and ctx.dtype != torch.float32 and len(ctx.ranges) == 1
        grad_h = torch.empty_like(hidden) if need_h else None
        if need_w and leaf is not None:
            if leaf.grad is None:
                leaf.grad = torch.zeros_like(leaf)
            grad_w = leaf.grad
        elif need_w and not direct:
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        else:
            grad_w = None
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            h, w, b = _operands(hidden, weight, bias, ctx.dtype)  # in the update: the forward's cast, reused
            for i, (start, end) in enumerate(ctx.ranges):
                rows = slice(start, end)
                if kept:
                    logp, p = kept[i]
                    kept[i] = None
                else:  # recompute mode, or a second backward through a retained graph
                    logp = _logits(h[rows], w, b, ctx.temperature).sub_(lse[rows, None])
                    p = logp.exp()
                # ∂L/∂z = onehot(y)·g - p·(g + g_H·(log p + H)), built in place in one [rows, V] buffer
                if grad_entropy is not None:
                    grad_z = logp.add_(entropy[rows, None]).mul_(grad_entropy[rows, None])
                    if grad_logp is not None:
                        grad_z.add_(grad_logp[rows, None])
                    grad_z.mul_(p).neg_()
                else:
                    grad_z = p.mul_(-grad_logp[rows, None])
                if grad_logp is not None:
                    grad_z.scatter_add_(-1, targets[rows, None], grad_logp[rows, None])
                if ctx.temperature != 1.0:
                    grad_z.div_(ctx.temperature)
                if grad_b is not None:
                    grad_b.add_(grad_z.sum(dim=0))
                # the float32 buffers die here: in bf16, before the [V, H] product (which held them at the
                # backward's peak: the bf16 update's peak heap fell by both of them)
                logp = p = None
                grad_z = grad_z.to(ctx.dtype)
                if grad_h is not None:
                    grad_h[rows] = grad_z @ w
                if direct:
                    grad_w = (grad_z.T @ h[rows]).to(weight.dtype)
                elif grad_w is not None:
                    if grad_z.dtype == grad_w.dtype:
                        grad_w.addmm_(grad_z.T, h[rows])
                    else:  # a mixed-dtype add: no widened [V, H] copy of the product
                        grad_w.add_(grad_z.T @ h[rows])
        if leaf is not None:
            grad_w = None  # already in leaf.grad
        return (
            grad_h,
            grad_w.to(weight.dtype) if grad_w is not None else None,
            grad_b.to(bias.dtype) if grad_b is not None else None,
            None, None, None, None,
        )


def token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    with_entropy: bool = True,
    bias: Tensor | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of ``targets`` and entropy under ``softmax((hidden @ weight.T + bias) / temperature)``.

    Args:
        hidden: ``[T, H]`` final hidden states (after the final norm), one per predicted token.
        weight: ``[V, H]`` output embedding (``lm_head.weight``).
        targets: ``[T]`` token ids whose log-probs are wanted.
        temperature: logits are divided by it (the tempered policy the sampler drew from).
        chunk_size: rows per chunk where memory is bounded (no-grad calls and recompute mode).
        with_entropy: also return the per-token entropy of the (tempered) distribution.
        bias: optional ``[V]`` output bias.
        cache_bytes: with grad, keep the ``[T, V]`` probabilities and log-probs for backward when they fit
            in this many bytes (:func:`cache_bytes_needed`); otherwise recompute them chunk by chunk in
            backward. ``0`` always recomputes.

    Returns:
        ``(logprobs [T], entropy [T] or None)`` in float32. Both carry grad when the inputs do (the
        caller detaches the entropy if it only logs it; an unused entropy costs no backward work).
    """
    if hidden.dim() != 2 or weight.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(
            f"expected hidden [T,H], weight [V,H], targets [T]; got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)}, {tuple(targets.shape)}"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if cache_bytes < 0:
        raise ValueError(f"cache_bytes must be >= 0, got {cache_bytes}")
    targets = targets.long()
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (hidden, weight, bias)
    )
    if not needs_grad:
        ranges = _chunks(hidden.shape[0], chunk_size)
        logp, entropy, *_ = _project(hidden, weight, bias, targets, temperature, ranges, with_entropy=with_entropy,
                                     keep=False)
        return logp, entropy
    cache = cache_bytes_needed(hidden.shape[0], weight.shape[0]) <= cache_bytes
    logp, entropy = _OutputProjectionLogprobs.apply(hidden, weight, bias, targets, temperature, chunk_size, cache)
    return logp, (entropy if with_entropy else None)
