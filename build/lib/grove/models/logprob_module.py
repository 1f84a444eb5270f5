"""The training-forward module: the causal LM with grove's fused output projection as its own ``forward``.

:class:`ResponseLogprobModule` holds the policy (``causal_lm``: a transformers model, or a peft model around
one) and computes the response log-probs and entropies of a :class:`grove.batch.RolloutBatch` in its
``forward``: the decoder backbone, then :func:`grove.kernels.output_projection.token_logprobs_and_entropy` on the
output embedding, with no ``[N, T, V]`` logits. Because this computation is the module's own forward, a
wrapper around it sees every parameter use inside its hooks:

* DDP prepares its gradient reducer in ``forward`` and all-reduces the head's gradient with the rest;
* FSDP2 (``fully_shard``) all-gathers the root-level parameters (embeddings, final norm, the output
  embedding) in the root's pre-forward hook, so the fused kernel reads the unsharded weight, and
  reduce-scatters its gradient after backward;
* a peft adapter sits inside ``causal_lm``; reference log-probs come from the same module with the
  adapters disabled.

Reading ``lm_head.weight`` past the wrapper (what the forward layouts of :mod:`grove.models.forward_layouts` do on
a bare model) would bypass all three.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from grove.batch import RolloutBatch
from grove.models.forward_layouts import layout_logprobs

__all__ = ["ResponseLogprobModule", "logprob_module_of", "response_logprobs"]


class ResponseLogprobModule(nn.Module):
    """``forward(batch, layout, **kw) -> (logprobs [N, R], entropy [N, R] or None)`` through ``causal_lm``, with
    the packed rows' attention kernel ``packed_attention`` (``train.packed_attention``: ``auto``, ``dense_mask``,
    ``flex``; :func:`grove.models.packed_attention.resolve_packed_attention`)."""

    def __init__(self, causal_lm: nn.Module, packed_attention: str = "auto") -> None:
        super().__init__()
        self.causal_lm = causal_lm
        self.packed_attention = packed_attention

    @property
    def config(self):
        return self.causal_lm.config

    def forward(self, batch: RolloutBatch, layout: str = "packed", **kwargs) -> tuple[Tensor, Tensor | None]:
        kwargs.setdefault("packed_attention", self.packed_attention)
        return layout_logprobs(self.causal_lm, batch, layout, **kwargs)


def logprob_module_of(model: nn.Module) -> ResponseLogprobModule | None:
    """The :class:`ResponseLogprobModule` ``model`` is, or wraps (DDP keeps it as ``.module``; FSDP2 changes the
    class in place, so ``isinstance`` holds); ``None`` for a bare causal LM."""
    if isinstance(model, ResponseLogprobModule):
        return model
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, ResponseLogprobModule) else None


def response_logprobs(model: nn.Module, batch: RolloutBatch, layout: str = "packed", **kwargs) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropies) of ``batch``'s responses with the ``train.forward`` layout ``layout``: the one
    entry point of every training, reference and old-policy forward.

    ``packed`` encodes a group's prompt once when its rows really share it (``group_index`` +
    :func:`grove.models.shared_prefix_forward.shares_prefixes`); when they share only a beginning it runs that
    beginning once as ``shared_prefix`` does if that runs fewer positions, else gives each sample its own
    padding-free row. ``shared_prefix`` runs the common beginning of each group's prompts once
    (:func:`grove.models.shared_prefix_forward.shared_prefixes`). Only the policy's own tokens are scored (an agent
    sample's environment tokens read as context and get 0). Keyword arguments go to the forward (``temperature``,
    ``with_entropy``, ``chunk_size``, ``cache_bytes``).

    ``model`` is a bare causal LM, or a :class:`ResponseLogprobModule` (possibly inside DDP / FSDP2): then the call
    goes through the wrapper's ``forward`` so its hooks run, with the batch moved to the model's device.
    """
    inner = logprob_module_of(model)
    if inner is not None:
        device = next(inner.parameters()).device
        out = model(batch.to(device) if batch.prompt_ids.device != device else batch, layout, **kwargs)
        if not torch.is_grad_enabled() and _is_fully_sharded(model):
            # FSDP2 leaves the root's parameters gathered after a forward, expecting a backward; after a no-grad
            # forward that state made the next backward skip the root's gradient reduce-scatter (embeddings and
            # final norm kept no gradient: tests/test_distributed_equivalence.py, two_epochs_recompute)
            model.reshard()
        return out
    return layout_logprobs(model, batch, layout, **kwargs)


def _is_fully_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)
