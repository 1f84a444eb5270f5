"""Generation alone with transformers' ``sdpa`` vs grove's ``grove_sdpa`` (one-token decode attention as two
matmuls), alternated in one process on the same prompts and seeds (results in docs/benchmarks.md).

    python benchmarks/decode_attention.py --precision bf16 --rounds 3
    python benchmarks/decode_attention.py --precision fp32 --rounds 3

8 arithmetic prompts × 8 samples × ``--tokens`` new tokens (EOS off, so every round does the same work) with
SmolLM2-135M in the given weight dtype, 2 threads, the ``retain`` host allocator. Prints each round, the medians,
tokens/s and the fraction of sampled tokens both implementations agree on (bf16 rounding differences change
the samples after the first divergence; fp32 agrees almost everywhere).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grove.infra.runtime import configure_runtime
from grove.models.pretrained import resolve_model_path
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine


def arithmetic_chat_prompts(tokenizer, count: int = 8) -> list[list[int]]:
    """The token ids of ``count`` chat-templated two-number additions (the generation benchmarks' prompts)."""
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {7 * i} + {13 * i}? Answer with just the number."}],
            add_generation_prompt=True, tokenize=True, return_dict=True,
        )["input_ids"]
        for i in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    configure_runtime(args.threads, "retain")
    path = str(resolve_model_path("smollm2-135m"))
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = arithmetic_chat_prompts(tokenizer)
    engine = TransformersEngine(model, tokenizer, eos_token_ids=[])
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.tokens)
    seconds: dict[str, list[float]] = {"sdpa": [], "grove_sdpa": []}
    for r in range(args.rounds):
        outputs = {}
        for impl in seconds:
            model.set_attn_implementation(impl)
            start = time.perf_counter()
            outputs[impl] = engine.generate(prompts, 8, sampling, torch.Generator().manual_seed(r))
            seconds[impl].append(time.perf_counter() - start)
        same = (outputs["sdpa"].response_ids == outputs["grove_sdpa"].response_ids).float().mean().item()
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seconds.items())
              + f"; same tokens {same:.3f}", flush=True)
    tokens = 64 * args.tokens
    for impl, values in seconds.items():
        median = statistics.median(values)
        print(f"{args.precision} {impl}: median {median:.2f} s, {tokens / median:.0f} tokens/s")
    print(f"grove_sdpa: {statistics.median(seconds['sdpa']) / statistics.median(seconds['grove_sdpa']):.2f}× sdpa")


if __name__ == "__main__":
    main()
