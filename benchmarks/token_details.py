"""The cost of ``logging.token_details``: step time of the same run with the per-token records off, on every step,
and at the default setting (docs/config.md, ``token_details.jsonl``).

    python benchmarks/token_details.py
    python benchmarks/token_details.py --steps 10 --repeats 3 --set train.precision=bf16

The vs_trl work (``benchmarks/step_memory.py``'s settings: SmolLM2-135M, 8 prompts × 8 completions, ≤ 64 new
tokens, T = 1), ``--steps`` trainer steps per run, one run per variant (``every`` = 0: off; 1: every step; the
default), the variants alternated ``--repeats`` times in this one process. Recording draws no random numbers, so
every run generates and trains on the same samples and only the recording differs; each round starts with the next
variant (whichever run comes first in the process also warms its caches). Each run's step times are
measured around ``Trainer.train_step`` (the records' writing included). Printed per run: its mean step time and
the mean ``token_details_seconds`` of its recorded steps; then, per variant, the medians over the repeats and the
ratio of the mean step time to the run with recording off.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

from step_memory import WORK  # this directory (benchmarks are run as scripts)

from grove.config.sections import TokenDetailsConfig
from grove.resolve import load_config
from grove.training.trainer import Trainer

DEFAULT_EVERY = TokenDetailsConfig().every


def variant_name(every: int) -> str:
    if every == 0:
        return "off"
    return f"every {every}" + (" (default)" if every == DEFAULT_EVERY else "")


def timed_run(every: int, steps: int, overrides: list[str]) -> tuple[list[float], list[float]]:
    """One run of ``steps`` steps with ``logging.token_details.every = every``: each step's seconds and the
    ``token_details_seconds`` of its recorded steps."""
    out = Path(tempfile.mkdtemp(prefix="token_details_"))
    settings = [f"output_dir={out}", *WORK, f"train.steps={steps}", "eval.before_training=false",
                f"logging.token_details.every={every}", *overrides]
    trainer = Trainer(load_config("examples/arithmetic.yaml", settings), out)
    seconds, recording = [], []
    for _ in range(steps):
        trainer.step += 1
        start = time.perf_counter()
        metrics = trainer.train_step()
        seconds.append(time.perf_counter() - start)
        if "token_details_seconds" in metrics:
            recording.append(metrics["token_details_seconds"])
    trainer.logger.close()
    del trainer
    gc.collect()
    return seconds, recording


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", nargs="+", type=int, default=[0, 1, DEFAULT_EVERY],
                        help="the variants' logging.token_details.every (0: off, the baseline; first)")
    parser.add_argument("--steps", type=int, default=DEFAULT_EVERY)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    step_means: dict[int, list[float]] = {every: [] for every in args.every}
    recording_means: dict[int, list[float]] = {every: [] for every in args.every}
    for repeat in range(args.repeats):
        for every in args.every[repeat % len(args.every) :] + args.every[: repeat % len(args.every)]:
            seconds, recording = timed_run(every, args.steps, args.overrides)
            step_means[every].append(statistics.fmean(seconds))
            if recording:
                recording_means[every].append(statistics.fmean(recording))
            note = f", {len(recording)} recorded steps, {statistics.fmean(recording):.3f} s each" if recording else ""
            print(f"round {repeat + 1} {variant_name(every):18s} mean step {step_means[every][-1]:6.2f} s{note}",
                  flush=True)
    base = statistics.median(step_means[args.every[0]])
    print(f"\n| token details | median of mean s/step | range | recording s per recorded step | "
          f"× {variant_name(args.every[0])} |\n|---|---|---|---|---|")
    for every, values in step_means.items():
        median = statistics.median(values)
        recording = f"{statistics.median(recording_means[every]):.3f}" if recording_means[every] else "–"
        print(f"| {variant_name(every)} | {median:.2f} | {min(values):.2f}–{max(values):.2f} | {recording} | "
              f"{median / base:.3f} |")


if __name__ == "__main__":
    main()
