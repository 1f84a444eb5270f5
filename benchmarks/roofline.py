"""This machine's floor for one GRPO step, per phase, from measured matmul throughput and memory bandwidth.

    python benchmarks/roofline.py --prompt-tokens 368 --response-tokens 2609 --decode-steps 64 \\
        --measured fp32:12.3:16.8 --measured bf16:9.2:9.8

Measured here, alone, with the benchmark's thread count: the best matmul throughput (GFLOP/s) in fp32 and in
bf16 (each product in its fastest operand layout) over the model's own training shapes (``[tokens, hidden] @
[hidden, intermediate]`` and its transposes at a micro-batch's ≈ 400 tokens) and over the decode shapes (the
same products at ``--decode-rows`` rows), and the read bandwidth of a 1 GB sum. The floors (results in docs/benchmarks.md):

* **update** = FLOPs ÷ the training-shape matmul throughput, with FLOPs = ``6 · (N_body · T_train + N_head ·
  T_response)``: forward (2) + backward (4) per parameter and token; ``N_body`` the decoder's parameters
  (embedding lookups cost no matmul), ``N_head`` the output projection, computed for response tokens only;
  ``T_train`` = unique prompt tokens (packed: each prompt once per group) + response tokens;
* **generation** = Σ over decode steps of max(weight bytes ÷ bandwidth, FLOPs ÷ decode-shape throughput),
  bounded below by ``max(steps · W / BW, 2 · N · tokens / throughput)`` (what is printed: the sum of the
  max is at least the max of the sums, so the printed floor is a lower bound) plus the prefill's
  ``2 · N_body · prompt tokens``.

``--decode-steps-timed`` loads the model (``--model``, SmolLM2 by default) and times its real one-token decode step
(100 cached tokens) at one row and at ``--decode-rows`` rows, in fp32, bf16, and bf16 with the linear weights
prepacked as the generation copy holds them (``rollout.prepacked_weights``): the one-row step is the fixed cost every step pays whatever the
batch (the operator calls of 30 layers, oneDNN's per-call weight reorder of plain bf16 products, and streaming
the weights once), printed as a share of the full step.

``--products-timed`` loads the model and times each phase's **matrix products alone**, on the model's own weights
and in the layouts the real code hands them to oneDNN: a decode step's 211 products (every linear layer of the
prepacked generation copy once, in order, at ``--decode-rows`` rows), and a micro-batch's update products (per
linear layer the forward ``x Wᵀ``, the input gradient ``g W`` and the weight gradient ``gᵀ x`` of ``F.linear``'s
backward, on the weights cast as autocast casts them, at ``--train-rows`` tokens). The floor divided by that time
is the **products-only bound**: the highest efficiency any implementation that calls this CPU's products can
reach, since every other operation of the phase (attention, norms, sampling, casts, the optimizer) only adds to it.

``--measured PRECISION:GEN_S:UPDATE_S`` adds the measured phase times (e.g. from ``benchmarks/vs_trl.py``)
and prints each phase's efficiency (floor ÷ measured).

``--update-share S`` scales the update's tokens by ``S``, the share of the step's samples the update computes:
with ``train.skip_zero_advantage`` (the default) the samples of groups whose rewards all agree are left out, so the
update's floor is that of the work it does (``1 − zero_advantage_samples_skipped / samples``, read from the run's
metrics; whole groups leave, so their prompts leave too).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from grove.models.pretrained import resolve_model_path
from grove.rollout.cache_keyword import cache_argument


def run_seconds(fn, repeats: int, warmup: int = 1) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def best_seconds(fn, repeats: int = 5) -> float:
    return min(run_seconds(fn, repeats))


def matmul_gflops(shapes: list[tuple[int, int, int]], dtype: torch.dtype) -> float:
    """Aggregate GFLOP/s over ``[m, k] @ [k, n]`` products (the same set a forward + backward runs), each product
    in the fastest of its operand layouts (both contiguous, the right operand transposed, the left one transposed:
    the BLAS picks a different kernel for each, and the fastest is what this CPU can do for that product)."""
    seconds = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        b_t, a_t = b.t().contiguous().t(), a.t().contiguous().t()  # the same values, transposed storage
        seconds += min(best_seconds(lambda x=x, y=y: x @ y) for x, y in ((a, b), (a, b_t), (a_t, b)))
    return sum(2 * m * k * n for m, k, n in shapes) / seconds / 1e9


def read_gbps(mib: int = 1024) -> float:
    """Read bandwidth of a ``mib`` MiB sum (1 GiB by default: well beyond the caches)."""
    buf = torch.ones(mib * 2**18, dtype=torch.float32)
    return buf.numel() * 4 / best_seconds(buf.sum) / 1e9


def decode_step_ms(model, rows: int, context: int, dtype: torch.dtype) -> float:
    """Median wall time of one one-token decode step of ``model`` (cast to ``dtype``) for ``rows`` rows over a
    ``context``-token KV cache: the real step, with its ~600 operator calls, not just its matmuls."""
    from transformers.cache_utils import DynamicCache

    from grove.rollout.decode_attention import use_decode_attention

    model = model.to(dtype).eval()
    use_decode_attention(model)
    ids = torch.randint(min(100, model.config.vocab_size - 1), min(1000, model.config.vocab_size), (rows, context))
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, **cache_argument(model, cache), use_cache=True, logits_to_keep=1)
        times = []
        for step in range(12):
            mask = torch.ones(rows, context + step + 1, dtype=torch.long)
            start = time.perf_counter()
            model(input_ids=ids[:, -1:], attention_mask=mask, position_ids=torch.full((rows, 1), context + step),
                  **cache_argument(model, cache), use_cache=True)
            times.append(time.perf_counter() - start)
    return sorted(times[2:])[len(times[2:]) // 2] * 1000


def linear_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's linear layers (plain or prepacked) in registration order: per decoder layer q, k, v, o, gate,
    up, down, then the output projection."""
    from grove.rollout.prepacked_linear import PrepackedLinear

    return [m for m in model.modules() if isinstance(m, (torch.nn.Linear, PrepackedLinear))]


def decode_products_ms(model: torch.nn.Module, rows: int, dtype: torch.dtype) -> float:
    """Median wall ms of a decode step's products alone: every linear layer of ``model`` applied once, in order, to
    a ``[rows, in_features]`` input (the weights stream from memory as in the real step, no other operator)."""
    layers = linear_layers(model)
    inputs = {m.in_features: torch.randn(rows, m.in_features, dtype=dtype) for m in layers}
    with torch.inference_mode():
        times = run_seconds(lambda: [m(inputs[m.in_features]) for m in layers], 9, warmup=2)
    return sorted(times)[len(times) // 2] * 1000


def update_products_gflops(model: torch.nn.Module, tokens: int, dtype: torch.dtype) -> tuple[float, float]:
    """GFLOP/s of a micro-batch's update products alone, ``(decoder layers, output projection)``: per linear layer
    ``F.linear(x, W)`` (forward), ``g @ W`` (input gradient) and ``g.t() @ x`` (weight gradient), the products and
    operand layouts of ``F.linear`` and its backward, at ``tokens`` rows, on the layer's weight cast to ``dtype``."""
    layers = linear_layers(model)
    weights = [m.weight.detach().to(dtype) for m in layers]
    inputs = {w.shape[1]: torch.randn(tokens, w.shape[1], dtype=dtype) for w in weights}
    grads = {w.shape[0]: torch.randn(tokens, w.shape[0], dtype=dtype) for w in weights}

    def products(ws: list[torch.Tensor]) -> None:
        for w in ws:
            x, g = inputs[w.shape[1]], grads[w.shape[0]]
            torch.nn.functional.linear(x, w)
            g @ w
            g.t() @ x

    rates = []
    with torch.no_grad():
        for ws in (weights[:-1], weights[-1:]):
            times = run_seconds(lambda ws=ws: products(ws), 5, warmup=1)
            rates.append(sum(6 * tokens * w.numel() for w in ws) / sorted(times)[len(times) // 2] / 1e9)
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="smollm2-135m", help="embedded model name or local model directory")
    parser.add_argument("--bandwidth-mib", type=int, default=1024, help="size of the summed buffer (MiB)")
    parser.add_argument("--prompt-tokens", type=int, default=368, help="unique prompt tokens per step")
    parser.add_argument("--response-tokens", type=int, default=2609, help="generated (= trained) tokens per step")
    parser.add_argument("--decode-steps", type=int, default=64, help="decode steps of the longest completion")
    parser.add_argument("--decode-rows", type=int, default=64, help="rows of a full decode step")
    parser.add_argument("--train-rows", type=int, default=400, help="tokens of one packed micro-batch")
    parser.add_argument("--measured", action="append", default=[], metavar="PRECISION:GEN_S:UPDATE_S")
    parser.add_argument("--update-share", type=float, default=1.0,
                        help="share of the step's samples the update computes (train.skip_zero_advantage leaves out "
                        "the rest)")
    parser.add_argument("--decode-steps-timed", action="store_true",
                        help="also time the model's real decode step at 1 and --decode-rows rows (loads the model)")
    parser.add_argument("--products-timed", action="store_true",
                        help="also time each phase's matrix products alone on the model's weights (loads it) and "
                        "print the products-only bound")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = json.loads((resolve_model_path(args.model) / "config.json").read_text())
    h, i, v, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    layer_shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]  # q k v o gate up down
    n_body = layers * sum(a * b for a, b in layer_shapes)
    n_head = v * h
    t = args.train_rows
    train_shapes = [(t, a, b) for a, b in layer_shapes] + [(t, b, a) for a, b in layer_shapes] + [
        (a, t, b) for a, b in layer_shapes]  # forward, input gradient, weight gradient
    decode_shapes = [(args.decode_rows, a, b) for a, b in layer_shapes] + [(args.decode_rows, h, v)]
    bandwidth = read_gbps(args.bandwidth_mib)
    rows = []
    for name, dtype, size in (("fp32", torch.float32, 4), ("bf16", torch.bfloat16, 2)):
        train_peak = matmul_gflops(train_shapes, dtype)
        decode_peak = matmul_gflops(decode_shapes, dtype)
        update_flops = args.update_share * 6 * (
            n_body * (args.prompt_tokens + args.response_tokens) + n_head * args.response_tokens
        )
        update_floor = update_flops / (train_peak * 1e9)
        weight_bytes = size * (n_body + n_head)
        streaming = args.decode_steps * weight_bytes / (bandwidth * 1e9)
        compute = 2 * (n_body + n_head) * args.response_tokens / (decode_peak * 1e9)
        prefill = 2 * n_body * args.prompt_tokens / (train_peak * 1e9)
        gen_floor = max(streaming, compute) + prefill
        rows.append((name, train_peak, decode_peak, update_flops, update_floor, streaming, compute, gen_floor))
    print(f"read bandwidth {bandwidth:.1f} GB/s; N_body {n_body / 1e6:.1f}M, N_head {n_head / 1e6:.1f}M; "
          f"{args.threads} threads")
    print("\n| precision | matmul GFLOP/s (training shapes) | (decode shapes) | update FLOPs | update floor s | "
          "decode: weight streaming s | decode: compute s | generation floor s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, tp, dp, uf, ufl, st, co, gf in rows:
        print(f"| {name} | {tp:.0f} | {dp:.0f} | {uf / 1e12:.2f} T | {ufl:.2f} | {st:.2f} | {co:.2f} | {gf:.2f} |")
    model = None
    if args.decode_steps_timed or args.products_timed:
        from grove.models.pretrained import load_policy
        from grove.rollout.generation_weights import GenerationWeights

        model, _ = load_policy(args.model)
    if args.decode_steps_timed:
        print(f"\n| precision | decode step, 1 row ms | decode step, {args.decode_rows} rows ms | its matmul floor ms "
              f"| fixed share of the {args.decode_rows}-row step |")
        print("|---|---|---|---|---|")
        variants = (("fp32", "fp32", torch.float32, False), ("bf16", "bf16", torch.bfloat16, False),
                    ("bf16 prepacked", "bf16", torch.bfloat16, True))
        for name, precision, dtype, prepack in variants:
            step_model = GenerationWeights(model, dtype, prepack=True).model if prepack else model
            one = decode_step_ms(step_model, 1, 100, dtype)
            full = decode_step_ms(step_model, args.decode_rows, 100, dtype)
            decode_peak = next(r[2] for r in rows if r[0] == precision)
            floor = 2 * (n_body + n_head) * args.decode_rows / (decode_peak * 1e9) * 1000
            print(f"| {name} | {one:.1f} | {full:.1f} | {floor:.1f} | {one / full:.0%} |")
    floors = {r[0]: (r[7], r[4]) for r in rows}
    if args.products_timed:
        print(f"\n| precision | decode step ({args.decode_rows} rows): floor ms | its products alone ms | "
              f"products-only bound | update products GFLOP/s (layers / head, {args.train_rows} tokens) | "
              "update products-only s | update floor s | products-only bound |")
        print("|---|---|---|---|---|---|---|---|")
        for name, _train_peak, dp, _flops, ufl, *_ in rows:
            dtype = torch.float32 if name == "fp32" else torch.bfloat16
            size = 4 if name == "fp32" else 2
            step_floor = 1000 * max(size * (n_body + n_head) / (bandwidth * 1e9),
                                    2 * (n_body + n_head) * args.decode_rows / (dp * 1e9))
            generation_copy = GenerationWeights(model, dtype, prepack=True).model
            step_products = decode_products_ms(generation_copy, args.decode_rows, dtype)
            del generation_copy
            body_rate, head_rate = update_products_gflops(model, args.train_rows, dtype)
            share = args.update_share
            products_s = share * 6 * (n_body * (args.prompt_tokens + args.response_tokens) / (body_rate * 1e9)
                                      + n_head * args.response_tokens / (head_rate * 1e9))
            print(f"| {name} | {step_floor:.1f} | {step_products:.1f} | {step_floor / step_products:.0%} | "
                  f"{body_rate:.0f} / {head_rate:.0f} | {products_s:.2f} | {ufl:.2f} | {ufl / products_s:.0%} |")
    if args.measured:
        print("\n| precision | phase | floor s | measured s | of floor |")
        print("|---|---|---|---|---|")
        for item in args.measured:
            name, gen, upd = item.split(":")
            for phase, floor, measured in (("generation", floors[name][0], float(gen)),
                                           ("update", floors[name][1], float(upd))):
                print(f"| {name} | {phase} | {floor:.2f} | {measured:.2f} | {floor / measured:.0%} |")


if __name__ == "__main__":
    main()
