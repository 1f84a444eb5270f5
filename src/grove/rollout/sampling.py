"""Drawing one token per row from next-token logits: exact, reproducible and cheap on a CPU.

The sampler is exact (a token is drawn with exactly its probability under the tempered, optionally
truncated policy, up to float rounding: see below), reproducible (one uniform number per row and step, drawn for the
whole generation at once from the caller's ``torch.Generator``: :func:`draw_uniforms`), and never picks a token of
probability zero. It is **inverse-CDF sampling in two
levels**: the vocabulary is cut into chunks of :data:`CHUNK` tokens; the draw ``u ∈ [0, Σw)`` first finds its
chunk in the cumulative chunk masses (``[rows, V / CHUNK]``), then its token in the cumulative weights of that
one chunk (``[rows, CHUNK]``), so no float64 copy of the ``[rows, V]`` weights and no full-vocabulary
``cumsum`` is formed. The chunk masses are summed in float32 (each chunk's probability carries a relative
rounding error of about 1e-7) and accumulated in float64; the search inside a chunk runs in float64.

On the untruncated path the sampler makes two passes over the ``[rows, V]`` logits (the max, then one
subtraction that upcasts bf16 logits while it writes float32, exponentiated in place) plus one reduction; the
recorded log-prob of the drawn token is ``(z_t − max) / T − log Σ exp((z − max) / T)``, the formula
``log_softmax(z / T)`` evaluates, with the sum accumulated in float64.
``torch.multinomial`` is not used: it draws vocabulary-sized exponentials (slow on CPU) and its stream is
not stable across versions.

**The uniform table.** A generation of ``rows`` completions of at most ``steps`` tokens reads its randomness from
one ``[rows, steps]`` float64 table drawn up front (:func:`draw_uniforms`): token ``t`` of row ``r`` is drawn with
``u[r, t]``. A row's samples therefore depend on its own uniforms only, not on which other rows are still running,
so every engine (rows dropped as they finish, or kept masked in a fixed-size batch; eager or replayed as a CUDA
graph; on any device) draws the same tokens for the same seed, up to the logits' rounding. The sampler itself
reads no generator and makes no host round trip, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["CHUNK", "draw_uniforms", "filter_logits", "inverse_cdf_sample", "sample_tokens"]

CHUNK = 256  # tokens per first-level chunk: 49,152 / 256 = 192 chunk masses per row for SmolLM2


def draw_uniforms(rows: int, steps: int, generator: torch.Generator, device: torch.device | str = "cpu") -> Tensor:
    """The ``[rows, steps]`` float64 uniform numbers in ``[0, 1)`` of one generation (see the module docstring),
    drawn from ``generator`` on its own device in one call and placed on ``device``."""
    table = torch.rand((rows, steps), generator=generator, dtype=torch.float64, device=generator.device)
    return table.to(device)


def filter_logits(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to ``-inf``; ``top_k=0`` and ``top_p=1`` disable."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # drop a token when the mass of the strictly more likely tokens already reaches top_p
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _below(bound: Tensor) -> Tensor:
    """The largest float64 strictly below ``bound`` (keeps a draw inside ``[0, bound)`` after rounding)."""
    return torch.nextafter(bound, torch.zeros_like(bound))


def inverse_cdf_sample(weights: Tensor, uniforms: Tensor) -> tuple[Tensor, Tensor]:
    """Draw one index per row with probability ``weights[r, i] / Σ_i weights[r, i]``, row ``r`` with the uniform
    number ``uniforms[r]`` in ``[0, 1)`` (float64, on the weights' device).

    ``weights`` ``[rows, V]``: non-negative, unnormalised (float32 or float64), each row with positive mass.
    Returns ``(indices [rows] long, row masses Σ_i weights[r, i] [rows] float64)``. A zero-weight index is
    never drawn: both searches look for the first cumulative value *strictly above* a target that is kept
    strictly below the searched row's total.
    """
    rows, vocab = weights.shape
    chunks = -(-vocab // CHUNK)
    if chunks * CHUNK != vocab:  # pad the last chunk with zero weights (never drawn)
        weights = F.pad(weights, (0, chunks * CHUNK - vocab))
    blocks = weights.view(rows, chunks, CHUNK)
    chunk_mass = blocks.sum(-1).double()  # [rows, chunks]: summed in the weights' precision, then float64
    chunk_cdf = chunk_mass.cumsum(-1)
    total = chunk_cdf[:, -1:]
    u = torch.minimum(uniforms.reshape(rows, 1).double() * total, _below(total))
    chunk = torch.searchsorted(chunk_cdf, u, right=True).clamp_(max=chunks - 1)  # [rows, 1]
    inside = blocks.gather(1, chunk[:, :, None].expand(rows, 1, CHUNK)).squeeze(1).double().cumsum(-1)
    before = (chunk_cdf.gather(1, chunk) - chunk_mass.gather(1, chunk)).clamp_(min=0.0)
    target = torch.minimum((u - before).clamp_(min=0.0), _below(inside[:, -1:]))
    offset = torch.searchsorted(inside, target, right=True).clamp_(max=CHUNK - 1)
    return (chunk * CHUNK + offset).squeeze(1), total.squeeze(1)


def sample_tokens(
    logits: Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    uniforms: Tensor,
    never: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One token per row of ``logits [rows, V]``, and its log-prob under the tempered, *untruncated* policy; row
    ``r`` draws with ``uniforms[r]`` (a column of :func:`draw_uniforms`' table; unused when greedy).

    ``temperature == 0`` is greedy (argmax; the log-prob is then ``log_softmax(logits)[token]``). Otherwise
    tokens are drawn from ``softmax(logits / T)`` restricted to the top-k / top-p set, and the log-prob
    recorded is ``log_softmax(logits / T)[token]`` before truncation: the distribution the trainer
    recomputes (see :mod:`grove.rollout.hf_engine`). ``never`` (token ids) are cut like truncated tokens: never
    drawn, the recorded log-prob still that of the whole vocabulary (a vision-language model's image placeholder,
    which in a response would ask the training forward for an image it does not have).
    """
    if never is not None:
        return _sample_without(logits, temperature, top_k, top_p, uniforms, never)
    if temperature == 0:
        full = logits.float()
        tokens = full.argmax(dim=-1)
        picked = full.gather(-1, tokens[:, None]).squeeze(1)
        return tokens, picked - torch.logsumexp(full, dim=-1)
    if top_k > 0 or top_p < 1.0:
        full = logits.float()
        logp = torch.log_softmax(full / temperature if temperature != 1.0 else full, dim=-1)
        tokens, _ = inverse_cdf_sample(filter_logits(logp, top_k, top_p).exp(), uniforms)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(1)
    # (z - max) / T in float32, read straight from the model's logits (bf16 ones are upcast by the subtraction,
    # not copied first); the largest weight is exactly 1
    peak = logits.amax(dim=-1, keepdim=True).float()
    weights = torch.sub(logits, peak)
    if temperature != 1.0:
        weights.div_(temperature)
    tokens, mass = inverse_cdf_sample(weights.exp_(), uniforms)
    picked = logits.gather(-1, tokens[:, None]).squeeze(1).float() - peak.squeeze(1)
    if temperature != 1.0:
        picked = picked / temperature
    return tokens, picked - mass.log().float()


def _sample_without(
    logits: Tensor, temperature: float, top_k: int, top_p: float, uniforms: Tensor, never: Tensor
) -> tuple[Tensor, Tensor]:
    """:func:`sample_tokens` with the tokens ``never`` cut from the draw (and from greedy's argmax); the log-prob
    recorded is the untruncated policy's, as for top-k / top-p."""
    full = logits.float()
    logp = torch.log_softmax(full / temperature if temperature not in (0.0, 1.0) else full, dim=-1)
    allowed = logp.index_fill(-1, never.to(logp.device), float("-inf"))
    if temperature == 0:
        tokens = allowed.argmax(dim=-1)
    else:
        tokens, _ = inverse_cdf_sample(filter_logits(allowed, top_k, top_p).exp(), uniforms)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(1)
