"""The ``sft`` section: supervised fine-tuning (``grove sft``) from demonstrations or chat data.

``grove sft CONFIG`` trains on ``sft.data`` with the run machinery of ``grove train``: ``model`` (and ``model.lora``,
``model.init_from``), ``train.precision`` / ``micro_batch_size`` / ``forward`` / ``max_grad_norm``, ``optim``,
``checkpoint``, ``logging`` and ``distributed`` mean what they mean there; a config with an ``env`` (or an explicit
``task``) is also evaluated before and after, as ``grove train`` evaluates it. ``grove train`` ignores this section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grove.config.sections import Section

__all__ = ["SftConfig"]


class SftConfig(Section):
    data: list[str] = Field(
        min_length=1,
        description="Training files: JSONL, JSON or Parquet, of chat `messages`, `prompt`/`completion` pairs (strings "
        "or messages) or `grove demos` demonstration rows (docs/warm-start.md).",
    )
    eval_data: list[str] = Field(
        default_factory=list, description="Held-out files for the held-out loss (default: eval_fraction of data)."
    )
    eval_fraction: float = Field(
        0.05, ge=0.0, lt=1.0, description="Without eval_data: this fraction of the rows is held out for the held-out loss "
        "(0: none)."
    )
    format: Literal["auto", "messages", "prompt_completion", "demonstrations"] = Field(
        "auto", description="Row format of the files; 'auto' reads it from each file's first row."
    )
    max_length: int | None = Field(
        None, ge=2, description="Most tokens of one example (null: the model's context length)."
    )
    overflow: Literal["error", "truncate", "drop"] = Field(
        "error",
        description="A row longer than max_length: 'error' names it; 'truncate' keeps its first max_length tokens; "
        "'drop' leaves it out (both counted in a warning).",
    )
    packing: bool = Field(
        True,
        description="Pack short examples into one row each micro-batch (with train.forward: packed): no attention "
        "across examples, positions restart per example, no padding; the same log-probs as unpacked rows.",
    )
    pack_length: int | None = Field(
        None,
        ge=2,
        description="Most tokens of one packed row (null: the longest example of the batch; a longer row "
        "costs attention over all its tokens, under the block mask, for the padding it saves).",
    )
    epochs: float = Field(1.0, gt=0.0, description="Passes over the training rows (sets the step count).")
    steps: int | None = Field(None, ge=1, description="Optimizer steps; overrides epochs.")
    batch_size: int = Field(16, ge=1, description="Examples per optimizer step (over all ranks).")
    eval_every: int = Field(
        0, ge=0, description="Held-out loss (and evaluation) every N steps (0: before and after only)."
    )
    evaluate: bool | None = Field(
        None,
        description="Evaluate the policy on the env's or task's held-out set, as grove train does (success or accuracy "
        "with a 95% interval). null: when the config has an env or names a task of its own.",
    )

    @model_validator(mode="after")
    def _pack_fits(self) -> SftConfig:
        if self.pack_length is not None and self.max_length is not None and self.pack_length < self.max_length:
            raise ValueError(
                f"pack_length ({self.pack_length}) is smaller than max_length ({self.max_length}): a full-length example "
                "would not fit a packed row; raise pack_length or leave it null"
            )
        return self

    def total_steps(self, train_rows: int) -> int:
        """Optimizer steps of the run: ``steps``, else ``ceil(epochs × rows / batch_size)``."""
        if self.steps is not None:
            return self.steps
        return max(1, -(-round(self.epochs * train_rows) // self.batch_size))
