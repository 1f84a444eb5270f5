"""Per-token log-probs (and entropies) of response tokens under a causal LM, in rollout-batch layout.

The model sees ``prompt (left-padded) + response (right-padded)`` with ``position_ids = cumsum(mask) - 1``
clamped at 0: exactly the positions the rollout engine used, so log-probs match the sampler's. Only the
hidden states that predict response tokens (sequence positions ``P-1 .. P+R-2``) and only real (unpadded)
response tokens go through the output projection, via the chunked
:func:`grove.core.logprobs.token_logprobs_and_entropy`, so no ``[N, P+R, V]`` logits tensor ever exists.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from grove.core.logprobs import token_logprobs_and_entropy

__all__ = ["policy_forward"]


def _backbone(model: nn.Module) -> nn.Module:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None or decoder is model:
        decoder = getattr(model, "model", None)
    if decoder is None:
        raise TypeError(f"cannot find the decoder backbone of {type(model).__name__}")
    return decoder


def policy_forward(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_size: int = 1024,
) -> tuple[Tensor, Tensor | None]:
    """``(logprobs [N, R], entropy [N, R] or None)`` of the response tokens, float32, zeros at response pads.

    Works with grad (policy update) and under ``torch.no_grad()`` (reference / old-policy log-probs).
    ``temperature`` must be the sampling temperature for the log-probs to be those of the sampled policy.
    Models whose logits are not ``final_hidden @ lm_head.weight.T (+ bias)`` (logit soft-capping or scaling)
    are rejected.
    """
    config = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if getattr(config, attr, None) not in (None, 1, 1.0):
            raise NotImplementedError(f"policy_forward does not support models with {attr}")
    n, p = prompt_ids.shape
    r = response_ids.shape[1]
    if p < 1:
        raise ValueError("policy_forward needs at least one prompt column")
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1).long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = _backbone(model)(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state
    hidden = hidden[:, p - 1 : p + r - 1]  # the state at position t predicts token t + 1
    keep = response_mask.bool()
    head = model.get_output_embeddings()
    logp, entropy = token_logprobs_and_entropy(
        hidden[keep],
        head.weight,
        response_ids[keep],
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        bias=getattr(head, "bias", None),
    )
    zeros = torch.zeros((n, r), dtype=torch.float32, device=logp.device)
    logp_full = zeros.masked_scatter(keep, logp)
    entropy_full = zeros.masked_scatter(keep, entropy) if entropy is not None else None
    return logp_full, entropy_full
