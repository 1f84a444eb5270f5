"""The static-cache engine's own copy of a decoder's weights: fused, in the generation dtype, refreshed in place.

Per layer the query, key and value projections are one ``[(H + 2·KV)·D, hidden]`` matrix and the MLP's gate and up
projections one ``[2·I, hidden]`` matrix, so a decode step runs four matrix products a layer instead of seven. The
tensors are allocated once and :meth:`DecodeWeights.refresh` copies the policy's current weights into them
(``copy_``, casting to the generation dtype), so a decode step captured as a CUDA graph keeps reading valid
addresses after every optimizer step. A LoRA adapter is merged on the way (``W + Σ_adapters B·A·scale``, peft's own
``get_delta_weight``), so adapted policies decode at the base model's speed.

``exact_head``: the output projection is also held in float32 (the generation-dtype values, upcast exactly) and the
logits are computed in float32 from it: the float32 logits of the low-precision weights for the whole vocabulary,
which :mod:`grove.rollout.exact_logits` recomputes for each row's top candidates in the transformers engine
(``rollout.exact_top_logits``; greedy then picks the float32 argmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from grove.rollout.decoder_spec import DecoderSpec, base_causal_lm

__all__ = ["DecodeWeights", "LayerWeights", "effective_linear"]


@dataclass
class LayerWeights:
    """One decoder layer's tensors (biases ``None`` where the model has none)."""

    input_norm: Tensor
    qkv: Tensor
    qkv_bias: Tensor | None
    q_norm: Tensor | None
    k_norm: Tensor | None
    out: Tensor
    out_bias: Tensor | None
    post_norm: Tensor
    gate_up: Tensor
    gate_up_bias: Tensor | None
    down: Tensor
    down_bias: Tensor | None


def effective_linear(module: nn.Module) -> tuple[Tensor, Tensor | None]:
    """``(weight, bias)`` of a linear layer as its forward applies them: a LoRA layer's base weight plus the deltas
    of its active adapters (unless merged or disabled)."""
    base = getattr(module, "base_layer", None)
    if base is None:
        return module.weight, module.bias
    weight = base.weight
    if not getattr(module, "merged", False) and not getattr(module, "disable_adapters", False):
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
    return weight, base.bias


Parts = tuple[Tensor, ...]  # the tensors a fused one stacks along its first dimension


def _sources(lm: nn.Module, spec: DecoderSpec) -> tuple[Tensor, list[dict[str, Parts | None]], Tensor, Tensor]:
    """The model's current tensors: ``(embedding, per-layer dict of parts, final norm, output weight)``."""
    decoder = lm.model
    layers = []
    for layer in decoder.layers:
        attention, mlp = layer.self_attn, layer.mlp
        q, k, v = (effective_linear(getattr(attention, n)) for n in ("q_proj", "k_proj", "v_proj"))
        gate, up = effective_linear(mlp.gate_proj), effective_linear(mlp.up_proj)
        out, down = effective_linear(attention.o_proj), effective_linear(mlp.down_proj)
        layers.append({
            "input_norm": (layer.input_layernorm.weight,),
            "qkv": (q[0], k[0], v[0]),
            "qkv_bias": None if q[1] is None else (q[1], k[1], v[1]),
            "q_norm": (attention.q_norm.weight,) if spec.qk_norm else None,
            "k_norm": (attention.k_norm.weight,) if spec.qk_norm else None,
            "out": (out[0],),
            "out_bias": None if out[1] is None else (out[1],),
            "post_norm": (layer.post_attention_layernorm.weight,),
            "gate_up": (gate[0], up[0]),
            "gate_up_bias": None if gate[1] is None else (gate[1], up[1]),
            "down": (down[0],),
            "down_bias": None if down[1] is None else (down[1],),
        })
    head, _ = effective_linear(lm.lm_head)
    return decoder.embed_tokens.weight, layers, decoder.norm.weight, head


def _copy_parts(target: Tensor, parts: Parts) -> None:
    """Copy ``parts`` into consecutive slices of ``target``'s first dimension (cast to its dtype, no temporary)."""
    start = 0
    for part in parts:
        target.narrow(0, start, part.shape[0]).copy_(part.detach())
        start += part.shape[0]


class DecodeWeights:
    """The fused copy (see the module docstring) of ``model``'s weights in ``dtype`` on ``device``."""

    def __init__(
        self, model: nn.Module, spec: DecoderSpec, dtype: torch.dtype, device: torch.device, *, exact_head: bool
    ) -> None:
        self.spec, self.dtype, self.device = spec, dtype, device
        self.exact_head = exact_head and dtype != torch.float32
        with torch.no_grad():
            embed, layers, norm, head = _sources(base_causal_lm(model), spec)
            self.embed = self._new(embed)
            self.layers = [
                LayerWeights(**{k: None if v is None else self._new(*v) for k, v in d.items()}) for d in layers
            ]
            self.final_norm = self._new(norm)
            tied = head is embed
            self.head = self.embed if tied else self._new(head)
            self.head_float = torch.empty(self.head.shape, dtype=torch.float32, device=device) if self.exact_head else None
            self._copy_head()

    def _new(self, *parts: Tensor) -> Tensor:
        """A new tensor holding ``parts`` stacked along the first dimension, in the copy's dtype and device."""
        out = torch.empty((sum(p.shape[0] for p in parts), *parts[0].shape[1:]), dtype=self.dtype, device=self.device)
        _copy_parts(out, parts)
        return out

    def _copy_head(self) -> None:
        if self.head_float is not None:
            self.head_float.copy_(self.head)

    @torch.no_grad()
    def refresh(self, model: nn.Module) -> None:
        """Copy ``model``'s current weights into the copy, in place (same tensors, new values)."""
        embed, layers, norm, head = _sources(base_causal_lm(model), self.spec)
        self.embed.copy_(embed)
        for target, source in zip(self.layers, layers, strict=True):
            for name, parts in source.items():
                if parts is not None:
                    _copy_parts(getattr(target, name), parts)
        self.final_norm.copy_(norm)
        if self.head is not self.embed:
            self.head.copy_(head)
        self._copy_head()

    @property
    def logits_weight(self) -> Tensor:
        """The output projection the logits are computed with (float32 with :attr:`exact_head`)."""
        return self.head_float if self.head_float is not None else self.head

    def nbytes(self) -> int:
        tensors = [self.embed, self.final_norm, *(t for lw in self.layers for t in vars(lw).values() if t is not None)]
        if self.head is not self.embed:
            tensors.append(self.head)
        if self.head_float is not None:
            tensors.append(self.head_float)
        return sum(t.numel() * t.element_size() for t in tensors)
