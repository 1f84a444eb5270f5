"""The kill fuzzer: a tiny-model `grove train` is SIGKILLed (or sent SIGTERM) at many moments and resumed with
`--resume`; every resumed run must end with exactly the uninterrupted run's metrics, evaluations and weights, and
`metrics.jsonl` must never hold a duplicate or a missing step.

Kill points (fixed seed, so the fuzzer is repeatable): every named fault point (generation, update, logging,
checkpoint writing: :mod:`grove.infra.fault_points`) at chosen steps, plus SIGKILLs at moments drawn uniformly
over the uninterrupted run's wall time (which also land in start-up, evaluation and between points), plus a
SIGTERM sent as soon as a step's metrics line is written: the run stops after that step or the next (step 2 is an
``eval.every`` step, whose evaluation a stop skips and the resumed run makes up), with a checkpoint. The default
run (CI) takes one point per phase, two timed kills and a SIGTERM after step 1, and a checkpoint kill and a SIGTERM
with ``checkpoint.format: sharded``; ``-m fuzz`` runs the full fuzzer
(12 phase points + 12 timed kills + SIGTERMs after steps 1, 2 and 3). ``docs/reliability.md`` gives the figures.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from safetensors.torch import load_file

from forked_processes import start_grove, start_server
from grove.models.tiny import create_tiny_model_dir

ROOT = Path(__file__).resolve().parents[1]
STEPS = 3
PHASES = ("generation", "update", "logging", "checkpoint")
TIMING = ("seconds", "per_second")


@dataclass(frozen=True)
class KillPoint:
    name: str
    phase_step: str | None = None  # "phase:step" for GROVE_KILL_AT
    after_seconds: float | None = None  # or a SIGKILL this long after launch
    sigterm_after_step: int | None = None  # or a SIGTERM once this step's metrics line is written


def _train(model: Path, out: Path, *, resume: bool = False, point: KillPoint | None = None, fmt: str = "full") -> int:
    sets = {
        "model.name": model, "output_dir": out, "threads": 1, "task": "{id: arithmetic, train_size: 16, eval_size: 3}",
        "rollout.max_new_tokens": 5, "train.steps": STEPS, "train.prompts_per_step": 2,
        "train.completions_per_prompt": 3, "train.micro_batch_size": 3, "optim.lr": 1e-2, "checkpoint.every": 1,
        "checkpoint.keep_last": 2, "logging.progress": False, "logging.plots": False, "eval.max_examples": 3, "eval.every": 2,
        "checkpoint.format": fmt,
    }
    args = ["train", "examples/arithmetic.yaml"]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    if resume:
        args += ["--resume", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    if point is not None and point.phase_step:
        env["GROVE_KILL_AT"] = point.phase_step
    proc = start_grove(args, env, ROOT, out.parent / f"{out.name}.log")
    if point is not None and point.after_seconds is not None:
        try:
            proc.wait(timeout=point.after_seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    if point is not None and point.sigterm_after_step is not None:
        metrics = out / "metrics.jsonl"
        while proc.poll() is None and _lines(metrics) < point.sigterm_after_step:
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=600)


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def _records(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill-fuzzer")
    model = create_tiny_model_dir(root / "tiny")
    out = root / "uninterrupted"
    start_server()  # the timed kills below are drawn over the run's own wall time, not the server's start-up
    start = time.perf_counter()
    assert _train(model, out) == 0, (root / "uninterrupted.log").read_text()[-3000:]
    return model, out, time.perf_counter() - start


def kill_points(
    wall_seconds: float, phase_steps: dict[str, list[int]], timed: int, sigterm_steps: tuple[int, ...] = (), seed: int = 0
) -> list[KillPoint]:
    rng = random.Random(seed)
    points = [KillPoint(f"{p}-step{s}", phase_step=f"{p}:{s}") for p, steps in phase_steps.items() for s in steps]
    earliest = min(0.5, wall_seconds / 2)  # a run shorter than a second is killed inside it, not after its end
    # numbered: two draws close together must not share a name, hence a run directory (the second would find the
    # first one's finished run there)
    points += [
        KillPoint(f"timed{k}-{t:.2f}s", after_seconds=t)
        for k, t in enumerate(sorted(rng.uniform(earliest, wall_seconds) for _ in range(timed)))
    ]
    points += [KillPoint(f"sigterm-after-step{s}", sigterm_after_step=s) for s in sigterm_steps]
    return points


def _survives(model: Path, reference: Path, out: Path, point: KillPoint, fmt: str = "full") -> None:
    code = _train(model, out, point=point, fmt=fmt)
    # SIGTERM: 128 + 15 from the command line when it stopped the loop; -15 in the final evaluation, outside the
    # loop's handlers, where the signal's default action ends the process
    killed = code in (-signal.SIGKILL, -signal.SIGTERM, 128 + signal.SIGTERM)
    if point.phase_step or (point.sigterm_after_step or STEPS) < STEPS:
        assert killed, f"{point.name}: the fault point was not reached (exit {code})"
    if killed:  # resume; a run killed before it wrote its config starts over
        code = _train(model, out, resume=(out / "config.yaml").exists(), fmt=fmt)
    log = (out.parent / f"{out.name}.log").read_text()[-3000:]
    assert code == 0, f"{point.name}: the resumed run failed:\n{log}"
    metrics = _records(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1)), f"{point.name}: steps {[m['step'] for m in metrics]}"
    assert metrics == _records(reference / "metrics.jsonl"), f"{point.name}: metrics differ"
    assert _records(out / "eval.jsonl") == _records(reference / "eval.jsonl"), f"{point.name}: evaluations differ"
    if fmt == "sharded":  # no safetensors: the final evaluation above already read the final weights
        return
    final = f"checkpoints/step-{STEPS:06d}/model/model.safetensors"
    want, got = load_file(reference / final), load_file(out / final)
    assert all((want[k] == got[k]).all() for k in want), f"{point.name}: final weights differ"


def test_kill_fuzzer_short(reference, tmp_path):
    model, ref, wall = reference
    for point in kill_points(wall, {p: [2] for p in PHASES}, timed=2, sigterm_steps=(1,)):
        _survives(model, ref, tmp_path / point.name, point)


def test_kill_fuzzer_sharded_checkpoints(reference, tmp_path):
    """``checkpoint.format: sharded`` (torch.distributed.checkpoint files, one process): killed while writing a
    checkpoint and stopped by SIGTERM, it resumes to the uninterrupted run's metrics and evaluations."""
    model, ref, wall = reference
    for point in kill_points(wall, {"checkpoint": [2]}, timed=0, sigterm_steps=(1,)):
        _survives(model, ref, tmp_path / point.name, point, fmt="sharded")


@pytest.mark.fuzz
def test_kill_fuzzer_full(reference, tmp_path):
    model, ref, wall = reference
    points = kill_points(wall, {p: [1, 2, 3] for p in PHASES}, timed=12, sigterm_steps=(1, 2, 3), seed=1)
    assert len(points) >= 27
    for point in points:
        _survives(model, ref, tmp_path / point.name, point)


def test_kill_points_have_distinct_names_even_when_drawn_close_together():
    """Each kill point gets a run directory of its own name: timed kills drawn within a hundredth of a second of
    each other (a run shorter than a second) must not share one."""
    points = kill_points(0.02, {"update": [1]}, timed=12, sigterm_steps=(1,))
    names = [p.name for p in points]
    assert len(names) == 14 and len(set(names)) == len(names)
