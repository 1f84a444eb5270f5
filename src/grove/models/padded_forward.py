"""The padded training forward: per-token log-probs (and entropies) of response tokens under a causal LM, in
rollout-batch layout, and the pieces every forward layout shares (the decoder backbone, its token inputs, the
output projection of the states that predict the scored tokens).

The model sees ``prompt (left-padded) + response (right-padded)`` with ``position_ids = cumsum(mask) - 1``
clamped at 0: exactly the positions the rollout engine used, so log-probs match the sampler's. Only the
hidden states that predict response tokens (sequence positions ``P-1 .. P+R-2``) and only real (unpadded)
response tokens go through the output projection, via the chunked
:func:`grove.kernels.output_projection.token_logprobs_and_entropy`, so no ``[N, P+R, V]`` logits tensor ever exists.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from grove.kernels.output_projection import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CHUNK_SIZE,
    token_logprobs_and_entropy,
)
from grove.kernels.token_embedding import embed_tokens
from grove.vision.families import multimodal_backbone, pixel_inputs
from grove.vision.image_table import ImageTable

__all__ = ["decoder_backbone", "logprobs_at_states", "policy_forward", "scored_tokens", "token_inputs"]


def decoder_backbone(model: nn.Module) -> nn.Module:
    """The decoder a causal LM's (or a peft model's) training forward runs: ``get_decoder()``, else ``.model``."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None or decoder is model:
        decoder = getattr(model, "model", None)
    if decoder is None:
        raise TypeError(f"cannot find the decoder backbone of {type(model).__name__}")
    return decoder


def token_inputs(backbone: nn.Module, input_ids: Tensor) -> dict[str, Tensor]:
    """The backbone's token inputs: ``inputs_embeds`` from :func:`grove.kernels.token_embedding.embed_tokens` (in the
    single-process update its weight gradient goes into ``.grad`` in place, with no ``[V, H]`` buffer per
    micro-batch) where the input embedding is a plain ``nn.Embedding`` (no ``max_norm``, frequency scaling or sparse
    gradients; a subclass may scale or transform its rows), else ``input_ids`` for the model's own lookup."""
    embedding = backbone.get_input_embeddings() if hasattr(backbone, "get_input_embeddings") else None
    plain = (
        type(embedding) is nn.Embedding
        and embedding.max_norm is None
        and not embedding.scale_grad_by_freq
        and not embedding.sparse
    )
    if not plain:
        return {"input_ids": input_ids}
    return {"inputs_embeds": embed_tokens(embedding.weight, input_ids, embedding.padding_idx)}


def policy_forward(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    scored_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    images: ImageTable | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``(logprobs [N, R], entropy [N, R] or None)`` of the response tokens, float32, zeros at response pads.

    Works with grad (policy update) and under ``torch.no_grad()`` (reference / old-policy log-probs).
    ``temperature`` must be the sampling temperature for the log-probs to be those of the sampled policy.
    ``scored_mask`` (``[N, R]``, within ``response_mask``; default: all of it): the response tokens whose
    log-probs and entropies are computed, the others read as context only and get 0 (an agent sample's
    environment tokens: the output projection over the vocabulary is a fifth of a small model's per-token cost).
    Models whose logits are not ``final_hidden @ lm_head.weight.T (+ bias)`` (logit soft-capping or scaling)
    are rejected. ``images`` (one owner per row): the pixels of a vision-language policy's image prompts; the
    multimodal model (:func:`grove.vision.families.multimodal_backbone`) puts their features in place of the
    image tokens.
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
    if images is not None:
        backbone = multimodal_backbone(model)
        inputs = {"input_ids": input_ids, **pixel_inputs(model, images)}
    else:
        backbone = decoder_backbone(model)
        inputs = token_inputs(backbone, input_ids)
    hidden = backbone(**inputs, attention_mask=attention_mask, position_ids=position_ids, use_cache=False).last_hidden_state
    hidden = hidden[:, p - 1 : p + r - 1]  # the state at position t predicts token t + 1
    scored = scored_tokens(response_mask, scored_mask)
    selected = hidden[scored]  # the states that predict the scored response tokens
    return logprobs_at_states(model, selected, response_ids, scored, temperature, with_entropy, chunk_size,
                              cache_bytes)


def scored_tokens(response_mask: Tensor, scored_mask: Tensor | None) -> Tensor:
    """``bool [N, R]``: the response tokens to compute log-probs for (``scored_mask`` within ``response_mask``)."""
    keep = response_mask.bool()
    return keep if scored_mask is None else keep & scored_mask.bool()


def logprobs_at_states(
    model: nn.Module,
    hidden: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    with_entropy: bool,
    chunk_size: int,
    cache_bytes: int,
) -> tuple[Tensor, Tensor | None]:
    """``[N, R]`` log-probs/entropies from the predicting states of the scored response tokens (``response_mask``
    here: the tokens to score), ``hidden [num tokens, H]`` in row-major order of that mask; 0 elsewhere."""
    n, r = response_ids.shape
    keep = response_mask.bool()
    head = model.get_output_embeddings()
    logp, entropy = token_logprobs_and_entropy(
        hidden,
        head.weight,
        response_ids[keep],
        temperature=temperature,
        chunk_size=chunk_size,
        cache_bytes=cache_bytes,
        with_entropy=with_entropy,
        bias=getattr(head, "bias", None),
    )
    zeros = torch.zeros((n, r), dtype=torch.float32, device=logp.device)
    logp_full = zeros.masked_scatter(keep, logp)
    entropy_full = zeros.masked_scatter(keep, entropy) if entropy is not None else None
    return logp_full, entropy_full
