"""Generation alone from the bf16 copy with plain linear layers vs prepacked ones (``rollout.prepacked_weights``,
:mod:`grove.rollout.prepacked_linear`: the weights in oneDNN's blocked layout), alternated in one process on the
same prompts and seeds (results in docs/benchmarks.md).

    python benchmarks/generation_levers.py --rounds 5
    python benchmarks/generation_levers.py --rounds 5 --eos

8 arithmetic prompts × 8 samples × ``--tokens`` new tokens from SmolLM2-135M's bf16 generation copy
(:class:`grove.rollout.generation_weights.GenerationWeights`), 2 threads, the ``retain`` host allocator. EOS is
off unless ``--eos`` (then rows finish at different steps, as in training, and the row drops are timed too).
Prints each round, the medians, tokens/s, each variant's ratio to the first, and whether the samples equal the
first variant's (they must: the levers change no value).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from decode_attention import arithmetic_chat_prompts  # this directory (benchmarks are run as scripts)

from grove.infra.runtime import configure_runtime
from grove.models.pretrained import load_policy
from grove.rollout.engine import SamplingParams
from grove.rollout.generation_weights import GenerationWeights
from grove.rollout.hf_engine import TransformersEngine

VARIANTS = ("plain", "prepacked")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="the generation copy's dtype")
    parser.add_argument("--eos", action="store_true", help="stop rows at EOS (work then varies with the samples)")
    args = parser.parse_args()
    configure_runtime(args.threads, "retain")
    policy, tokenizer = load_policy("smollm2-135m")
    eos = None if args.eos else []
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    engines = {
        v: TransformersEngine(GenerationWeights(policy, dtype, prepack=v == "prepacked").model, tokenizer, eos_token_ids=eos)
        for v in args.variants
    }
    prompts = arithmetic_chat_prompts(tokenizer)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.tokens)
    seconds: dict[str, list[float]] = {v: [] for v in args.variants}
    tokens: dict[str, list[int]] = {v: [] for v in args.variants}
    first = args.variants[0]
    for r in range(args.rounds):
        outputs = {}
        for variant, engine in engines.items():
            start = time.perf_counter()
            outputs[variant] = engine.generate(prompts, 8, sampling, torch.Generator().manual_seed(r))
            seconds[variant].append(time.perf_counter() - start)
            tokens[variant].append(outputs[variant].num_generated_tokens)
        same = {v: torch.equal(o.response_ids, outputs[first].response_ids) for v, o in outputs.items()}
        print(f"round {r + 1}: " + ", ".join(f"{v} {s[-1]:.2f} s" for v, s in seconds.items())
              + f"; same samples as {first}: {same}", flush=True)
    base = statistics.median(seconds[first])
    for variant, values in seconds.items():
        median = statistics.median(values)
        print(f"{variant}: median {median:.2f} s ({min(values):.2f}–{max(values):.2f}), "
              f"{statistics.median(tokens[variant]) / median:.0f} tokens/s, {base / median:.2f}× {first}")


if __name__ == "__main__":
    main()
