"""RL against a learned reward model: what the run did to every objective, and how well the reward model's heads agree
with the rules on the policy's own held-out completions.

    grove train examples/clinical_rm_gdpo.yaml
    python benchmarks/reward_model_rl.py runs/clinical-rm-gdpo --pairs rm_faithfulness:faithfulness \\
        rm_comprehensiveness:comprehensiveness

Reads the first and the last evaluation's ``eval_samples_stepNNNNNN.jsonl`` (every reward column per held-out item)
and prints, per objective, the held-out mean before and after with the change paired by item (normal interval over
items: :func:`held_out.paired_item_difference`), then for each ``HEAD:RULE`` pair Pearson's r between the reward
model's head and the rule on the last evaluation's completions, with its Fisher-z interval
(:func:`grove.rm.agreement.pearson_interval`). A completion a rule does not apply to (NaN) is left out of that rule.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from held_out import ItemMean, evaluation_steps, item_values, paired_item_difference  # noqa: E402

from grove.rm.agreement import pearson_interval  # noqa: E402


def _column(run: Path, step: int, name: str) -> dict[str, list[float]]:
    def value(row: dict) -> float | None:
        v = row.get("rewards", {}).get(name)
        return None if v is None or math.isnan(v) else float(v)

    return item_values(run, value, step)


def report(run: Path, pairs: list[tuple[str, str]]) -> str:
    steps = evaluation_steps(run)
    first, last = steps[0], steps[-1]
    row = json.loads((run / f"eval_samples_step{last:06d}.jsonl").read_text().splitlines()[0])
    lines = [f"{run}: held-out step {first} → {last}", "", "| objective | before | after | after − before (paired by item) |",
             "|---|---|---|---|"]
    for name in row["rewards"]:
        before, after = _column(run, first, name), _column(run, last, name)
        change = paired_item_difference(after, before)
        lines.append(
            f"| {name} | {ItemMean.of(before).show(1, '', 3)} | {ItemMean.of(after).show(1, '', 3)} | "
            f"{change.mean:+.3f} ({change.low:+.3f} to {change.high:+.3f}, {change.items} items) |"
        )
    lines += ["", f"| head : rule, step {last} | completions | Pearson r (95% CI) |", "|---|---|---|"]
    for head, rule in pairs:
        h, r = _column(run, last, head), _column(run, last, rule)
        both = [(h[i][0], r[i][0]) for i in sorted(set(h) & set(r))]
        x = torch.tensor([a for a, _ in both])
        y = torch.tensor([b for _, b in both])
        value, low, high = pearson_interval(x, y)
        lines.append(f"| {head} : {rule} | {len(both)} | {value:.2f} ({low:.2f} to {high:.2f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run directory of the RL run")
    parser.add_argument("--pairs", nargs="*", default=[], help="HEAD:RULE reward columns to correlate")
    args = parser.parse_args(argv)
    pairs = [tuple(p.split(":", 1)) for p in args.pairs]
    print(report(args.run, pairs))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
