"""Shared by the comparison benchmarks: one `grove train` process per (variant, seed), alternated.

Each run writes ``OUT/<variant>-seed<seed>`` (a normal run directory). A finished run (``summary.json``
present) is skipped and an interrupted one resumed, so a comparison can be stopped and restarted.
Once a run ends its ``checkpoints/`` folder is removed (a comparison reads only the logs, and a 135M policy's
checkpoint with its optimizer state takes 1.6 GB, so fifteen runs would fill a small disk); ``--keep-checkpoints``
keeps them. ``--parallel N`` runs N of them at once, each writing its output to ``OUT/<variant>-seed<seed>.log``: on a GPU,
where one small model's decode is bound by kernel launches from Python and leaves the device mostly idle.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines log of a run (none when the file is absent)."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def finished(run_dir: Path) -> bool:
    """Whether ``run_dir``'s training ended (it wrote ``summary.json``)."""
    return (run_dir / "summary.json").exists()


def seed_of(run_dir: Path) -> int:
    """The seed of ``OUT/<variant>-seed<seed>``."""
    return int(run_dir.name.rsplit("-seed", 1)[1])


def runs_by_variant(out: Path, keep: Callable[[Path], bool] = finished) -> dict[str, list[Path]]:
    """The run directories ``OUT/<variant>-seed<seed>`` that ``keep`` accepts, by variant, each in seed order."""
    runs: dict[str, list[Path]] = {}
    run_dirs = [r for r in out.glob("*-seed*") if r.is_dir()]
    for run_dir in sorted(run_dirs, key=lambda r: (r.name.rsplit("-seed", 1)[0], seed_of(r))):
        if keep(run_dir):
            runs.setdefault(run_dir.name.rsplit("-seed", 1)[0], []).append(run_dir)
    return runs


def comparison_parser(doc: str | None) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The parser of a comparison script (its module docstring as the help) and its sub-command table."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser, parser.add_subparsers(dest="command", required=True)


def save_figure(fig, png: Path) -> None:
    """``fig`` laid out and written to ``png`` (its folder created), at the resolution every report uses."""
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)


def add_run_command(sub: argparse._SubParsersAction, variants: Sequence[str], flag: str = "--methods", help: str = "") -> None:
    """The ``run`` sub-command every comparison shares: CONFIG --out DIR --seeds ... <flag> ... --set K=V."""
    r = sub.add_parser("run", help=help or "train every variant on every seed, alternated")
    r.add_argument("config")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument(flag, nargs="+", default=list(variants))
    r.add_argument("--set", dest="overrides", action="append", default=[])
    r.add_argument("--parallel", type=int, default=1, help="runs at once (default 1: one after another)")
    r.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep each finished run's checkpoints/ (by default removed once the run ends: the reports read only logs)",
    )


def add_calibrate_command(sub: argparse._SubParsersAction) -> None:
    """The ``calibrate`` sub-command of the agent comparisons: CONFIG --groups N --set K=V."""
    c = sub.add_parser("calibrate", help="the base model's episodes on training tasks")
    c.add_argument("config")
    c.add_argument("--groups", type=int, default=8)
    c.add_argument("--set", dest="overrides", action="append", default=[])


def train_alternated(
    config: str,
    out: Path,
    seeds: Sequence[int],
    variants: Mapping[str, Sequence[str]],
    overrides: Sequence[str],
    parallel: int = 1,
    keep_checkpoints: bool = False,
) -> None:
    """For each seed, every variant in turn (so a slow period of the machine hits all of them): ``grove train
    CONFIG --set seed=S --set <variant's settings> --set <overrides>``; ``parallel`` runs at once. A run that
    ends has its ``checkpoints/`` removed unless ``keep_checkpoints``."""
    if parallel < 1:
        raise SystemExit(f"--parallel must be at least 1 (got {parallel})")
    out.mkdir(parents=True, exist_ok=True)
    commands = []
    for seed in seeds:
        for name, settings in variants.items():
            run_dir = out / f"{name}-seed{seed}"
            if finished(run_dir):
                print(f"skip {run_dir} (done)", flush=True)
                continue
            args = [sys.executable, "-m", "grove.cli", "train", config, "--set", f"seed={seed}"]
            for value in [*settings, f"output_dir={run_dir}", "logging.progress=false", *overrides]:
                args += ["--set", value]
            if run_dir.exists():
                args += ["--resume", str(run_dir)]
            commands.append((run_dir, args))
    def tidy(run_dir: Path) -> None:
        if not keep_checkpoints and finished(run_dir):
            shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)

    if parallel == 1:
        for run_dir, args in commands:
            print(" ".join(args[1:]), flush=True)
            subprocess.run(args, check=True)
            tidy(run_dir)
        return

    def train(run_dir: Path, args: list[str]) -> int:
        print(" ".join(args[1:]), f"> {run_dir}.log", flush=True)
        with open(f"{run_dir}.log", "a") as log:
            code = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT).returncode
        tidy(run_dir)
        return code

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        codes = list(pool.map(lambda c: train(*c), commands))
    failed = [str(run_dir) for (run_dir, _), code in zip(commands, codes, strict=True) if code != 0]
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed (their output is in <run>.log): {', '.join(failed)}")
