"""Which decoders the static-cache engine runs itself, and their shapes (:class:`DecoderSpec`).

The static-cache engine (:mod:`grove.rollout.static_engine`) does not call the model's forward: it runs the decoder's
arithmetic on its own fused weights over a preallocated cache, so it supports the architectures whose arithmetic it
states, checked here. They are the pre-norm Llama family as transformers implements it:

* ``llama`` (SmolLM2, Llama 2/3), ``mistral`` (without an active sliding window), ``qwen2`` (biased q/k/v
  projections), ``qwen3`` (RMSNorm of each query and key head before the rotation);
* RMSNorm ``w · x / sqrt(mean(x²) + ε)`` computed in float32, SiLU-gated MLP, rotary position embeddings of a type
  whose table depends on the position alone (``default``, ``linear``, ``llama3``, ``yarn``; not ``dynamic`` or
  ``longrope``, which change with the sequence length), grouped-query attention at the module's ``scaling``;
* dense floating-point weights (a LoRA adapter's ``B·A·scale`` is merged into them; DoRA and quantised layers are
  not supported).

:meth:`DecoderSpec.of` returns the spec or raises :class:`UnsupportedDecoder` saying why, which
``rollout.engine: auto`` prints when it falls back to the transformers engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

__all__ = ["STATIC_ROPE_TYPES", "SUPPORTED_MODEL_TYPES", "DecoderSpec", "UnsupportedDecoder", "base_causal_lm"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class UnsupportedDecoder(ValueError):
    """The static-cache engine cannot run this model; the message says why."""


def base_causal_lm(model: nn.Module) -> nn.Module:
    """The transformers causal LM inside ``model`` (a peft model's base model, adapters still injected)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@dataclass(frozen=True)
class DecoderSpec:
    """The shapes and constants of a supported decoder (see the module docstring)."""

    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rms_eps: float
    scale: float  # attention logits are q·k · scale
    qk_norm: bool  # qwen3: RMSNorm over each query / key head
    context: int | None  # max_position_embeddings

    @property
    def q_size(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim

    @classmethod
    def of(cls, model: nn.Module) -> DecoderSpec:
        """The spec of ``model`` (a transformers causal LM or a peft model around one), or
        :class:`UnsupportedDecoder` naming what is not supported."""
        lm = base_causal_lm(model)
        config = getattr(lm, "config", None)
        model_type = getattr(config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedDecoder(
                f"model type {model_type!r} is not one it runs ({', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        act = getattr(config, "hidden_act", None)
        if act != "silu":
            raise UnsupportedDecoder(f"hidden_act {act!r} is not silu")
        decoder = getattr(lm, "model", None)
        layers = getattr(decoder, "layers", None)
        if decoder is None or layers is None or not hasattr(lm, "lm_head"):
            raise UnsupportedDecoder(f"{type(lm).__name__} has no model.layers / lm_head")
        rope_type = getattr(getattr(decoder, "rotary_emb", None), "rope_type", None)
        if rope_type not in STATIC_ROPE_TYPES:
            raise UnsupportedDecoder(
                f"rotary embedding type {rope_type!r} is not one with a fixed table ({', '.join(STATIC_ROPE_TYPES)})"
            )
        _check_attention_window(config, model_type)
        attention = layers[0].self_attn
        head_dim = int(getattr(attention, "head_dim", 0) or config.hidden_size // config.num_attention_heads)
        spec = cls(
            model_type=model_type,
            layers=len(layers),
            hidden=int(config.hidden_size),
            heads=int(config.num_attention_heads),
            kv_heads=int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads),
            head_dim=head_dim,
            intermediate=int(config.intermediate_size),
            vocab=int(getattr(lm.lm_head, "out_features", 0) or config.vocab_size),
            rms_eps=float(config.rms_norm_eps),
            scale=float(getattr(attention, "scaling", head_dim**-0.5)),
            qk_norm=hasattr(attention, "q_norm"),
            context=getattr(config, "max_position_embeddings", None),
        )
        _check_dense_weights(lm)
        return spec


def _check_attention_window(config: Any, model_type: str) -> None:
    """Refuse a sliding attention window that could be active (every layer must attend to the whole context)."""
    layer_types = getattr(config, "layer_types", None) or ()
    window = getattr(config, "sliding_window", None)
    sliding_layers = any(t == "sliding_attention" for t in layer_types)
    if model_type == "mistral":
        sliding_layers = window is not None
    if model_type == "qwen2" and not layer_types:
        sliding_layers = bool(getattr(config, "use_sliding_window", False))
    context = getattr(config, "max_position_embeddings", None)
    if sliding_layers and window is not None and (context is None or window < context):
        raise UnsupportedDecoder(f"its layers use a sliding attention window ({window} tokens)")


def _check_dense_weights(lm: nn.Module) -> None:
    """Every weight a plain floating-point tensor, every adapter a plain LoRA on a linear layer."""
    for name, module in lm.named_modules():
        if hasattr(module, "base_layer"):
            if not isinstance(module.base_layer, nn.Linear):
                raise UnsupportedDecoder(f"the adapter on {name} is not on a linear layer")
            if any(getattr(module, "use_dora", {}).values()):
                raise UnsupportedDecoder(f"{name} is a DoRA adapter (merged weights need plain LoRA)")
    for name, param in lm.named_parameters():
        if not param.is_floating_point():
            raise UnsupportedDecoder(f"{name} is stored as {param.dtype} (a quantised weight)")
        if hasattr(param, "full_tensor"):
            raise UnsupportedDecoder(f"{name} is a sharded tensor (generate from a full replica)")
