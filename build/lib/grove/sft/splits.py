"""The training and held-out examples of a ``grove sft`` run, from its ``sft`` section."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from grove.config import GroveConfig
from grove.sft.data import SftExample, load_sft_examples, split_held_out

__all__ = ["SftSplits", "load_splits"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SftSplits:
    train: list[SftExample]
    held_out: list[SftExample]


def load_splits(cfg: GroveConfig, tokenizer: Any, max_length: int) -> SftSplits:
    """``sft.data`` tokenised (``sft.format``, ``sft.overflow``, the rollout's system prompt and chat template, so a
    single-turn example is tokenised as a rollout's prompt and answer); held out: ``sft.eval_data``, else
    ``sft.eval_fraction`` of the rows (a seeded split; a single row is all trained on). Both parts are never empty
    of training rows: :func:`load_sft_examples` returns at least one and the split keeps at least one."""
    sft = cfg.sft
    assert sft is not None

    def load(paths: list[str]) -> list[SftExample]:
        return load_sft_examples(
            paths, tokenizer, data_format=sft.format, max_length=max_length, overflow=sft.overflow,
            system_prompt=cfg.rollout.system_prompt, use_chat_template=cfg.rollout.use_chat_template,
        )

    examples = load(sft.data)
    if sft.eval_data:
        train, held_out = examples, load(sft.eval_data)
    elif sft.eval_fraction > 0 and len(examples) > 1:
        train, held_out = split_held_out(examples, sft.eval_fraction, cfg.seed)
    else:
        train, held_out = examples, []
    log.info("sft: %d training rows, %d held out", len(train), len(held_out))
    return SftSplits(train, held_out)
