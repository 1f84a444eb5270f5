"""Data-parallel overhead: the same run as one process, as 2 DDP ranks and as 2 FSDP2 ranks (torchrun, gloo).

    python benchmarks/data_parallel.py examples/arithmetic.yaml --out runs/bench-dp --steps 4 --set threads=1

Every variant trains the same config for ``--steps`` steps (each is a separate ``grove train`` / ``torchrun -m
grove train`` process, run one after the other, alone on the machine); the table gives the median seconds per
step after the first (and its rollout / update split, rank 0's), the ratio to one process, and the peak RSS of
the largest process. ``--threads`` is the torch thread count of *each* process: on a machine with C cores,
one process with C threads against N ranks with C/N each is the fair comparison (the default passes
``threads`` as the config has it to one process and ``--rank-threads`` to each rank). On one CPU machine the
ranks share the same cores, so this measures the overhead of the data-parallel machinery (gather,
collectives, the FSDP2 generation replica), not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

VARIANTS = {
    "one process": [],
    "ddp × 2": ["--set", "distributed.strategy=ddp"],
    "fsdp2 × 2": ["--set", "distributed.strategy=fsdp2"],
}

_MEASURE = (
    "import resource, subprocess, sys, time; t = time.perf_counter(); rc = subprocess.call(sys.argv[1:]); "
    "print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def variant_threads(name: str, args: argparse.Namespace) -> int:
    """Torch threads of each process of one variant."""
    return args.threads if name == "one process" else args.rank_threads


def variant_command(name: str, args: argparse.Namespace, out: Path) -> list[str]:
    """The command line of one variant: ``grove train`` or ``torchrun --nproc-per-node=2 -m grove train``."""
    launcher = [sys.executable, "-m", "grove"] if name == "one process" else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "grove"]
    threads = variant_threads(name, args)
    return [*launcher, "train", args.config, *VARIANTS[name], "--set", f"output_dir={out}",
            "--set", f"train.steps={args.steps}", "--set", "eval.before_training=false",
            "--set", f"eval.max_examples={args.eval_examples}", "--set", "logging.progress=false",
            "--set", f"threads={threads}", *[a for kv in args.overrides for a in ("--set", kv)]]


def run_variant(name: str, args: argparse.Namespace, out: Path) -> dict:
    threads = variant_threads(name, args)
    cmd = variant_command(name, args, out)
    done = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True)
    rc, wall, maxrss_kb = done.stdout.strip().splitlines()[-1].split()
    if rc != "0":
        raise SystemExit(f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    later = metrics[1:] or metrics
    return {
        "variant": name,
        "threads_per_process": threads,
        "step_s": statistics.median(m["step_seconds"] for m in later),
        "rollout_s": statistics.median(m["rollout_seconds"] for m in later),
        "update_s": statistics.median(m["train_seconds"] for m in later),
        "wall_s": float(wall),
        "peak_rss_gb": int(maxrss_kb) / 2**20,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the one-process run")
    parser.add_argument("--rank-threads", type=int, default=1, help="torch threads of each of the 2 ranks")
    parser.add_argument("--eval-examples", type=int, default=8)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    rows = []
    for name in args.variants:
        out = args.out / name.replace(" ", "").replace("×", "x")
        if out.exists():
            raise SystemExit(f"{out} exists; choose a new --out")
        rows.append(run_variant(name, args, out))
        print(json.dumps(rows[-1]), flush=True)
    base = next((r for r in rows if r["variant"] == "one process"), rows[0])
    print("\n| variant | threads/process | s/step (median, steps 2..) | rollout s | update s | × one process | peak RSS (largest process) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['threads_per_process']} | {r['step_s']:.1f} | {r['rollout_s']:.1f} | "
              f"{r['update_s']:.1f} | {r['step_s'] / base['step_s']:.2f} | {r['peak_rss_gb']:.2f} GB |")
    (args.out / "data_parallel.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
