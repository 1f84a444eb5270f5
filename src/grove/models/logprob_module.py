"""The training-forward module: the causal LM with grove's fused output projection as its own ``forward``.

:class:`ResponseLogprobModule` holds the policy (``causal_lm``: a transformers model, or a peft model around
one) and computes the response log-probs and entropies of a :class:`grove.batch.RolloutBatch` in its
``forward``: the decoder backbone, then :func:`grove.core.output_projection.token_logprobs_and_entropy` on the
output embedding, with no ``[N, T, V]`` logits. Because this computation is the module's own forward, a
wrapper around it sees every parameter use inside its hooks:

* DDP prepares its gradient reducer in ``forward`` and all-reduces the head's gradient with the rest;
* FSDP2 (``fully_shard``) all-gathers the root-level parameters (embeddings, final norm, the output
  embedding) in the root's pre-forward hook, so the fused kernel reads the unsharded weight, and
  reduce-scatters its gradient after backward;
* a peft adapter sits inside ``causal_lm``; reference log-probs come from the same module with the
  adapters disabled.

Reading ``lm_head.weight`` past the wrapper (what the plain functions in :mod:`grove.models.forward` do on a
bare model) would bypass all three.
"""

from __future__ import annotations

from torch import Tensor, nn

from grove.batch import RolloutBatch

__all__ = ["ResponseLogprobModule", "logprob_module_of"]


class ResponseLogprobModule(nn.Module):
    """``forward(batch, layout, **kw) -> (logprobs [N, R], entropy [N, R] or None)`` through ``causal_lm``."""

    def __init__(self, causal_lm: nn.Module) -> None:
        super().__init__()
        self.causal_lm = causal_lm

    @property
    def config(self):
        return self.causal_lm.config

    def forward(self, batch: RolloutBatch, layout: str = "packed", **kwargs) -> tuple[Tensor, Tensor | None]:
        from grove.models.forward import layout_logprobs

        return layout_logprobs(self.causal_lm, batch, layout, **kwargs)


def logprob_module_of(model: nn.Module) -> ResponseLogprobModule | None:
    """The :class:`ResponseLogprobModule` ``model`` is, or wraps (DDP keeps it as ``.module``; FSDP2 changes the
    class in place, so ``isinstance`` holds); ``None`` for a bare causal LM."""
    if isinstance(model, ResponseLogprobModule):
        return model
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, ResponseLogprobModule) else None
