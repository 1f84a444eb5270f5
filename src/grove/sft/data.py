"""Supervised fine-tuning data: files → tokenised examples with their loss masks, and the held-out split.

:func:`load_sft_examples` reads ``.jsonl`` / ``.json`` / ``.parquet`` files (:mod:`grove.sft.data_files`), reads
each row as chat ``messages``, ``prompt``/``completion`` or a demonstration row (the format detected per file from
its first row, or forced), and tokenises it exactly as an RL rollout would train on it (:mod:`grove.sft.row_tokens`):
the loss falls on assistant tokens and the end-of-turn token only. Rows longer than ``max_length`` tokens are an
error, cut to their first ``max_length`` tokens, or left out (``overflow``). :func:`grove.sft.batches.sft_batch`
turns examples into the :class:`grove.batch.RolloutBatch` the policy update trains on.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grove.sft.data_files import DATA_SUFFIXES, SftDataError, read_rows
from grove.sft.row_tokens import DATA_FORMATS, RowError, RowTokenizer, detect_format, present_keys
from grove.vision.image_table import ImageTable

__all__ = ["OVERFLOW_MODES", "SftDataError", "SftExample", "load_sft_examples", "split_held_out"]

log = logging.getLogger(__name__)

#: what a row longer than ``max_length`` tokens does: stop with an error, keep its first tokens, or leave it out
OVERFLOW_MODES = ("error", "truncate", "drop")

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class SftExample:
    """One training sequence: its token ids, 1 on the tokens trained on, and where it came from (``path:line``)."""

    input_ids: list[int]
    loss_mask: list[int]
    origin: str
    images: ImageTable | None = None  # the pixels of its images (one owner), for a vision-language policy

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.loss_mask):
            raise ValueError(f"{self.origin}: {len(self.loss_mask)} loss_mask entries for {len(self.input_ids)} ids")

    @property
    def num_trained(self) -> int:
        return sum(self.loss_mask)


def load_sft_examples(
    paths: PathLike | Sequence[PathLike],
    tokenizer: Any,
    *,
    data_format: str = "auto",
    max_length: int,
    overflow: str = "error",
    system_prompt: str | None = None,
    use_chat_template: bool = True,
) -> list[SftExample]:
    """The examples of every row of the files ``paths``, in file and row order.

    ``data_format``: ``auto`` (per file, from the keys of its first row: ``prompt_ids``/``completion_ids``/
    ``completion_mask`` → demonstrations, ``messages``, ``prompt``/``completion``), or one of
    ``messages | prompt_completion | demonstrations`` for every row. ``system_prompt`` and ``use_chat_template``
    are the rollout's prompt settings (:func:`grove.rollout.engine.encode_prompts`), so an example's prompt tokens
    are those a rollout of the same prompt starts from. ``overflow``: what a row longer than ``max_length`` tokens
    does: ``error``; ``truncate`` (keep its first ``max_length`` tokens; a row with no trained token left is left
    out); ``drop`` (leave it out). Rows cut or left out are counted in one warning.

    Raises :class:`SftDataError` naming the file, the line, the problem and the fix.
    """
    if data_format != "auto" and data_format not in DATA_FORMATS:
        raise SftDataError(f"sft.format {data_format!r} is unknown: choose auto or one of {', '.join(DATA_FORMATS)}")
    if overflow not in OVERFLOW_MODES:
        raise SftDataError(f"sft.overflow {overflow!r} is unknown: choose one of {', '.join(OVERFLOW_MODES)}")
    if max_length < 2:
        raise SftDataError(f"sft.max_length is {max_length}: an example needs at least 2 tokens (a prompt token and "
                           "a trained one); raise it")
    files = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not files:
        raise SftDataError(f"no data files given: name at least one ({', '.join(DATA_SUFFIXES)})")
    try:
        rows_to_tokens = RowTokenizer(tokenizer, system_prompt=system_prompt, use_chat_template=use_chat_template)
    except ValueError as exc:
        raise SftDataError(f"{exc}: use a model whose tokenizer sets eos_token") from None
    examples: list[SftExample] = []
    truncated = dropped = 0
    for path in files:
        rows = read_rows(path)
        row_format = data_format if data_format != "auto" else _file_format(*rows[0])
        for origin, row in rows:
            try:
                ids, mask = rows_to_tokens.tokens(row, row_format, image_dir=Path(path).expanduser().parent)
            except RowError as exc:
                raise SftDataError(f"{origin}: {exc}") from None
            images = rows_to_tokens.images
            if len(ids) > max_length:
                if overflow == "error":
                    raise SftDataError(
                        f"{origin}: the example is {len(ids)} tokens long, more than sft.max_length={max_length}: "
                        f"raise sft.max_length, or set sft.overflow to truncate (keep the first {max_length} tokens) "
                        "or drop (leave such rows out)"
                    )
                if overflow == "drop" or not any(mask[:max_length]) or images is not None:
                    dropped += 1  # a row with images is never cut: its image tokens must all stay
                    continue
                truncated += 1
                ids, mask = ids[:max_length], mask[:max_length]
            examples.append(SftExample(ids, mask, origin, images))
    if truncated or dropped:
        log.warning(
            "sft.max_length=%d: %d of %d rows were longer; %d cut to their first %d tokens, %d left out%s",
            max_length, truncated + dropped, len(examples) + dropped, truncated, max_length, dropped,
            " (no trained token within the limit)" if overflow == "truncate" and dropped else "",
        )
    if not examples:
        raise SftDataError(
            f"every row is longer than sft.max_length={max_length} and was left out (sft.overflow: {overflow}): "
            "raise sft.max_length"
        )
    return examples


def _file_format(origin: str, first_row: dict[str, Any]) -> str:
    detected = detect_format(first_row)
    if detected is None:
        raise SftDataError(
            f"{origin}: cannot tell the row format from the keys {present_keys(first_row)}: rows hold \"messages\" "
            "(chat), \"prompt\" and \"completion\", or \"prompt_ids\", \"completion_ids\" and \"completion_mask\" "
            "(grove demos); rename the keys, or set sft.format"
        )
    return detected


def split_held_out(examples: Sequence[SftExample], fraction: float, seed: int) -> tuple[list[SftExample], list[SftExample]]:
    """``(train, held_out)``: a seeded random ``fraction`` of the examples held out, each part in the original order;
    the same examples, seed and fraction give the same split. A positive ``fraction`` holds out at least one example
    and keeps at least one for training (so it needs two)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the held-out fraction must be in [0, 1), got {fraction}")
    n = len(examples)
    if fraction == 0.0:
        return list(examples), []
    if n < 2:
        raise SftDataError(
            f"sft.eval_fraction={fraction:g} of {n} example(s) leaves none to train on: add rows, give sft.eval_data, "
            "or set sft.eval_fraction to 0"
        )
    count = min(max(1, round(fraction * n)), n - 1)
    held = set(random.Random(seed).sample(range(n), count))
    train = [e for i, e in enumerate(examples) if i not in held]
    return train, [e for i, e in enumerate(examples) if i in held]
