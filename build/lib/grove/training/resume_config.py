"""``--resume`` with a config that differs from the run's own ``config.yaml``.

A checkpoint resumes exactly only under the config that wrote it: the optimizer's state restores the old
learning rate whatever ``optim.lr`` says, the task order follows ``seed``, a different batch, reward or algorithm
trains something else. So the resumed config is compared with the run's ``config.yaml`` (both loaded and
validated, flattened to dotted keys, lists compared whole) and

* a change of a key in :data:`RESUMABLE_CHANGES` (it does not change what is trained) is accepted and recorded:
  ``config.yaml`` becomes the config now running, each change is appended to ``config_changes.jsonl``
  (``{"step", "key", "old", "new"}``) and listed in a warning;
* any other change is refused with a :class:`ResumeConfigError` naming every such key with its old and new value,
  and the two ways on: put the old values back, or start a new run from the checkpoint's weights.

``output_dir`` is compared as a resolved path (the command line passes the ``--resume`` directory itself). A
``config.yaml`` that no longer validates (a key this version of grove does not know) cannot be compared: a warning
says so, and it is kept as ``config.before-step-N.yaml`` beside the new ``config.yaml``.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grove.atomic_files import write_text_atomic
from grove.config import ConfigError, GroveConfig, dump_config
from grove.infra.write_failures import reporting_write_failures
from grove.resolve import load_config

__all__ = ["RESUMABLE_CHANGES", "ConfigChange", "ResumeConfigError", "check_resumed_config", "record_config_changes"]

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
CHANGES_FILE = "config_changes.jsonl"

#: The keys a resumed run may change (``section.*``: every key of the section), and why that is safe. Every
#: other key changes what is trained (the model, the data and its order, the rewards, the algorithm, the batch,
#: the optimizer, the numerical precision) and is refused.
RESUMABLE_CHANGES: dict[str, str] = {
    "output_dir": "where the run directory is (a moved run)",
    "imports": "modules imported before components are looked up; the components themselves are compared",
    "threads": "a runtime setting",
    "host_allocator": "a runtime setting",
    "mkldnn_lru_cache_entries": "a runtime setting",
    "onednn_primitive_cache_entries": "a runtime setting",
    "train.steps": "the run's length (at least the checkpoint's step); a cosine LR schedule is stretched over the "
    "new total",
    "train.time_budget_seconds": "when the loop stops",
    "train.max_skipped_steps": "when the non-finite guard stops the run",
    "train.micro_batch_size": "gradient accumulation only: the same gradients up to float rounding",
    "train.forward": "the training forward's layout: the same values and gradients",
    "train.packed_attention": "the packed rows' attention kernel: the same values and gradients",
    "train.logit_cache_mb": "memory against recomputation: the same values",
    "train.activation_checkpointing": "memory against recomputation: the same values",
    "train.compile": "compiled decoder layers: the same values up to float rounding",
    "train.skip_zero_advantage": "leaves out samples whose gradient is exactly zero",
    "rollout.prefix_reuse": "the same samples, with less prefill",
    "rollout.prepacked_weights": "the same products in another weight layout",
    "eval.*": "held-out evaluation only (its own generators; never the training streams)",
    "checkpoint.*": "when checkpoints are written and how many are kept",
    "logging.*": "what is logged",
    "distributed.timeout_seconds": "how long a collective may take",
    "distributed.strategy": "checkpoints, full or sharded, resume under any strategy",
    "distributed.device": "checkpoints hold CPU tensors and resume on any device",
}

_ABSENT = object()


class ResumeConfigError(ConfigError):
    """The resumed config changes keys that would not resume exactly."""


@dataclass(frozen=True)
class ConfigChange:
    key: str
    old: Any
    new: Any

    def describe(self) -> str:
        return f"{self.key} {_show(self.old)} → {_show(self.new)}"


def _show(value: Any) -> str:
    return "(unset)" if value is _ABSENT else json.dumps(value, ensure_ascii=False)


def resumable(key: str) -> bool:
    """Whether ``key`` (dotted) is one a resumed run may change (:data:`RESUMABLE_CHANGES`)."""
    return any(key == p or (p.endswith(".*") and key.startswith(p[:-1])) for p in RESUMABLE_CHANGES)


def _differences(old: Any, new: Any, key: str = "") -> list[ConfigChange]:
    """The dotted keys whose values differ; mappings are compared key by key, anything else (lists) whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for name in dict.fromkeys([*old, *new]):
            found += _differences(old.get(name, _ABSENT), new.get(name, _ABSENT), f"{key}.{name}" if key else name)
        return found
    return [] if old == new else [ConfigChange(key, old, new)]


def _same_directory(a: Any, b: Any) -> bool:
    return isinstance(a, str) and isinstance(b, str) and Path(a).resolve() == Path(b).resolve()


def _restore_hint(refused: list[ConfigChange]) -> str:
    sets = [
        shlex.quote(f"{c.key}={json.dumps(c.old, ensure_ascii=False)}") for c in refused if c.old is not _ABSENT
    ]
    unset = [c.key for c in refused if c.old is _ABSENT]
    parts = ([f"--set {' --set '.join(sets)}"] if sets else []) + ([f"remove {', '.join(unset)}"] if unset else [])
    return " and ".join(parts)


def check_resumed_config(cfg: GroveConfig, run_dir: Path, step: int) -> list[ConfigChange] | None:
    """The accepted changes of ``cfg`` against ``run_dir/config.yaml`` for a resume from the checkpoint of
    ``step``; raise :class:`ResumeConfigError` for changes that would not resume exactly. ``None``: there is no
    valid ``config.yaml`` to compare with (a warning says why)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        log.warning("warning: %s has no %s: the resumed config cannot be compared with the run's own", run_dir, CONFIG_FILE)
        return None
    try:
        saved = load_config(path, [])
    except ConfigError as exc:
        log.warning(
            "warning: %s no longer validates, so the resumed config is not compared with it (%s); it is kept as %s",
            path, " ".join(str(exc).split()), _kept_name(step),
        )
        return None
    changes = [
        c for c in _differences(saved.model_dump(mode="json"), cfg.model_dump(mode="json"))
        if not (c.key == "output_dir" and _same_directory(c.old, c.new))
    ]
    refused = [c for c in changes if not resumable(c.key)]
    too_short = cfg.train.steps < step
    if refused or too_short:
        checkpoint = run_dir / "checkpoints" / f"step-{step:06d}" / "model"
        what = []
        if refused:
            what.append(
                f"the config differs from {path} in keys that would not resume exactly: "
                + "; ".join(c.describe() for c in refused)
                + f"; put the old values back ({_restore_hint(refused)})"
            )
        if too_short:
            what.append(
                f"train.steps {cfg.train.steps} is fewer than the checkpoint's step {step}; set at least {step}"
            )
        raise ResumeConfigError(
            f"--resume {run_dir}: " + "; ".join(what)
            + f"; or start a new run from the checkpoint's weights: --set output_dir=NEW --set model.name={checkpoint}"
        )
    return changes


def _kept_name(step: int) -> str:
    return f"config.before-step-{step:06d}.yaml"


def record_config_changes(cfg: GroveConfig, run_dir: Path, step: int, changes: list[ConfigChange] | None) -> None:
    """Make ``config.yaml`` the config now running and log the accepted ``changes`` (``None``: the old
    ``config.yaml`` could not be compared; it is kept under another name). Rank 0 only."""
    path = run_dir / CONFIG_FILE
    hint = f"continue with --resume {run_dir}"
    if changes == []:
        return
    if changes is None and path.is_file():
        with reporting_write_failures(run_dir / _kept_name(step), "the run's previous config", hint):
            path.replace(run_dir / _kept_name(step))
    if changes:
        with reporting_write_failures(run_dir / CHANGES_FILE, "the config change log", hint):
            with (run_dir / CHANGES_FILE).open("a", encoding="utf-8") as f:
                for c in changes:
                    old, new = (None if v is _ABSENT else v for v in (c.old, c.new))
                    f.write(json.dumps({"step": step, "key": c.key, "old": old, "new": new}, ensure_ascii=False) + "\n")
        log.warning(
            "warning: resuming %s at step %d with a changed config: %s (recorded in %s)",
            run_dir, step, "; ".join(c.describe() for c in changes), run_dir / CHANGES_FILE,
        )
    with reporting_write_failures(path, "the run's config", hint):
        write_text_atomic(path, dump_config(cfg))
