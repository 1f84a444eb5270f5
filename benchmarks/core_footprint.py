"""How light is the core: what ``pip install`` brings and how long grove takes to start, side by side.

Two measurements, each run alone on the machine:

* ``--install SPEC ...``: for each pip spec (``.`` for the core, ``.[all]``, or ``REV:.`` for the tree of git revision
  REV), a fresh virtual environment gets torch first (the one package every variant shares), then the spec with
  ``constraints.txt``; printed: the distributions and megabytes beyond torch's environment and the install's seconds.
  Needs the package registry.
* ``--startup``: median wall seconds of ``import grove``, filling the registries, ``grove --help``, ``grove config
  show examples/arithmetic.yaml`` and a one-step run of ``examples/arithmetic.yaml`` on a tiny random model, in this
  tree and (``--against REV``) in a worktree of git revision REV with the same interpreter; the ratio after / before.

    python benchmarks/core_footprint.py --install . '.[all]' 650b164:.
    python benchmarks/core_footprint.py --startup --against 650b164 --repeats 7
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STARTUP = {
    "import grove": "import grove",
    "fill the registries": (
        "import grove, grove.builtin_components\n"
        "try:\n    from grove.registry import load_declarations\n    load_declarations()\n"
        "except ImportError:\n    pass"  # a tree whose registries had no declarations to load
    ),
    "grove --help": "import sys; sys.argv = ['grove', '--help']\nfrom grove.cli import main\ntry:\n    main()\n"
                    "except SystemExit:\n    pass",
    "grove config show": "import sys; sys.argv = ['grove', 'config', 'show', 'examples/arithmetic.yaml']\n"
                         "from grove.cli import main\ntry:\n    main()\nexcept SystemExit as exc:\n"
                         "    sys.exit(exc.code)",
}
ONE_STEP = ["threads=2", "train.steps=1", "rollout.max_new_tokens=4", "eval.max_examples=2", "train.prompts_per_step=2",
            "train.completions_per_prompt=2", "eval.before_training=false", "logging.plots=false",
            "logging.tensorboard=false", "logging.progress=false"]


@contextlib.contextmanager
def revision_tree(revision: str) -> Iterator[Path]:
    """A detached worktree of ``revision`` (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="grove-rev-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), revision], check=True,
                   capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)], check=False)


def _packages(python: Path) -> int:
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    return len(listed.stdout.splitlines())


def _megabytes(venv: Path) -> float:
    return sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def _quiet(command: list[str]) -> None:
    """Run ``command``; its output is shown only when it fails (pip warns about every index path it skips)."""
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{(run.stdout + run.stderr)[-3000:]}")


def install_footprint(spec: str, torch_spec: str) -> dict[str, float]:
    """Distributions, megabytes and seconds ``pip install spec`` adds to a fresh environment holding torch."""
    with tempfile.TemporaryDirectory(prefix="grove-install-") as scratch:
        venv = Path(scratch) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir"]
        _quiet([*pip, torch_spec])
        base, base_mb = _packages(python), _megabytes(venv)
        start = time.perf_counter()
        _quiet([*pip, spec, "-c", str(ROOT / "constraints.txt")])
        seconds = time.perf_counter() - start
        return {"packages": _packages(python) - base, "mb": _megabytes(venv) - base_mb, "seconds": seconds}


def _timed(python: str, args: list[str], cwd: Path, repeats: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(cwd / "src"))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run = subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if run.returncode != 0:
            raise SystemExit(f"{' '.join(args)[:200]} failed in {cwd}:\n{run.stderr[-1500:]}")
    return statistics.median(times)


def startup_times(tree: Path, model: Path, repeats: int, one_step: bool) -> dict[str, float]:
    """Median seconds of each start-up command in ``tree``."""
    times = {name: _timed(sys.executable, ["-c", code], tree, repeats) for name, code in STARTUP.items()}
    if one_step:
        with tempfile.TemporaryDirectory(prefix="grove-run-") as out:
            sets = [*ONE_STEP, f"model.name={model}", f"output_dir={out}/run"]
            code = ("import shutil, sys; shutil.rmtree(sys.argv[-1].split('=', 1)[1], ignore_errors=True)\n"
                    "from grove.cli import main; main()")
            args = ["-c", code, "train", "examples/arithmetic.yaml", *[x for s in sets for x in ("--set", s)]]
            times["one-step run (tiny model)"] = _timed(sys.executable, args, tree, repeats)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install", nargs="+", metavar="SPEC", help="pip specs ('.', '.[all]', 'REV:.')")
    parser.add_argument("--torch", default="torch==2.13.0", help="the torch every environment starts from")
    parser.add_argument("--startup", action="store_true", help="time grove's start-up")
    parser.add_argument("--against", metavar="REV", help="also time the tree of this git revision")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-run", action="store_true", help="leave out the one-step run")
    args = parser.parse_args()
    if args.install:
        print("| spec | distributions beyond torch | MB beyond torch | install seconds |\n|---|---|---|---|")
        for spec in args.install:
            revision, path = spec.split(":", 1) if ":" in spec else ("", spec)
            folder, bracket, extras = path.partition("[")
            with revision_tree(revision) if revision else contextlib.nullcontext(ROOT) as tree:
                got = install_footprint(f"{(tree / folder).resolve()}{bracket}{extras}", args.torch)
            print(f"| {spec} | {got['packages']:.0f} | {got['mb']:.0f} | {got['seconds']:.0f} |", flush=True)
    if args.startup:
        from grove.models.tiny import create_tiny_model_dir

        with tempfile.TemporaryDirectory(prefix="grove-tiny-") as scratch:
            model = Path(create_tiny_model_dir(Path(scratch) / "tiny"))
            trees = {"this tree": ROOT}
            with revision_tree(args.against) if args.against else contextlib.nullcontext() as old:
                if old is not None:
                    trees = {args.against: old, "this tree": ROOT}
                results = {name: startup_times(tree, model, args.repeats, not args.no_run)
                           for name, tree in trees.items()}
        names = list(results)
        header = " | ".join(f"{n} (s, median of {args.repeats})" for n in names)
        ratio = " | this tree / " + names[0] if len(names) == 2 else ""
        print(f"\n| command | {header}{ratio} |\n|---|{'---|' * (len(names) + (len(names) == 2))}")
        for command in results[names[-1]]:
            cells = " | ".join(f"{results[n][command]:.2f}" for n in names)
            extra = f" | {results[names[1]][command] / results[names[0]][command]:.2f}" if len(names) == 2 else ""
            print(f"| {command} | {cells}{extra} |")
    if not args.install and not args.startup:
        parser.error("give --install SPEC ... and/or --startup")


if __name__ == "__main__":
    main()
