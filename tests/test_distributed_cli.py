"""`torchrun --nproc-per-node 2 -m grove train ...` from the command line (gloo, CPU, tiny model): the run
trains, rank 0 alone writes the run's logs. With the ranks launched as torchrun launches them
(``tests/forked_processes.py``; both strategies train 2 ranks in tests/test_distributed_equivalence.py): errors
name the rank, a stuck collective times out naming the rank and the phase, and a 2-rank run stopped and resumed
reproduces the uninterrupted one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forked_processes import run_grove_ranks, run_ranks
from grove.models.tiny import create_tiny_model_dir

TESTS = Path(__file__).parent
ROOT = TESTS.parent


def _torchrun(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT / "src")])}
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _train_args(model: Path, out: Path, strategy: str, **extra) -> list[str]:
    values = {
        "model.name": model, "output_dir": out, "threads": 1, "task": "{id: arithmetic, train_size: 16, eval_size: 4}",
        "rollout.max_new_tokens": 6, "train.steps": 2, "train.prompts_per_step": 4, "train.completions_per_prompt": 3,
        "train.micro_batch_size": 3, "checkpoint.every": 1, "logging.progress": False,
        "distributed.strategy": strategy, "distributed.timeout_seconds": 120, **extra,
    }
    args = ["-m", "grove", "train", "examples/arithmetic.yaml"]
    for key, value in values.items():
        args += ["--set", f"{key}={value}"]
    return args


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("cli") / "tiny")


def test_torchrun_grove_train(tiny, tmp_path):
    out = tmp_path / "run"
    done = _torchrun(_train_args(tiny, out, "fsdp2"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # rank 0 writes each step once
    details = [json.loads(line) for line in (out / "token_details.jsonl").read_text().splitlines()]
    assert [(r["step"], r["row"]) for r in details] == [(1, row) for row in range(6)]  # rank 0's own 2 groups of 3
    evals = [json.loads(line)["step"] for line in (out / "eval.jsonl").read_text().splitlines()]
    assert evals == [0, 2]
    assert (out / "summary.json").is_file() and (out / "plots").is_dir()
    assert (out / "checkpoints" / "step-000002" / "model" / "model.safetensors").is_file()
    assert done.stdout.count("held-out accuracy") == 1  # one summary, printed by rank 0
    assert done.stderr.count("step 1:") == 1  # one progress line per step


def test_errors_name_the_rank(tiny, tmp_path):
    args = _train_args(tiny, tmp_path / "run", "ddp", **{"train.prompts_per_step": 1})
    with pytest.raises(AssertionError) as failed:
        run_grove_ranks(2, args[2:], logs=tmp_path / "logs", cwd=ROOT)
    text = str(failed.value)
    assert "rank 0/2" in text and "rank 1/2" in text and "train.prompts_per_step" in text


def test_a_stuck_collective_times_out_naming_rank_and_phase(tmp_path):
    with pytest.raises(AssertionError) as failed:
        run_ranks(2, "forked_processes:python_script", [str(TESTS / "distributed_hang.py")], logs=tmp_path / "logs",
                  grace=0.5, timeout=120)
    assert "rank 0 (exit 3)" in str(failed.value)
    assert "COLLECTIVE ERROR: rank 0/2: collective 'update: loss scale' failed or timed out" in str(failed.value)


def test_a_resumed_two_rank_run_reproduces_the_uninterrupted_one(tiny, tmp_path):
    """Real sampling on 2 ranks: each rank's rollout stream (and RNG states) is checkpointed, so stopping after
    step 2 and resuming gives exactly the metrics of the run that went straight to step 3."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    extra = {"train.steps": 3, "rollout.temperature": 1.0}
    runs = (
        _train_args(tiny, straight, "fsdp2", **extra),
        _train_args(tiny, resumed, "fsdp2", **{**extra, "train.steps": 2}),
        [*_train_args(tiny, resumed, "fsdp2", **extra), "--resume", str(resumed)],
    )
    for args in runs:
        run_grove_ranks(2, args[2:], logs=tmp_path / "logs", cwd=ROOT)
    timing = ("seconds", "per_second")
    a = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in b] == [1, 2, 3]
    for x, y in zip(a, b, strict=True):
        assert {k: v for k, v in x.items() if not k.endswith(timing)} == {
            k: v for k, v in y.items() if not k.endswith(timing)
        }
