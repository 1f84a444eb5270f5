"""Reward-model rows → tokenised examples: preference pairs (Bradley–Terry) or labelled completions (regression).

Files are read as ``grove sft`` reads them (:func:`grove.sft.data_files.read_rows`: JSONL, JSON or Parquet, each row
with its ``path:line``). A row's text is the conversation a policy's completion ends: the prompt (a string, taken as
one user message, or a list of chat messages) followed by the completion as an assistant message, rendered with the
tokenizer's chat template (:func:`grove.rewards.reward_model_loading.reward_model_text`, which the
``sequence_classifier`` reward renders a rollout with) and tokenised whole; without a chat template, a string prompt
and the completion are joined as plain text. The model scores the last token of that text
(``AutoModelForSequenceClassification`` pools the last non-pad token), so a reward that scores a rollout renders it
the same way.

* ``bradley_terry``: ``{prompt, chosen, rejected}`` (completions as strings), optionally ``rm.margin_column``;
  an example is two sequences (chosen first) and its margin;
* ``regression``: ``{prompt, completion, <rm.labels_column>: {head: value}}``; an example is one sequence and one
  target per head (``NaN`` where the row gives no value: masked out of the loss).

A label or margin must be a number finite in float32 (the targets' type): ``1e40`` is refused like ``NaN``.

Every problem is a :class:`grove.sft.data_files.SftDataError` naming the file, the line, the field and the fix.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grove.rewards.reward_model_loading import reward_model_text
from grove.rewards.values import FLOAT32_MAX
from grove.sft.data_files import SftDataError, json_kind, read_rows

__all__ = ["RmExample", "RowReader"]

log = logging.getLogger(__name__)

_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class RmExample:
    """One training unit: its sequences (a pair: chosen then rejected; a labelled completion: one), its targets (a
    pair: ``(margin,)``; a labelled completion: one value per head, ``NaN`` where missing), where it came from
    (``path:line``) and its prompt's text (rows of one prompt stay on one side of the held-out split)."""

    sequences: tuple[tuple[int, ...], ...]
    targets: tuple[float, ...]
    origin: str
    prompt: str


def _prompt_messages(value: Any, origin: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise SftDataError(f"{origin}: prompt must be a string or a non-empty list of chat messages, got "
                           f"{json_kind(value)}")
    out = []
    for k, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role not in _ROLES or not isinstance(content, str):
            raise SftDataError(
                f"{origin}: prompt[{k}] must be an object with a role ({', '.join(_ROLES)}) and a string content, "
                f"got {json_kind(message) if not isinstance(message, dict) else message}"
            )
        out.append({"role": role, "content": content})
    return out



class RowReader:
    """Reads the rows of the ``rm`` section's files into :class:`RmExample` with one tokenizer.

    ``heads``: the regression heads (``None`` for a pair's single score); ``max_length`` and ``overflow``
    (``error`` / ``truncate``: keep the last tokens / ``drop``) bound a sequence's tokens."""

    def __init__(
        self, tokenizer: Any, *, pairwise: bool, heads: Sequence[str] | None, labels_column: str,
        margin_column: str | None, max_length: int, overflow: str,
    ) -> None:
        self.tokenizer = tokenizer
        self.pairwise = pairwise
        self.heads = list(heads) if heads is not None else None
        self.labels_column = labels_column
        self.margin_column = margin_column
        self.max_length = max_length
        self.overflow = overflow
        self.cut = self.dropped = 0

    # ------------------------------------------------------------------ files
    def read(self, paths: Sequence[str], what: str) -> list[RmExample]:
        """The examples of every row of ``paths`` in file and row order (``what``: the config key, for errors)."""
        if not paths:
            raise SftDataError(f"{what}: no data files given: name at least one (.jsonl, .json, .parquet)")
        rows = [row for path in paths for row in read_rows(path)]
        if not self.pairwise and self.heads is None:
            self.heads = self._label_names(rows)
        examples = [ex for origin, row in rows if (ex := self._example(origin, row)) is not None]
        if self.cut or self.dropped:
            log.warning(
                "rm.max_length=%d: %d sequences were longer; %d cut to their last %d tokens, %d rows left out",
                self.max_length, self.cut + self.dropped, self.cut, self.max_length, self.dropped,
            )
            self.cut = self.dropped = 0
        if not examples:
            raise SftDataError(f"{what}: every row was left out (longer than rm.max_length={self.max_length}): raise "
                               "rm.max_length")
        return examples

    def label_names(self, paths: Sequence[str], what: str) -> list[str]:
        """The sorted label names of the rows of ``paths`` (no tokenizer needed)."""
        if not paths:
            raise SftDataError(f"{what}: no data files given: name at least one (.jsonl, .json, .parquet)")
        return self._label_names([row for path in paths for row in read_rows(path)])

    def _label_names(self, rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
        """The sorted label names of the rows (``rm.heads: null``)."""
        names: set[str] = set()
        for origin, row in rows:
            names.update(self._labels(origin, row))
        if not names:
            raise SftDataError(f"{rows[0][0]}: no row gives a label: add {self.labels_column!r} objects, e.g. "
                               '{"accuracy": 0.5}')
        return sorted(names)

    # ------------------------------------------------------------------ rows
    def _example(self, origin: str, row: dict[str, Any]) -> RmExample | None:
        prompt = self._field(origin, row, "prompt", "a string or a list of chat messages")
        prompt_key = prompt if isinstance(prompt, str) else repr(_prompt_messages(prompt, origin))
        if self.pairwise:
            texts = [self._completion(origin, row, key) for key in ("chosen", "rejected")]
            targets: tuple[float, ...] = (self._margin(origin, row),)
        else:
            texts = [self._completion(origin, row, "completion")]
            targets = self._targets(origin, row)
        sequences = []
        for text in texts:
            ids = self._tokens(origin, prompt, text)
            if ids is None:
                return None
            sequences.append(tuple(ids))
        return RmExample(tuple(sequences), targets, origin, prompt_key)

    def _field(self, origin: str, row: dict[str, Any], key: str, expected: str) -> Any:
        value = row.get(key)
        if value is None:
            present = [k for k, v in row.items() if v is not None]
            raise SftDataError(f"{origin}: the row has no {key!r} (keys: {present}): give it {key!r}, {expected}")
        return value

    def _completion(self, origin: str, row: dict[str, Any], key: str) -> str:
        value = self._field(origin, row, key, "the completion's text")
        if not isinstance(value, str):
            raise SftDataError(f"{origin}: {key} must be a string (the completion's text), got {json_kind(value)}")
        if not value.strip():
            raise SftDataError(f"{origin}: {key} is empty: give it the completion's text, or leave the row out")
        return value

    def _margin(self, origin: str, row: dict[str, Any]) -> float:
        if self.margin_column is None:
            return 0.0
        value = self._field(origin, row, self.margin_column, "a number (rm.margin_column)")
        return self._number(origin, value, self.margin_column)

    def _number(self, origin: str, value: Any, where: str) -> float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or isinstance(value, float) and not math.isfinite(value):
            raise SftDataError(f"{origin}: {where} must be a finite number, got {json_kind(value)} {value!r}: fix "
                               "the value (null marks a missing label)")
        if abs(value) > FLOAT32_MAX:
            shown = f"{value:g}" if isinstance(value, float) or value.bit_length() <= 1024 else "beyond 1e308"
            raise SftDataError(
                f"{origin}: {where} is {shown}, beyond float32 (largest magnitude {FLOAT32_MAX:.4g}), the type the "
                "model trains in, where it would be infinite: scale the values down"
            )
        return float(value)

    def _labels(self, origin: str, row: dict[str, Any]) -> dict[str, Any]:
        labels = self._field(origin, row, self.labels_column, "an object {head: value}")
        if not isinstance(labels, dict):
            raise SftDataError(f"{origin}: {self.labels_column} must be an object {{head: value}}, got "
                               f"{json_kind(labels)}")
        return {name: value for name, value in labels.items() if value is not None}

    def _targets(self, origin: str, row: dict[str, Any]) -> tuple[float, ...]:
        assert self.heads is not None
        labels = self._labels(origin, row)
        unknown = sorted(set(labels) - set(self.heads))
        if unknown:
            raise SftDataError(
                f"{origin}: {self.labels_column} names {unknown}, which rm.heads {self.heads} does not list: add "
                "them to rm.heads, or remove them from the row"
            )
        if not labels:
            raise SftDataError(f"{origin}: {self.labels_column} gives no value for any head of {self.heads}: give "
                               "at least one, or leave the row out")
        return tuple(
            self._number(origin, labels[h], f"{self.labels_column}.{h}") if h in labels else math.nan
            for h in self.heads
        )

    def _tokens(self, origin: str, prompt: Any, completion: str) -> list[int] | None:
        messages = prompt if isinstance(prompt, str) else _prompt_messages(prompt, origin)
        try:
            text = reward_model_text(self.tokenizer, messages, completion)
        except ValueError as exc:
            raise SftDataError(f"{origin}: {exc}") from None
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(ids) <= self.max_length:
            return ids
        if self.overflow == "error":
            raise SftDataError(
                f"{origin}: the sequence is {len(ids)} tokens long, more than rm.max_length={self.max_length}: raise "
                "rm.max_length, or set rm.overflow to truncate (keep the last tokens) or drop (leave such rows out)"
            )
        if self.overflow == "drop":
            self.dropped += 1
            return None
        self.cut += 1
        return ids[-self.max_length:]
