"""Shared by the comparison benchmarks: one `grove train` process per (variant, seed), alternated.

Each run writes ``OUT/<variant>-seed<seed>`` (a normal run directory). A finished run (``summary.json``
present) is skipped and an interrupted one resumed, so a comparison can be stopped and restarted.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def train_alternated(
    config: str, out: Path, seeds: Sequence[int], variants: Mapping[str, Sequence[str]], overrides: Sequence[str]
) -> None:
    """For each seed, every variant in turn (so a slow period of the machine hits all of them): ``grove train
    CONFIG --set seed=S --set <variant's settings> --set <overrides>``."""
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for name, settings in variants.items():
            run_dir = out / f"{name}-seed{seed}"
            if (run_dir / "summary.json").exists():
                print(f"skip {run_dir} (done)", flush=True)
                continue
            args = [sys.executable, "-m", "grove.cli", "train", config, "--set", f"seed={seed}"]
            for value in [*settings, f"output_dir={run_dir}", "logging.progress=false", *overrides]:
                args += ["--set", value]
            if run_dir.exists():
                args += ["--resume", str(run_dir)]
            print(" ".join(args[1:]), flush=True)
            subprocess.run(args, check=True)
