"""Generation speed of the rollout engines side by side: generated tokens/s of ``transformers`` and ``static_cache``
at several batch sizes, for a model shape, on one device.

Random weights of a named shape (nothing is read from disk, so it runs on a machine the embedded weights cannot
reach): ``135m`` (SmolLM2-135M-Instruct's dimensions: 30 layers, hidden 576, 9 heads, 3 key/value heads, vocabulary
49,152, tied embeddings) or ``0.5b`` (Qwen2.5-0.5B's: 24 layers, hidden 896, 14 heads, 2 key/value heads, vocabulary
151,936, biased q/k/v); or ``--model DIR``. Prompts are random token ids (``--prompt-tokens`` each), ``--samples`` per
prompt, so ``rows = prompts × samples``; no token ends a completion (``eos_token_ids=[]``), so every row generates
``--new-tokens`` tokens and tokens/s is ``rows × new tokens / seconds`` of the whole ``generate`` call (prefill
included). The engines get the same weights in the same dtype (``--dtype``; bf16: the generation copy a bf16 run
decodes from, with float32 top logits, ``rollout.exact_top_logits``), held as a run holds them (on a CPU the
transformers engine's linear weights prepacked for oneDNN, ``rollout.prepacked_weights``). Each (engine, rows) is called once unmeasured
(a static-cache engine captures its CUDA graphs there), then ``--repeats`` times; medians are printed with the
peak device memory, and the ratio of the engines at each batch size.

    python benchmarks/rollout_engines.py --device cuda --shape 135m --rows 64 256 1024
    python benchmarks/rollout_engines.py --device cuda --shape 0.5b --rows 64 256
    python benchmarks/rollout_engines.py --device cpu --shape 135m --rows 8 --new-tokens 16 --repeats 2

The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

SHAPES = {
    "135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                 num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192,
                 rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
    "0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class IdsOnlyTokenizer:
    """What the engines read of a tokenizer when no text matters: the pad id, no end token, empty texts."""

    eos_token_id = None
    pad_token_id = 0

    def batch_decode(self, rows, skip_special_tokens=True):
        return [""] * len(rows)


def build_model(shape: str | None, model_dir: str | None, dtype: torch.dtype, device: torch.device):
    from transformers import AutoConfig, AutoModelForCausalLM

    if model_dir is not None:
        from grove.models.pretrained import load_policy

        model, tokenizer = load_policy(model_dir, dtype=dtype)
        return model.to(device).eval().requires_grad_(False), tokenizer
    settings = dict(SHAPES[shape])
    config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval().requires_grad_(False), IdsOnlyTokenizer()


def build_engine(name: str, model, tokenizer):
    """The engine over ``model`` as a run gives it: the transformers engine on a CPU decodes from a copy with
    prepacked linear weights (``rollout.prepacked_weights``), the static-cache engine from its own fused copy."""
    from grove.rollout.generation_weights import GenerationWeights
    from grove.rollout.hf_engine import TransformersEngine
    from grove.rollout.prepacked_linear import prepacking_supported
    from grove.rollout.static_engine import StaticCacheEngine

    if name == "transformers":
        first = next(model.parameters())
        if prepacking_supported(first.dtype, first.device):
            model = GenerationWeights(model, first.dtype, prepack=True).model
        return TransformersEngine(model, tokenizer, eos_token_ids=[])
    return StaticCacheEngine(model, tokenizer, eos_token_ids=[])


def measure(engine, rows: int, args, vocab: int, device: torch.device) -> dict:
    from grove.rollout.engine import SamplingParams

    g = torch.Generator().manual_seed(rows)
    prompts = torch.randint(100, vocab, (rows // args.samples, args.prompt_tokens), generator=g).tolist()
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    engine.generate(prompts, args.samples, sampling, torch.Generator().manual_seed(0))  # warm-up (graph capture)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    seconds, tokens = [], 0
    for repeat in range(args.repeats):
        start = time.perf_counter()
        out = engine.generate(prompts, args.samples, sampling, torch.Generator().manual_seed(1 + repeat))
        seconds.append(time.perf_counter() - start)
        tokens = out.num_generated_tokens
    median = statistics.median(seconds)
    return {
        "rows": rows, "tokens": tokens, "seconds": median, "tokens_per_s": tokens / median,
        "ms_per_step": 1000 * median / args.new_tokens,
        "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="135m")
    parser.add_argument("--model", default=None, help="a local model directory instead of a random shape")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--engines", nargs="+", default=["transformers", "static_cache"])
    parser.add_argument("--rows", nargs="+", type=int, default=[64, 256, 1024])
    parser.add_argument("--samples", type=int, default=8, help="completions per prompt")
    parser.add_argument("--prompt-tokens", type=int, default=45)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    start = time.perf_counter()
    model, tokenizer = build_model(args.shape, args.model, DTYPES[args.dtype], device)
    vocab = model.config.vocab_size
    results: dict[str, list[dict]] = {}
    for name in args.engines:
        engine = build_engine(name, model, tokenizer)
        results[name] = [measure(engine, rows, args, vocab, device) for rows in args.rows]
        del engine
        if device.type == "cuda":
            torch.cuda.empty_cache()
    what = args.model or args.shape
    print(f"\n{what} ({args.dtype}), {args.device}"
          f"{' ' + torch.cuda.get_device_name(device) if device.type == 'cuda' else ''}, prompts of "
          f"{args.prompt_tokens} tokens × {args.samples} samples, {args.new_tokens} new tokens, medians of "
          f"{args.repeats}\n")
    print("| engine | rows | s / generate | ms / step | generated tokens/s | peak GPU GB |")
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():
        for r in rows:
            gpu = f"{r['peak_gpu_gb']:.1f}" if r["peak_gpu_gb"] is not None else "–"
            print(f"| {name} | {r['rows']} | {r['seconds']:.3f} | {r['ms_per_step']:.2f} | {r['tokens_per_s']:,.0f} "
                  f"| {gpu} |")
    if len(results) == 2:
        first, second = results
        for a, b in zip(results[first], results[second], strict=True):
            print(f"{second} / {first} at {a['rows']} rows: {b['tokens_per_s'] / a['tokens_per_s']:.1f}×")
    result = {"model": what, "dtype": args.dtype, "device": args.device, "new_tokens": args.new_tokens,
              "samples": args.samples, "prompt_tokens": args.prompt_tokens, "results": results,
              "wall_s": time.perf_counter() - start}
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
