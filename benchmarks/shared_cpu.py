"""Training steps on a CPU that another process is using: how much slower, and what ``threads`` does about it.

Each variant is a fresh ``grove train`` process (a tiny random model on the arithmetic task unless ``--model`` names
one) whose per-step seconds are read from its ``metrics.jsonl``; the median over the steps after the first is
printed. Variants: alone, and beside ``--busy`` processes that each keep one core busy (a Python loop), with
``threads`` fixed at the machine's cores (``--set threads=N``), fixed at 1, and left to grove (``threads: null``:
:mod:`grove.infra.shared_cpu` follows the cores the other processes leave free, step by step). Run it alone on the
machine.

    python benchmarks/shared_cpu.py --steps 8
    python benchmarks/shared_cpu.py --model smollm2-135m --steps 4 --set rollout.max_new_tokens=32

The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _busy() -> None:
    while True:
        pass


def run_steps(model: str, out: Path, steps: int, threads: str, overrides: list[str]) -> dict:
    values = {"model.name": model, "output_dir": out, "threads": threads, "train.steps": steps,
              "logging.plots": False, "logging.tensorboard": False, "eval.before_training": False,
              "eval.max_examples": 2, "checkpoint.every": steps, "logging.progress": False}
    args = [part for k, v in values.items() for part in ("--set", f"{k}={v}")]
    for override in overrides:
        args += ["--set", override]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grove.cli", "train", "examples/arithmetic.yaml", *args], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    seconds = [r["step_seconds"] for r in rows]
    return {"steps": seconds, "median_s": statistics.median(seconds[1:] or seconds),
            "threads_used": [r.get("cpu_threads") for r in rows], "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model.name (default: a tiny random model)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--busy", type=int, default=1, help="processes keeping one core busy each")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from grove.models.tiny import create_tiny_model_dir

            model = str(create_tiny_model_dir(Path(tmp) / "tiny"))
        variants = [("alone", str(cores), 0), ("alone", "null", 0), ("busy", str(cores), args.busy),
                    ("busy", "1", args.busy), ("busy", "null", args.busy)]
        for i, (name, threads, busy) in enumerate(variants):
            hogs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(busy)]
            for hog in hogs:
                hog.start()
            try:
                result = run_steps(model, Path(tmp) / f"run{i}", args.steps, threads, args.overrides)
            finally:
                for hog in hogs:
                    hog.terminate()
                    hog.join()
            label = f"{name}, threads {threads}"
            results[label] = result
            print(f"{label}: median {result['median_s']:.3f} s/step, steps {[round(s, 3) for s in result['steps']]}, "
                  f"threads used {result['threads_used']}", flush=True)
    base = results[f"alone, threads {cores}"]["median_s"]
    print(f"\n{cores} cores, {args.busy} busy process(es), model {args.model or 'tiny'}\n")
    print("| variant | median s/step | vs alone |")
    print("|---|---|---|")
    for label, r in results.items():
        print(f"| {label} | {r['median_s']:.3f} | {r['median_s'] / base:.1f}× |")
    print("RESULT " + json.dumps({"cores": cores, "busy": args.busy, "results": results}), flush=True)


if __name__ == "__main__":
    main()
