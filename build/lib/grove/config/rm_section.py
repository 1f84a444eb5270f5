"""The ``rm`` section: reward-model training (``grove rm``), Bradley–Terry preferences or multi-head regression.

``grove rm CONFIG`` trains a sequence classifier on ``rm.data`` with the run machinery of ``grove train``: ``model``
(``model.name`` / ``model.init_from`` is the backbone, ``model.lora`` its adapters), ``train.precision`` /
``micro_batch_size`` / ``max_grad_norm`` / ``time_budget_seconds``, ``optim``, ``checkpoint``, ``logging`` and
``distributed`` mean what they mean there. ``grove train`` and ``grove sft`` ignore this section
(docs/reward-model-training.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from grove.config.sections import Section

__all__ = ["BRADLEY_TERRY_HEAD", "RmConfig"]

#: the one head of a Bradley–Terry reward model (its ``id2label``)
BRADLEY_TERRY_HEAD = "reward"


class RmConfig(Section):
    data: list[str] = Field(
        min_length=1,
        description="Training files (JSONL, JSON or Parquet). bradley_terry rows: {prompt, chosen, rejected} (prompt a "
        "string or chat messages; optional margin); regression rows: {prompt, completion, labels: {head: value}}.",
    )
    objective: Literal["bradley_terry", "regression"] = Field(
        "bradley_terry",
        description="'bradley_terry': one scalar head, loss -log σ(r_chosen - r_rejected - margin) (InstructGPT); "
        "'regression': one head per label, the mean over heads of each head's MSE (missing labels masked out).",
    )
    heads: list[str] | None = Field(
        None,
        description="regression: the label names, in the order of the exported heads (id2label); null: the sorted "
        "label names of the training rows. A label not listed is an error. bradley_terry: one head, 'reward'.",
    )
    labels_column: str = Field("labels", description="regression: the row key holding the {head: value} labels.")
    margin_column: str | None = Field(
        None,
        description="bradley_terry: a row key holding a margin m the chosen score must exceed the rejected one by "
        "(Llama 2's margin loss, -log σ(r_c - r_r - m)); null: no margin.",
    )
    center_rewards_coefficient: float = Field(
        0.0,
        ge=0.0,
        description="bradley_terry: adds c · mean((r_c + r_r)^2) to the loss (TRL's center_rewards_coefficient, "
        "Eisenstein et al. 2023), keeping scores centred on 0; 0: off.",
    )
    standardize: bool = Field(
        True,
        description="regression: train on each head's targets standardised with the training rows' mean and std "
        "(stored in the exported config.json as label_mean / label_std); MSE and metrics are reported in label units.",
    )
    eval_data: list[str] = Field(
        default_factory=list, description="Held-out files for the held-out metrics (default: eval_fraction of data)."
    )
    eval_fraction: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="Without eval_data: this fraction of the rows (of the prompts, for rows that share one) is held out.",
    )
    max_length: int = Field(
        1024, ge=2, description="Most tokens of one scored sequence (prompt and completion, chat template included)."
    )
    overflow: Literal["error", "truncate", "drop"] = Field(
        "error",
        description="A sequence longer than max_length: 'error' names its row; 'truncate' keeps its last max_length "
        "tokens (the scored end); 'drop' leaves the row out (both counted in a warning).",
    )
    epochs: float = Field(1.0, gt=0.0, description="Passes over the training rows (sets the step count).")
    steps: int | None = Field(None, ge=1, description="Optimizer steps; overrides epochs.")
    batch_size: int = Field(16, ge=1, description="Rows (preference pairs or labelled completions) per optimizer step.")
    eval_every: int = Field(0, ge=0, description="Held-out metrics every N steps (0: before and after only).")
    bootstrap_samples: int = Field(
        2000, ge=100, description="Bootstrap resamples of the regression heads' pairwise-accuracy intervals."
    )

    @field_validator("heads")
    @classmethod
    def _distinct_heads(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("name at least one head, or set rm.heads: null to take the label names of the data")
        duplicates = sorted({h for h in value if value.count(h) > 1})
        if duplicates:
            raise ValueError(f"heads {duplicates} are listed twice: each head is one output of the model")
        if any(not h.strip() for h in value):
            raise ValueError("head names must be non-empty strings")
        return value

    @model_validator(mode="after")
    def _objective_settings(self) -> RmConfig:
        if self.objective == "bradley_terry" and self.heads not in (None, [BRADLEY_TERRY_HEAD]):
            raise ValueError(
                f"heads {self.heads} apply to objective: regression; a bradley_terry model has one head, "
                f"{BRADLEY_TERRY_HEAD!r}: remove rm.heads or set rm.objective: regression"
            )
        return self

    @property
    def is_pairwise(self) -> bool:
        """Whether the rows are preference pairs (Bradley–Terry)."""
        return self.objective == "bradley_terry"

    def total_steps(self, train_rows: int) -> int:
        """Optimizer steps of the run: ``steps``, else ``ceil(epochs × rows / batch_size)``."""
        if self.steps is not None:
            return self.steps
        return max(1, -(-round(self.epochs * train_rows) // self.batch_size))
