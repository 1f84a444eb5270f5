"""The training and held-out examples of a ``grove rm`` run, from its ``rm`` section, and the regression targets'
standardisation.

Held out: ``rm.eval_data``, else ``rm.eval_fraction`` of the prompts (a seeded split of the distinct prompts, so the
completions of one prompt are all on one side and the held-out agreement is measured on unseen prompts). With
``rm.standardize`` each regression head's targets are ``(y - mean) / std`` with the training rows' mean and std
(std 1 where a head's labels do not vary); the model learns those, and :class:`Standardization` maps its scores
back to label units.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, replace
from typing import Any

import torch

from grove.config import GroveConfig
from grove.config.rm_section import BRADLEY_TERRY_HEAD
from grove.rm.examples import RmExample, RowReader
from grove.sft.data_files import SftDataError

__all__ = ["RmSplits", "Standardization", "load_rm_splits", "regression_heads"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Standardization:
    """Per-head ``mean`` and ``std`` of the training targets: the model's score ``s`` is ``mean + std · s`` in label
    units (identity for a Bradley–Terry model)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def to_labels(self, scores: torch.Tensor) -> torch.Tensor:
        return scores * torch.tensor(self.std, dtype=scores.dtype) + torch.tensor(self.mean, dtype=scores.dtype)

    def record(self) -> dict[str, list[float]]:
        return {"label_mean": list(self.mean), "label_std": list(self.std)}


@dataclass(frozen=True)
class RmSplits:
    """The examples (targets already standardised), the heads in output order and the standardisation."""

    train: list[RmExample]
    held_out: list[RmExample]
    heads: tuple[str, ...]
    scale: Standardization


def _split_by_prompt(examples: list[RmExample], fraction: float, seed: int) -> tuple[list[RmExample], list[RmExample]]:
    prompts = sorted({ex.prompt for ex in examples})
    if len(prompts) < 2:
        raise SftDataError(
            f"rm.eval_fraction={fraction:g}: the {len(examples)} row(s) of rm.data share {len(prompts)} prompt, so no "
            "prompt is left to train on once one is held out: add rows with other prompts, give rm.eval_data, or set "
            "rm.eval_fraction to 0"
        )
    count = min(max(1, round(fraction * len(prompts))), len(prompts) - 1)
    held = set(random.Random(seed).sample(prompts, count))
    return [ex for ex in examples if ex.prompt not in held], [ex for ex in examples if ex.prompt in held]


def _standardization(train: list[RmExample], heads: list[str], enabled: bool) -> Standardization:
    targets = torch.tensor([ex.targets for ex in train], dtype=torch.float64)
    present = ~torch.isnan(targets)
    counts = present.sum(0)
    empty = [h for h, c in zip(heads, counts.tolist(), strict=True) if c == 0]
    if empty:
        raise SftDataError(
            f"rm.heads {empty}: no training row gives a label for them, so nothing trains those heads: add labelled "
            "rows or remove the heads from rm.heads"
        )
    if not enabled:
        return Standardization((0.0,) * len(heads), (1.0,) * len(heads))
    values = torch.where(present, targets, 0.0)
    mean = values.sum(0) / counts
    var = (torch.where(present, targets - mean, 0.0) ** 2).sum(0) / (counts - 1).clamp(min=1)
    std = var.sqrt()
    std = torch.where((counts > 1) & (std > 1e-12), std, torch.ones_like(std))
    return Standardization(tuple(mean.tolist()), tuple(std.tolist()))


def _standardized(examples: list[RmExample], scale: Standardization) -> list[RmExample]:
    return [
        replace(ex, targets=tuple((t - m) / s if not math.isnan(t) else t
                                  for t, m, s in zip(ex.targets, scale.mean, scale.std, strict=True)))
        for ex in examples
    ]


def load_rm_splits(cfg: GroveConfig, tokenizer: Any) -> RmSplits:
    """``rm.data`` (and ``rm.eval_data``) read and tokenised, split, and the regression targets standardised."""
    rm = cfg.rm
    assert rm is not None
    reader = RowReader(
        tokenizer, pairwise=rm.is_pairwise, heads=rm.heads, labels_column=rm.labels_column,
        margin_column=rm.margin_column, max_length=rm.max_length, overflow=rm.overflow,
    )
    examples = reader.read(rm.data, "rm.data")
    if rm.eval_data:
        train, held_out = examples, reader.read(rm.eval_data, "rm.eval_data")
    elif rm.eval_fraction > 0:
        train, held_out = _split_by_prompt(examples, rm.eval_fraction, cfg.seed)
    else:
        train, held_out = examples, []
    if rm.is_pairwise:
        heads, scale = [BRADLEY_TERRY_HEAD], Standardization((0.0,), (1.0,))
    else:
        assert reader.heads is not None
        heads = reader.heads
        scale = _standardization(train, heads, rm.standardize)
        train, held_out = _standardized(train, scale), _standardized(held_out, scale)
    log.info("rm: %d training rows, %d held out", len(train), len(held_out))
    return RmSplits(train, held_out, tuple(heads), scale)


def regression_heads(cfg: GroveConfig) -> list[str]:
    """The heads of the ``rm`` section's model: ``rm.heads``, else the sorted label names of ``rm.data``'s rows
    (a Bradley–Terry model: its one head). Read before the model is built, which needs their number."""
    rm = cfg.rm
    assert rm is not None
    if rm.is_pairwise:
        return [BRADLEY_TERRY_HEAD]
    if rm.heads is not None:
        return list(rm.heads)
    reader = RowReader(None, pairwise=False, heads=None, labels_column=rm.labels_column, margin_column=None,
                       max_length=rm.max_length, overflow=rm.overflow)
    return reader.label_names(rm.data, "rm.data")
