"""IFEval calibration: greedy completions of a model on N eval prompts of the ``ifeval`` task, scored by
``ifeval_instructions``.

Prints prompt-level and instruction-level accuracy (strict and loose, as IFEval defines them: the fraction of
prompts whose instructions all pass, and the fraction of all instructions that pass) and the per-category and
per-instruction pass rates, with the generation time.

    python benchmarks/ifeval_calibration.py --prompts 60 --max-new-tokens 256
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch

import grove.wings.ifeval.ifeval_instructions  # noqa: F401  (registers the reward)
import grove.wings.ifeval.ifeval_task  # noqa: F401  (registers the task)
from grove.models.pretrained import load_policy
from grove.rewards.scoring import bind_reward
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine
from grove.tasks.task import build_task, columns_for_rewards


def rates(samples: list[dict[str, float]], counts: list[dict[str, int]]) -> dict[str, tuple[float, int]]:
    """Objective -> (pass rate over the instructions it covers, number of instructions), micro-averaged."""
    passed: dict[str, float] = defaultdict(float)
    total: dict[str, int] = defaultdict(int)
    for sample, count in zip(samples, counts, strict=True):
        for name, n in count.items():
            passed[name] += sample[name] * n  # a value is the fraction of the sample's n instructions passing
            total[name] += n
    return {name: (passed[name] / total[name], total[name]) for name in total}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="embedded model name or local model directory")
    ap.add_argument(
        "--prompts", type=int, default=60, help="number of eval prompts (the first N of the split)"
    )
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--task-seed", type=int, default=0, help="the ifeval task's split seed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="optional jsonl of prompts, completions and scores")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    task = build_task("ifeval", {"seed": args.task_seed})
    examples = list(task.eval[: args.prompts])
    model, tokenizer = load_policy(args.model)
    engine = TransformersEngine(model, tokenizer)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    generator = torch.Generator().manual_seed(0)

    texts: list[str] = []
    truncated = tokens = 0
    start = time.perf_counter()
    for i in range(0, len(examples), args.batch_size):
        chunk = examples[i : i + args.batch_size]
        out = engine.generate(encode_prompts(tokenizer, [e.prompt for e in chunk]), 1, sampling, generator)
        texts += out.texts
        truncated += int(out.truncated.sum())
        tokens += out.num_generated_tokens
        print(f"  generated {len(texts)}/{len(examples)} ({time.perf_counter() - start:.0f} s)", flush=True)
    gen_seconds = time.perf_counter() - start

    prompts = [e.prompt for e in examples]
    columns = columns_for_rewards(examples)
    per_category = [defaultdict(int) for _ in examples]
    per_id = [defaultdict(int) for _ in examples]
    for ex, cat, ids in zip(examples, per_category, per_id, strict=True):
        for iid in ex.columns["instruction_id_list"]:
            cat[iid.split(":")[0]] += 1
            ids[iid] += 1
            cat["instruction_pass"] += 1
        cat["prompt_pass"] = 1

    score_start = time.perf_counter()
    results = {}
    for mode, strict in (("strict", True), ("loose", False)):
        by_cat = bind_reward("ifeval_instructions", {"strict": strict})(prompts, texts, **columns)
        by_id = bind_reward("ifeval_instructions", {"strict": strict, "granularity": "instruction"})(
            prompts, texts, **columns
        )
        results[mode] = (by_cat, rates(by_cat, per_category), rates(by_id, per_id))
    score_seconds = time.perf_counter() - score_start

    n_instr = sum(len(e.columns["instruction_id_list"]) for e in examples)
    print(
        f"\nmodel {args.model}, {len(examples)} ifeval eval prompts ({n_instr} instructions), greedy, "
        f"max_new_tokens {args.max_new_tokens}"
    )
    print(
        f"generation {gen_seconds:.1f} s ({tokens} tokens, {tokens / gen_seconds:.1f} tok/s), "
        f"{truncated}/{len(examples)} hit max_new_tokens; scoring {score_seconds:.2f} s (both modes)\n"
    )
    print("| metric | strict | loose | n |")
    print("|---|---|---|---|")
    strict_cat, loose_cat = results["strict"][1], results["loose"][1]
    for name in ("prompt_pass", "instruction_pass"):
        label = "prompt-level accuracy" if name == "prompt_pass" else "instruction-level accuracy"
        print(f"| {label} | {strict_cat[name][0]:.3f} | {loose_cat[name][0]:.3f} | {strict_cat[name][1]} |")
    for name in sorted(k for k in strict_cat if k not in ("prompt_pass", "instruction_pass")):
        print(f"| {name} | {strict_cat[name][0]:.3f} | {loose_cat[name][0]:.3f} | {strict_cat[name][1]} |")
    print("\n| instruction | strict | loose | n |")
    print("|---|---|---|---|")
    strict_id, loose_id = results["strict"][2], results["loose"][2]
    for name in sorted(strict_id):
        print(f"| {name} | {strict_id[name][0]:.3f} | {loose_id[name][0]:.3f} | {strict_id[name][1]} |")

    if args.out:
        with args.out.open("w") as f:
            for ex, text, s, lo in zip(
                examples, texts, results["strict"][0], results["loose"][0], strict=True
            ):
                row = {
                    "key": ex.columns["key"],
                    "prompt": ex.prompt,
                    "completion": text,
                    "strict": s,
                    "loose": lo,
                }
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
