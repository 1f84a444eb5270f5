"""Difficulty calibration of the ``clinical_hpo`` task: greedy answers of a model on eval cases, scored by
``clinical_objectives``.

    python benchmarks/clinical_calibration.py --examples 100 --set num_candidates=4 --set findings_shown=4

Builds the task (cached after the first build), decodes the first ``--examples`` eval prompts greedily
through the chat template, and prints each objective's mean, the greedy accuracy against chance
(1 / num_candidates) with a 95% Wilson interval, the rate of well-formatted completions and of parseable
answers, and which letters the model picked. ``--dump FILE`` writes one JSON line per case.

The accuracy objective only reads ``<answer>`` tags, which a small untrained model rarely writes, so the
script also reports two measures of the diagnosis alone: a *lenient* accuracy (the letter of the last
``<answer>`` block, else of the last "answer is X" / "answer: X", else of a leading "X.", the option the
model starts with) and a *forced-choice* accuracy (the candidate letter with the highest next-token
probability right after "<answer>" appended to the chat-templated prompt; one forward pass per case).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter

import torch
import yaml

import grove.wings.clinical.clinical_objectives as objectives_module
import grove.wings.clinical.clinical_task  # noqa: F401  (registers clinical_hpo)
from grove.evaluation.stats import wilson_interval
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.tasks.task import build_task, columns_for_rewards
from grove.wings.clinical.clinical_objectives import ClinicalObjectivesParams, parse_choice

_STATED_RE = objectives_module._STATED_RE  # the rules of the reward's answer_extraction: lenient
_LEADING_RE = objectives_module._LEADING_RE


def lenient_choice(text: str, candidates: list[dict]) -> tuple[str | None, str]:
    """``(letter, how)``: the letter the completion commits to, and which rule found it."""
    blocks = objectives_module._ANSWER_RE.findall(text)
    if blocks:
        return parse_choice(blocks[-1], candidates), "answer_tag"
    stated = _STATED_RE.findall(text)
    if stated:
        return stated[-1].upper(), "answer_is"
    m = _LEADING_RE.match(text)
    if m:
        return m.group(1), "leading_letter"
    return None, "none"


def forced_choice(model, tokenizer, examples, system_prompt: str | None) -> list[str]:
    """Per case, the candidate letter most probable as the next token after '<answer>'."""
    picks = []
    for ex in examples:
        ids = encode_prompts(tokenizer, [ex.prompt], system_prompt=system_prompt)[0]
        ids = ids + tokenizer("<answer>", add_special_tokens=False)["input_ids"]
        letters = [c["letter"] for c in ex.columns["candidates"]]
        letter_ids = [tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in letters]
        with torch.inference_mode():
            logits = model(torch.tensor([ids])).logits[0, -1]
        picks.append(letters[int(torch.argmax(logits[letter_ids]))])
    return picks


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="embedded model name or local model directory")
    ap.add_argument("--examples", type=int, default=100, help="eval cases to decode")
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--system-prompt", default=None, help="system prompt (default: the chat template's)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="clinical_hpo parameter (value parsed as YAML), e.g. --set num_candidates=3",
    )
    ap.add_argument("--forced-choice-only", action="store_true", help="skip generation (fast)")
    ap.add_argument("--dump", default=None, help="write the completions and scores here (JSON lines)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    task_params = {"train_size": 0, "eval_size": args.examples}
    for item in args.set:
        key, _, value = item.partition("=")
        task_params[key.strip()] = yaml.safe_load(value)
    start = time.perf_counter()
    task = build_task("clinical_hpo", task_params)
    examples = list(task.eval[: args.examples])
    build_s = time.perf_counter() - start

    from grove.models.pretrained import load_policy
    from grove.rollout.hf_engine import TransformersEngine

    model, tokenizer = load_policy(args.model)
    if args.forced_choice_only:
        forced = forced_choice(model, tokenizer, examples, args.system_prompt)
        n = len(examples)
        correct = sum(c == e.answer for c, e in zip(forced, examples, strict=True))
        lo, hi = wilson_interval(correct, n) if n else (math.nan, math.nan)
        chance = 1 / len(examples[0].columns["candidates"]) if examples else math.nan
        summary = {"task_params": task_params, "examples": n, "chance": chance,
                   "forced_choice_accuracy": correct / max(n, 1), "forced_choice_ci95": [lo, hi],
                   "forced_choice_letters": dict(sorted(Counter(forced).items()))}
        print(json.dumps(summary))
        return summary
    engine = TransformersEngine(model, tokenizer)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    generator = torch.Generator().manual_seed(0)
    reward_params = ClinicalObjectivesParams()
    scores: list[dict] = []
    texts: list[str] = []
    tokens = 0
    start = time.perf_counter()
    for first in range(0, len(examples), args.batch_size):
        chunk = examples[first : first + args.batch_size]
        ids = encode_prompts(tokenizer, [e.prompt for e in chunk], system_prompt=args.system_prompt)
        with torch.inference_mode():
            out = engine.generate(ids, 1, sampling, generator)
        tokens += int(out.response_mask.sum())
        texts.extend(out.texts)
        scores.extend(
            objectives_module.clinical_objectives(
                [e.prompt for e in chunk], out.texts, params=reward_params, **columns_for_rewards(chunk)
            )
        )
    gen_s = time.perf_counter() - start
    forced = forced_choice(model, tokenizer, examples, args.system_prompt)

    n = len(examples)
    num_candidates = len(examples[0].columns["candidates"]) if examples else 0
    means = {}
    for name in reward_params.objective_names():
        values = [s[name] for s in scores if s[name] is not None]
        means[name] = (sum(values) / len(values) if values else math.nan, len(values))
    correct = sum(int(s["accuracy"] == 1.0) for s in scores)
    lo, hi = wilson_interval(correct, n) if n else (math.nan, math.nan)
    picks: Counter[str] = Counter()
    lenient: dict[str, list[int]] = {}
    for text, ex in zip(texts, examples, strict=True):
        choice, how = lenient_choice(text, ex.columns["candidates"])
        picks[choice or "-"] += 1
        counts = lenient.setdefault(how, [0, 0])
        counts[0] += 1
        counts[1] += int(choice == ex.answer)
    lenient_correct = sum(c for _, c in lenient.values())
    llo, lhi = wilson_interval(lenient_correct, n) if n else (math.nan, math.nan)
    gold = Counter(e.answer for e in examples)
    summary = {
        "task_params": task_params,
        "examples": n,
        "chance": 1 / num_candidates if num_candidates else math.nan,
        "accuracy": correct / n if n else math.nan,
        "accuracy_ci95": [lo, hi],
        "objective_means": {k: v[0] for k, v in means.items()},
        "objective_counts": {k: v[1] for k, v in means.items()},
        "format_full_rate": sum(s["format"] == 1.0 for s in scores) / max(n, 1),
        "answer_tag_rate": sum(s["format"] > 0 for s in scores) / max(n, 1),
        "lenient_accuracy": lenient_correct / n if n else math.nan,
        "lenient_accuracy_ci95": [llo, lhi],
        "lenient_by_rule": {k: {"n": v[0], "correct": v[1]} for k, v in sorted(lenient.items())},
        "picked_any_letter_rate": 1 - picks["-"] / max(n, 1),
        "forced_choice_accuracy": sum(c == e.answer for c, e in zip(forced, examples, strict=True)) / max(n, 1),
        "forced_choice_letters": dict(sorted(Counter(forced).items())),
        "picked_letters": dict(sorted(picks.items())),
        "gold_letters": dict(sorted(gold.items())),
        "mean_completion_tokens": tokens / max(n, 1),
        "build_seconds": round(build_s, 2),
        "generate_seconds": round(gen_s, 1),
    }
    print(f"clinical_hpo calibration: {args.model}, {n} eval cases, params {task_params}")
    print("| objective | mean | n applicable |\n|---|---|---|")
    for k, (mean, count) in means.items():
        print(f"| {k} | {mean:.3f} | {count} |")
    print(
        f"accuracy {correct}/{n} = {summary['accuracy']:.3f} (95% CI {lo:.3f}-{hi:.3f}); chance "
        f"{summary['chance']:.3f}; full format {summary['format_full_rate']:.2f}; answer tag "
        f"{summary['answer_tag_rate']:.2f}"
    )
    print(
        f"lenient accuracy {lenient_correct}/{n} = {summary['lenient_accuracy']:.3f} (95% CI {llo:.3f}-{lhi:.3f}); "
        f"by rule {summary['lenient_by_rule']}; picked letters {summary['picked_letters']}"
    )
    print(
        f"forced-choice accuracy {summary['forced_choice_accuracy']:.3f}; letters "
        f"{summary['forced_choice_letters']}"
    )
    print(json.dumps(summary))
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as f:
            for ex, text, s in zip(examples, texts, scores, strict=True):
                record = {"prompt": ex.prompt, "answer": ex.answer, "completion": text, **s}
                record["lenient_choice"] = lenient_choice(text, ex.columns["candidates"])[0]
                f.write(json.dumps(record) + "\n")
    return summary


if __name__ == "__main__":
    main()
