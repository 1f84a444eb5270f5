"""A bfloat16 copy of the policy for generation, refreshed after every optimizer step.

Decoding is bound by reading the weights once per token step (0.54 GB for the 135M default in
float32). Generating from a bfloat16 copy halves those bytes and raises the generated tokens/s over float32
weights under bf16 autocast (``benchmarks/vs_trl.py`` with and without ``--set rollout.bf16_weights=false``;
results in ``docs/benchmarks.md``). The copy costs half the weights' memory, and the sampler's log-probs then
come from a bfloat16 model, so the rollout-vs-training mismatch (``logprob_mismatch_max``) grows;
``train.old_logprobs: recompute`` with ``algorithm.rollout_correction`` corrects for it where that matters (the same trade-off as
generating with vLLM in bf16 and training in fp32).

Under FSDP2 the training module's parameters are shards, and decoding through it would all-gather every
layer at every token on every rank in lock-step; the rollout instead runs on a full replica built here
(``dtype`` = the weights' own dtype, or bfloat16 with ``rollout.bf16_weights``), whose :meth:`refresh`
all-gathers each sharded parameter once per optimizer step (every rank calls it together).

Between phases the copy is **released** (:meth:`release`, called by the trainer once a step's rollouts are
collected) and rebuilt by the next :meth:`refresh` (after the optimizer step): the update, the peak of a bf16
step, then holds no generation copy (0.27 GB for the 135M default in bf16, 0.54 GB for an fp32 FSDP2 replica).
Rebuilding costs one cast of the weights per optimizer step, the same pass the in-place copy made.

With ``prepack=True`` (``rollout.prepacked_weights``, on by default; it applies to a float32 or bfloat16 copy
on a CPU with oneDNN, bfloat16 only where oneDNN has bfloat16 kernels) the copy's linear layers hold their
weights in oneDNN's blocked layout (:mod:`grove.rollout.prepacked_linear`): bit-identical in bf16, float32
rounding in fp32, faster products at decode shapes (``benchmarks/generation_levers.py``); each refresh packs the
new weights again (one reorder per linear weight).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from grove.rollout.prepacked_linear import PrepackedLinear, prepack_linear_layers, prepacking_supported

__all__ = ["GenerationWeights"]


class GenerationWeights:
    """``.model``: a frozen copy of ``policy`` (bfloat16 by default); :meth:`refresh` copies the current weights
    into it, gathering sharded (DTensor) parameters in full."""

    def __init__(self, policy: nn.Module, dtype: torch.dtype = torch.bfloat16, *, prepack: bool = False) -> None:
        self.dtype = dtype
        self.model = copy.deepcopy(policy).to(dtype).eval().requires_grad_(False)
        self.released = False
        self.prepacked: list[PrepackedLinear] = []
        device = next(self.model.parameters()).device
        if prepack and prepacking_supported(dtype, device):
            names = {id(param): name for name, param in self.model.named_parameters()}
            with torch.no_grad():
                dense = _untied_output_weight(self.model) if dtype != torch.float32 else frozenset()  # fp32: exact
                self.prepacked = prepack_linear_layers(self.model, names, dense)
        self.refresh(policy)

    @torch.no_grad()
    def refresh(self, policy: nn.Module) -> None:
        """Copy the current weights of ``policy`` into the copy (re-allocating them if it was released)."""
        sources = dict(policy.named_parameters())
        for name, target in self.model.named_parameters():
            full = _full(sources[name])
            if self.released:
                target.data = full.detach().to(dtype=self.dtype, copy=True)
            else:
                target.copy_(full)  # cast to the copy's dtype in place
        for layer in self.prepacked:
            layer.repack(_full(sources[layer.source]))
        self.released = False

    def release(self) -> None:
        """Free the copy's parameter storage until the next :meth:`refresh` (the module itself is kept; tied
        parameters are one tensor and are freed once)."""
        for param in self.model.parameters():
            param.data = torch.empty(0, dtype=self.dtype, device=param.device)
        for layer in self.prepacked:
            layer.release()
        self.released = True


def _untied_output_weight(model: nn.Module) -> frozenset[int]:
    """The id of the output projection's weight when it is not the input embeddings' (its prepacked layer then
    keeps a dense copy for :mod:`grove.rollout.exact_logits`; a tied one is read from the embeddings)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is None or weight is model.get_input_embeddings().weight:
        return frozenset()
    return frozenset({id(weight)})


def _full(param: Tensor) -> Tensor:
    """A parameter's full tensor (gathered from its shards under FSDP2)."""
    return param.full_tensor() if hasattr(param, "full_tensor") else param
