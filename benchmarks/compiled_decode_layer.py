"""A decode layer of our own for Llama layers, eager and compiled, against transformers' layer in the generation copy
(results in docs/benchmarks.md: measured, not adopted by grove).

    python benchmarks/compiled_decode_layer.py --rounds 3
    python benchmarks/compiled_decode_layer.py --rounds 3 --cpp-wrapper

Each decoder layer of a prepacked generation copy (:class:`grove.rollout.generation_weights.GenerationWeights`) is
replaced by a layer whose one-token path runs two functions around the KV cache's update: (1) the input norm, the
q/k/v products and the rotary embedding; (2) the decode attention, the output product, the residuals, the second
norm and the MLP. The prepacked products are a ``torch.library`` custom op, so inductor takes them as extern calls;
the cache stays in eager code (compiling it in makes dynamo guard on every cache layer's state and recompile per
layer). Prefill runs transformers' layer. Three copies generate the same 8 prompts × ``--samples`` samples ×
``--tokens`` tokens, alternated ``--rounds`` times: transformers' layers, our layer eager (it must give the same
samples and log-probs, checked each round), and our layer compiled with ``torch.compile(dynamic=True)`` (two graphs
for every layer, batch size and cache length; its first generation holds the compilation).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from decode_attention import arithmetic_chat_prompts  # this directory (benchmarks are run as scripts)
from torch import Tensor, nn

from grove.infra.runtime import configure_runtime
from grove.models.compiled_layers import decoder_layers
from grove.models.pretrained import load_policy
from grove.rollout.cache_keyword import cache_argument
from grove.rollout.decode_attention import decode_attention
from grove.rollout.engine import SamplingParams
from grove.rollout.generation_weights import GenerationWeights
from grove.rollout.hf_engine import TransformersEngine


@torch.library.custom_op("grove_bench::prepacked_linear", mutates_args=())
def prepacked_linear(x: Tensor, packed: Tensor, out_features: int) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


@prepacked_linear.register_fake
def _(x: Tensor, packed: Tensor, out_features: int) -> Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """transformers' LlamaRMSNorm, operation for operation."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def before_cache(x, norm, eps: float, q_w, k_w, v_w, cos, sin, heads: int, kv_heads: int, dim: int):
    rows = x.shape[0]
    h = rms_norm(x, norm, eps)
    q = prepacked_linear(h, q_w, heads * dim).view(rows, 1, heads, dim).transpose(1, 2)
    k = prepacked_linear(h, k_w, kv_heads * dim).view(rows, 1, kv_heads, dim).transpose(1, 2)
    v = prepacked_linear(h, v_w, kv_heads * dim).view(rows, 1, kv_heads, dim).transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def after_cache(x, q, k, v, mask, scale: float, o_w, norm, eps: float, gate_w, up_w, down_w, hidden: int, inner: int):
    rows = x.shape[0]
    attended = decode_attention(q, k, v, mask, scale).transpose(1, 2).reshape(rows, 1, -1)
    x = x + prepacked_linear(attended, o_w, hidden)
    h = rms_norm(x, norm, eps)
    gated = torch.nn.functional.silu(prepacked_linear(h, gate_w, inner)) * prepacked_linear(h, up_w, inner)
    return x + prepacked_linear(gated, down_w, hidden)


class DecodeLayer(nn.Module):
    """A Llama decoder layer of a prepacked generation copy: the same children (so the same parameter names),
    our one-token path, transformers' layer for prefill."""

    def __init__(self, layer: nn.Module, first: Callable, second: Callable) -> None:
        super().__init__()
        object.__setattr__(self, "transformers_layer", layer)  # not a child: the parameter names stay the same
        for name, child in layer.named_children():
            setattr(self, name, child)
        self.first, self.second = first, second

    def forward(self, hidden_states, attention_mask=None, cache=None, position_embeddings=None, **kwargs):
        cache = cache if cache is not None else kwargs.pop("past_key_values", None)  # its name before transformers 5.2x
        if hidden_states.shape[1] != 1 or cache is None:
            return self.transformers_layer(hidden_states, attention_mask=attention_mask,
                                           **cache_argument(self.transformers_layer, cache),
                                           position_embeddings=position_embeddings, **kwargs)
        attn, mlp, config = self.self_attn, self.mlp, self.self_attn.config
        cos, sin = position_embeddings
        # the engine decodes under torch.compiler.set_stance("force_eager") (for layers compiled for training)
        with torch.compiler.set_stance("default"):
            q, k, v = self.first(
                hidden_states, self.input_layernorm.weight, self.input_layernorm.variance_epsilon, attn.q_proj.packed,
                attn.k_proj.packed, attn.v_proj.packed, cos, sin, config.num_attention_heads,
                config.num_key_value_heads, attn.head_dim,
            )
            k, v = cache.update(k, v, attn.layer_idx)
            mask = attention_mask[:, :, -1:, : k.shape[2]] if attention_mask is not None else None
            return self.second(
                hidden_states, q, k, v, mask, attn.scaling, attn.o_proj.packed, self.post_attention_layernorm.weight,
                self.post_attention_layernorm.variance_epsilon, mlp.gate_proj.packed, mlp.up_proj.packed,
                mlp.down_proj.packed, config.hidden_size, mlp.intermediate_size,
            )


def with_decode_layers(policy: nn.Module, dtype: torch.dtype, first, second) -> nn.Module:
    model = GenerationWeights(policy, dtype, prepack=True).model
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        layers[i] = DecodeLayer(layer, first, second)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="only transformers' layers and ours, eager")
    parser.add_argument("--cpp-wrapper", action="store_true", help="inductor's C++ wrapper for the compiled code")
    args = parser.parse_args()
    configure_runtime(args.threads, "retain")
    torch._inductor.config.cpp_wrapper = args.cpp_wrapper
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    policy, tokenizer = load_policy(args.model)
    models = {
        "transformers' layers": GenerationWeights(policy, dtype, prepack=True).model,
        "our layer, eager": with_decode_layers(policy, dtype, before_cache, after_cache),
    }
    if not args.no_compile:
        models["our layer, compiled"] = with_decode_layers(
            policy, dtype, torch.compile(before_cache, dynamic=True), torch.compile(after_cache, dynamic=True)
        )
    engines = {name: TransformersEngine(model, tokenizer, eos_token_ids=[]) for name, model in models.items()}
    prompts = arithmetic_chat_prompts(tokenizer)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.tokens)
    if not args.no_compile:
        start = time.perf_counter()
        engines["our layer, compiled"].generate(prompts, args.samples, sampling, torch.Generator().manual_seed(99))
        print(f"first compiled generation (compiling): {time.perf_counter() - start:.1f} s", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    for r in range(args.rounds):
        outputs = {}
        for name, engine in engines.items():
            start = time.perf_counter()
            outputs[name] = engine.generate(prompts, args.samples, sampling, torch.Generator().manual_seed(r))
            seconds[name].append(time.perf_counter() - start)
        reference, ours = outputs["transformers' layers"], outputs["our layer, eager"]
        same = torch.equal(reference.response_ids, ours.response_ids) and torch.equal(reference.logprobs, ours.logprobs)
        print(f"round {r + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items())
              + f"; our eager layer gives transformers' samples and log-probs: {same}", flush=True)
    base = statistics.median(seconds["transformers' layers"])
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"{name}: median {median:.2f} s ({min(values):.2f}–{max(values):.2f}), {base / median:.2f}× transformers'")


if __name__ == "__main__":
    main()
