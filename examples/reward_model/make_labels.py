"""Labelled completions of the clinical task for ``grove rm``: rule-based CRPO objectives as regression targets.

    python examples/reward_model/make_labels.py examples/reward_model_clinical.yaml [--train-cases 120]
        [--eval-cases 50] [--per-case 4] [--out runs/rm-clinical-labels]

For each case of the config's ``clinical_hpo`` task (training rows from its train split, held-out rows from its
disease-disjoint eval split) it writes ``--per-case`` completions: the first is the gold completion
(:func:`grove.demos.task_answers.clinical_completion`: every shown finding on its own line, then the correct
candidate); each other one is that completion with controlled corruptions drawn at random, each independently:

* findings dropped: each finding line is removed with probability 0.5 (comprehensiveness falls);
* unsupported findings added: 0–3 HPO terms of the lexicon that are neither shown nor an ancestor of a shown finding,
  as lines of their own (faithfulness falls);
* a wrong answer: with probability 0.5 the verdict (the same sentence) and the ``<answer>`` name another candidate
  (accuracy 0).

Every completion is scored by the rule-based reward (:func:`grove.wings.clinical.clinical_objectives.score_sample`, the
config's ``clinical_objectives`` settings: lenient answers); an objective the rules do not apply to (faithfulness
with nothing asserted) is written as ``null``, a missing label. The prompt is written as the messages a rollout
starts from: ``rollout.system_prompt`` and the case's prompt. Rows: ``{"prompt": [...], "completion": str,
"labels": {"accuracy": ..., "faithfulness": ..., "comprehensiveness": ...}}``.

The output is cached: the files are written again only when the settings differ from those in ``settings.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path
from typing import Any

from grove.resolve import load_config
from grove.tasks.task import build_task
from grove.wings.clinical.clinical_demonstrations import clinical_completion
from grove.wings.clinical.clinical_objectives import ClinicalObjectivesParams, score_sample
from grove.wings.clinical.hpo_mentions import load_lexicon

HEADS = ("accuracy", "faithfulness", "comprehensiveness")


def _unsupported_terms(lexicon_terms: dict[str, list[str]], example: Any, rng: random.Random, count: int) -> list[str]:
    """``count`` lexicon terms (their names) that are neither a shown finding nor an ancestor of one."""
    columns = example.columns
    taken = {f["id"] for f in columns["findings"]} | set(columns.get("supported_ids") or [])
    if columns.get("distractor"):
        taken.add(columns["distractor"]["id"])
    ids = list(lexicon_terms)
    out: list[str] = []
    while len(out) < count:
        term = ids[rng.randrange(len(ids))]
        if term not in taken:
            out.append(lexicon_terms[term][0].lower())
    return out


def corrupted(gold: str, example: Any, lexicon_terms: dict[str, list[str]], rng: random.Random) -> str:
    """``gold`` with findings dropped, unsupported ones added and perhaps a wrong answer (see the module docstring)."""
    lines = gold.split("\n")
    findings = [i for i, line in enumerate(lines) if line.startswith("- ")]
    keep = [i for i in findings if rng.random() >= 0.5]
    added = [f"- {term}" for term in _unsupported_terms(lexicon_terms, example, rng, rng.randint(0, 3))]
    shown = [lines[i] for i in keep] + added
    rng.shuffle(shown)
    verdict = next(line for line in lines if line.startswith("The answer is"))
    letter = str(example.answer).strip()
    if rng.random() < 0.5:  # the same verdict sentence, naming another candidate: only the choice differs
        name = next(c["name"] for c in example.columns["candidates"] if c["letter"] == letter)
        wrong = rng.choice([c for c in example.columns["candidates"] if c["letter"] != letter])
        verdict = verdict.replace(f"{letter}. {name}:", f"{wrong['letter']}. {wrong['name']}:").replace(
            f"is {letter},", f"is {wrong['letter']},")
        letter = wrong["letter"]
    head = lines[: findings[0]] if findings else lines[:2]
    answer = re.sub(r"<answer>.*</answer>", f"<answer>{letter}</answer>", lines[-1])
    return "\n".join([*head, *shown, verdict, "</think>", answer])


def labelled_rows(cfg: Any, examples: list[Any], per_case: int, seed: int) -> list[dict[str, Any]]:
    params = ClinicalObjectivesParams(objectives=list(HEADS), answer_extraction="lenient")
    rng = random.Random(seed)
    rows = []
    lexicon_terms: dict[str, list[str]] | None = None
    for example in examples:
        columns = example.columns
        if lexicon_terms is None:
            lexicon_terms = json.loads(Path(columns["lexicon_path"]).read_text(encoding="utf-8"))["terms"]
        gold = clinical_completion(example)
        prompt = [{"role": "user", "content": example.prompt_text}]
        if cfg.rollout.system_prompt:
            prompt.insert(0, {"role": "system", "content": cfg.rollout.system_prompt})
        for k in range(per_case):
            completion = gold if k == 0 else corrupted(gold, example, lexicon_terms, rng)
            labels = score_sample(
                completion, answer=example.answer, findings=columns["findings"], distractor=columns["distractor"],
                candidates=columns["candidates"], supported_ids=columns["supported_ids"],
                lexicon=load_lexicon(columns["lexicon_path"]), params=params,
            )
            rows.append({"prompt": prompt, "completion": completion, "labels": labels})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the grove rm config (its task and rollout sections)")
    parser.add_argument("--train-cases", type=int, default=120)
    parser.add_argument("--eval-cases", type=int, default=40)
    parser.add_argument("--per-case", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("runs/rm-clinical-labels"))
    args = parser.parse_args()
    cfg = load_config(args.config)
    settings = {"task": cfg.task.model_dump(mode="json"), "system_prompt": cfg.rollout.system_prompt,
                "train_cases": args.train_cases, "eval_cases": args.eval_cases, "per_case": args.per_case,
                "seed": cfg.seed, "heads": list(HEADS)}
    marker = args.out / "settings.json"
    if marker.is_file() and json.loads(marker.read_text()) == settings:
        print(f"{args.out}: up to date")
        return
    task = build_task(cfg.task)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, split, cases, seed in (("train", task.train, args.train_cases, cfg.seed),
                                      ("eval", task.eval, args.eval_cases, cfg.seed + 1)):
        rows = labelled_rows(cfg, list(split[:cases]), args.per_case, seed)
        path = args.out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        means = {h: sum(r["labels"][h] for r in rows if r["labels"][h] is not None) /
                 max(1, sum(r["labels"][h] is not None for r in rows)) for h in HEADS}
        print(f"{path}: {len(rows)} rows; label means " + ", ".join(f"{h} {v:.2f}" for h, v in means.items()))
    marker.write_text(json.dumps(settings, indent=1))


if __name__ == "__main__":
    main()
