"""Tiny training runs for the checkpoint and resume tests: the config, the CLI arguments that give the same run,
copies of a run as if it had been killed after a given step, and what is compared between runs."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

from grove.config import GroveConfig, dump_config
from grove.infra import checkpoint as ckpt
from grove.resolve import load_config

TESTS = Path(__file__).resolve().parent
TIMING = ("seconds", "per_second")


def settings(model: Path, out: Path, steps: int, **extra) -> dict[str, object]:
    """``--set`` keys of a tiny arithmetic run with a user reward from ``tests/user_rewards.py``, a checkpoint
    every step and no evaluation before training."""
    return {
        "model.name": model, "output_dir": out, "threads": 1, "task": "{id: arithmetic, train_size: 16, eval_size: 2}",
        "rewards": "[{id: 'user_rewards:char_count'}]", "rollout.max_new_tokens": 5, "train.steps": steps,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 3, "train.micro_batch_size": 3,
        "optim.lr": 1e-2, "checkpoint.every": 1, "checkpoint.keep_last": 5, "logging.progress": False, "logging.plots": False,
        "logging.tensorboard": False, "eval.before_training": False, "eval.max_examples": 2, **extra,
    }


def run_config(model: Path, out: Path, steps: int, **extra) -> GroveConfig:
    return load_config(None, [f"{k}={v}" for k, v in settings(model, out, steps, **extra).items()])


def finished_run(model: Path, out: Path, steps: int = 3, **extra) -> Path:
    """``out`` after an uninterrupted tiny run of ``steps`` steps (a checkpoint after every step)."""
    import sys

    from grove.training.trainer import Trainer

    sys.path.insert(0, str(TESTS))  # the run's user reward
    Trainer(run_config(model, out, steps, **extra), out).run()
    return out


def full_and_lora_runs(root: Path) -> tuple[Path, Path, Path]:
    """A tiny model under ``root`` and two 2-step runs from it (a checkpoint after each step): full fine-tuning and
    LoRA adapters on ``q_proj`` and ``v_proj``. Returns ``(model, full, lora)``."""
    import sys

    from grove.models.tiny import create_tiny_model_dir
    from grove.training.trainer import Trainer

    sys.path.insert(0, str(TESTS))  # the runs' user reward
    tiny = create_tiny_model_dir(root / "tiny")
    full, lora = root / "full", root / "lora"
    Trainer(run_config(tiny, full, 2), full).run()
    Trainer(run_config(tiny, lora, 2, **{"model.lora": "{r: 2, alpha: 4, target_modules: [q_proj, v_proj]}"}), lora).run()
    return tiny, full, lora


def config_file(path: Path, model: Path, out: Path, steps: int, **extra) -> Path:
    """The same run as a YAML file for ``grove train``."""
    path.write_text(dump_config(run_config(model, out, steps, **extra)))
    return path


def records(path: Path) -> list[dict]:
    """A JSONL log without its timing fields."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows]


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(ckpt.checkpoint_dir(run, step) / "model" / "model.safetensors")


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def copy_run(src: Path, dst: Path, last_step: int) -> Path:
    """``src`` as if it had been killed right after the checkpoint of ``last_step``."""
    shutil.copytree(src, dst)
    for c in ckpt.list_checkpoints(dst):
        if int(c.name.removeprefix("step-")) > last_step:
            shutil.rmtree(c)
    for log in ("metrics.jsonl", "samples.jsonl", "token_details.jsonl", "eval.jsonl"):
        path = dst / log
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= last_step]
            path.write_text("".join(line + "\n" for line in kept))
    (dst / "summary.json").unlink(missing_ok=True)
    return dst


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` and the SHA-256 of its bytes: equal snapshots, nothing changed."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }
