"""Where one decode step of the generation copy goes, and the alternatives measured for its parts (results in
docs/benchmarks.md).

    python benchmarks/decode_step_parts.py                   # SmolLM2-135M, bf16, 64 rows, 80 cached tokens
    python benchmarks/decode_step_parts.py --precision fp32

On the prepacked generation copy (:class:`grove.rollout.generation_weights.GenerationWeights`, ``decode attention``):

1. the one-token step with all layers and with one layer: the cost per layer and outside the layers;
2. each part of one layer timed alone (norm, q/k/v products, rotary, the cache's two ``cat``, decode attention,
   output product, MLP);
3. other forms of the decode attention (``einsum``, float32 products, a broadcast multiply and sum) against
   :func:`grove.rollout.decode_attention.decode_attention`, with their largest difference from it;
4. fused prepacked products (q/k/v as one weight, gate/up as one) against separate ones, and whether the outputs
   are equal;
5. a KV cache with room for every position (written in place, attention over the whole buffer under a mask)
   against ``cat``, at three cached lengths.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from grove.infra.runtime import configure_runtime
from grove.models.compiled_layers import decoder_layers
from grove.models.pretrained import load_policy
from grove.rollout.cache_keyword import cache_argument
from grove.rollout.decode_attention import decode_attention, use_decode_attention
from grove.rollout.generation_weights import GenerationWeights


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(max(calls // 10, 2)):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def step_ms(model: nn.Module, layers: list[nn.Module], rows: int, cached: int, repeats: int) -> float:
    """Median ms of one decode step through ``layers`` (the cache is cut back after each step)."""
    model.model.layers = nn.ModuleList(layers)
    model.config.num_hidden_layers = len(layers)
    cache = DynamicCache(config=model.config)
    vocab = model.config.vocab_size
    model(input_ids=torch.randint(vocab, (rows, cached)), **cache_argument(model, cache), use_cache=True)
    step_ids = torch.randint(vocab, (rows, 1))
    mask = torch.ones(rows, cached + 1, dtype=torch.long)
    positions = torch.full((rows, 1), cached)
    times = []
    for _ in range(repeats + 3):
        start = time.perf_counter()
        model(input_ids=step_ids, attention_mask=mask, position_ids=positions, **cache_argument(model, cache), use_cache=True)
        times.append((time.perf_counter() - start) * 1e3)
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys[:, :, :cached], layer.values[:, :, :cached]
    return statistics.median(times[3:])


def linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--cached", type=int, default=80)
    parser.add_argument("--calls", type=int, default=200, help="calls per timed part")
    parser.add_argument("--repeats", type=int, default=15, help="timed decode steps")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    configure_runtime(args.threads, "retain")
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    policy, _ = load_policy(args.model)
    model = GenerationWeights(policy, dtype, prepack=True).model
    use_decode_attention(model)
    layers = list(decoder_layers(model))
    b, t = args.rows, args.cached
    attn = layers[0].self_attn
    heads, kv_heads, dim = model.config.num_attention_heads, model.config.num_key_value_heads, attn.head_dim
    hidden = model.config.hidden_size
    with torch.inference_mode():
        full, one = step_ms(model, layers, b, t, args.repeats), step_ms(model, layers[:1], b, t, args.repeats)
        model.model.layers = nn.ModuleList(layers)
        model.config.num_hidden_layers = len(layers)
        per_layer = (full - one) / (len(layers) - 1)
        print(f"1. decode step ({args.precision}, {b} rows, {t} cached tokens): {len(layers)} layers {full:.1f} ms, "
              f"1 layer {one:.1f} ms -> {per_layer:.2f} ms per layer, {one - per_layer:.1f} ms outside the layers")

        layer, mlp = layers[0], layers[0].mlp
        x = torch.randn(b, 1, hidden, dtype=dtype)
        q = torch.randn(b, heads, 1, dim, dtype=dtype)
        k_new = torch.randn(b, kv_heads, 1, dim, dtype=dtype)
        keys, values = torch.randn(b, kv_heads, t, dim, dtype=dtype), torch.randn(b, kv_heads, t, dim, dtype=dtype)
        mask = torch.ones(b, 1, 1, t + 1, dtype=torch.bool)
        cos, sin = torch.randn(b, 1, dim, dtype=dtype), torch.randn(b, 1, dim, dtype=dtype)
        parts = {
            "input norm": lambda: layer.input_layernorm(x),
            "q, k, v products": lambda: (attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)),
            "rotary": lambda: apply_rotary_pos_emb(q, k_new, cos, sin),
            "cache cat (keys, values)": lambda: (torch.cat([keys, k_new], 2), torch.cat([values, k_new], 2)),
            "decode attention with the cats": lambda: decode_attention(
                q, torch.cat([keys, k_new], 2), torch.cat([values, k_new], 2), mask, dim**-0.5),
            "output product": lambda: attn.o_proj(x),
            "MLP": lambda: mlp(x),
            "post-attention norm": lambda: layer.post_attention_layernorm(x),
        }
        timed = {name: per_call_us(fn, args.calls) for name, fn in parts.items()}
        alone = sum(v for k, v in timed.items() if k != "cache cat (keys, values)")
        print("2. one layer's parts alone: " + ", ".join(f"{k} {v:.0f} µs" for k, v in timed.items())
              + f"; sum {alone / 1e3:.2f} ms")

        groups = heads // kv_heads
        k_all, v_all = torch.cat([keys, k_new], 2), torch.cat([values, k_new], 2)
        scale = dim**-0.5

        def float32_products():
            g = q.reshape(b, kv_heads, groups, dim).float()
            s = torch.matmul(g, k_all.float().transpose(-1, -2)).mul_(scale).masked_fill_(~mask, float("-inf"))
            return torch.matmul(s.softmax(-1), v_all.float()).to(dtype).reshape(b, heads, 1, dim)

        def einsum():
            g = q.reshape(b, kv_heads, groups, dim)
            s = torch.einsum("bkgd,bktd->bkgt", g, k_all).float().mul_(scale).masked_fill_(~mask, float("-inf"))
            return torch.einsum("bkgt,bktd->bkgd", s.softmax(-1).to(dtype), v_all).reshape(b, heads, 1, dim)

        def broadcast():
            g = q.reshape(b, kv_heads, groups, 1, dim)
            s = (g * k_all[:, :, None]).sum(-1, dtype=torch.float32).mul_(scale).masked_fill_(~mask, float("-inf"))
            return (s.softmax(-1).to(dtype)[..., None] * v_all[:, :, None]).sum(-2).reshape(b, heads, 1, dim)

        reference = decode_attention(q, k_all, v_all, mask, scale).float()
        forms = {"decode_attention": lambda: decode_attention(q, k_all, v_all, mask, scale),
                 "einsum": einsum, "float32 products": float32_products, "broadcast multiply and sum": broadcast}
        print("3. decode attention forms: " + ", ".join(
            f"{k} {per_call_us(f, args.calls):.0f} µs (max diff {(f().float() - reference).abs().max():.1e})"
            for k, f in forms.items()))

        def pack(*modules: nn.Module) -> torch.Tensor:
            weight = torch.cat([policy.get_parameter(m.source).detach().to(dtype) for m in modules])
            return torch.ops.mkldnn._reorder_linear_weight(weight, 64)

        qkv, gate_up = pack(attn.q_proj, attn.k_proj, attn.v_proj), pack(mlp.gate_proj, mlp.up_proj)
        separate_qkv = lambda: (attn.q_proj(x), attn.k_proj(x), attn.v_proj(x))  # noqa: E731
        separate_gu = lambda: (mlp.gate_proj(x), mlp.up_proj(x))  # noqa: E731
        equal_qkv = torch.equal(torch.cat(separate_qkv(), -1), linear(x, qkv))
        equal_gu = torch.equal(torch.cat(separate_gu(), -1), linear(x, gate_up))
        print(f"4. fused products: q, k, v {per_call_us(separate_qkv, args.calls):.0f} -> "
              f"{per_call_us(lambda: linear(x, qkv), args.calls):.0f} µs (equal {equal_qkv}); gate, up "
              f"{per_call_us(separate_gu, args.calls):.0f} -> {per_call_us(lambda: linear(x, gate_up), args.calls):.0f} "
              f"µs (equal {equal_gu})")

        capacity = t + 32
        rows = []
        for length in (t // 2, t, capacity - 2):
            ks, vs = torch.randn(b, kv_heads, length, dim, dtype=dtype), torch.randn(b, kv_heads, length, dim, dtype=dtype)
            k_buf = torch.randn(b, kv_heads, capacity, dim, dtype=dtype)
            v_buf = torch.randn_like(k_buf)
            grown = torch.ones(b, 1, 1, length + 1, dtype=torch.bool)
            room = torch.zeros(b, 1, 1, capacity, dtype=torch.bool)
            room[..., : length + 1] = True
            where = torch.tensor([length])

            def with_cat(ks=ks, vs=vs, grown=grown):
                return decode_attention(q, torch.cat([ks, k_new], 2), torch.cat([vs, k_new], 2), grown, scale)

            def in_place(k_buf=k_buf, v_buf=v_buf, room=room, where=where):
                k_buf.index_copy_(2, where, k_new)
                v_buf.index_copy_(2, where, k_new)
                return decode_attention(q, k_buf, v_buf, room, scale)

            rows.append(f"{length} cached: cat {per_call_us(with_cat, args.calls):.0f} µs, room for {capacity} "
                        f"{per_call_us(in_place, args.calls):.0f} µs")
        print("5. KV cache, one layer's write + attention: " + "; ".join(rows))


if __name__ == "__main__":
    main()
