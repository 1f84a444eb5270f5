"""Memory-bounded token log-probs and entropies from final hidden states and the output embedding.

Materialising ``[T, V]`` float32 logits for a whole batch (``T`` = all response tokens, ``V`` ~ 50k-150k) is
the largest activation of an RL step, and autograd would keep it (and the softmax) alive until backward.
:func:`token_logprobs_and_entropy` instead processes ``chunk_size`` rows at a time, and when grad is enabled
wraps each chunk in non-reentrant activation checkpointing: the forward keeps only the per-token outputs,
and the backward recomputes one chunk's logits at a time. Peak extra memory is ``O(chunk_size * V)``,
independent of ``T``, at the price of one extra ``hidden @ weight.T`` matmul per chunk in backward.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

__all__ = ["DEFAULT_CHUNK_SIZE", "token_logprobs_and_entropy"]

# rows of the output projection per chunk: 256 × 49k vocab × 4 B = 50 MB per logits buffer; larger chunks
# were no faster on the CPU benchmark (the [256, 576] @ [576, 49152] matmul already runs at full speed)
DEFAULT_CHUNK_SIZE = 256


def _chunk(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[Tensor, Tensor] | Tensor:
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    token_logp = logp.gather(-1, targets[:, None]).squeeze(-1)
    if not with_entropy:
        return token_logp
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return token_logp, entropy


def token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = True,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of ``targets`` and entropy under ``softmax(hidden @ weight.T + bias) / temperature)``.

    Args:
        hidden: ``[T, H]`` final hidden states (after the final norm), one per predicted token.
        weight: ``[V, H]`` output embedding (``lm_head.weight``).
        targets: ``[T]`` token ids whose log-probs are wanted.
        temperature: logits are divided by it (the tempered policy the sampler drew from).
        chunk_size: rows of ``hidden`` per chunk; bounds the live ``[chunk, V]`` float32 logits.
        with_entropy: also return the per-token entropy of the (tempered) distribution.
        bias: optional ``[V]`` output bias.

    Returns:
        ``(logprobs [T], entropy [T] or None)`` in float32. Both carry grad when the inputs do (the
        caller detaches the entropy if it only logs it). The matmul runs in the inputs' dtype; the
        softmax in float32.
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
    targets = targets.long()
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (hidden, weight, bias)
    )
    logps: list[Tensor] = []
    entropies: list[Tensor] = []
    for start in range(0, hidden.shape[0], chunk_size):
        args = (hidden[start : start + chunk_size], weight, bias, targets[start : start + chunk_size],
                temperature, with_entropy)
        out = checkpoint(_chunk, *args, use_reentrant=False) if needs_grad else _chunk(*args)
        if with_entropy:
            logps.append(out[0])
            entropies.append(out[1])
        else:
            logps.append(out)
    if not logps:  # T == 0
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    logp = torch.cat(logps) if len(logps) > 1 else logps[0]
    if not with_entropy:
        return logp, None
    return logp, (torch.cat(entropies) if len(entropies) > 1 else entropies[0])
