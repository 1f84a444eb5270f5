"""The step table of agent experience: one row per environment step (an action the policy took), the unit of
step-level credit assignment; a :class:`grove.batch.RolloutBatch` carries it with ``token_steps``."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["STEP_FIELDS", "StepTable", "select_steps", "stack_step_tables", "step_kind_id"]


def step_kind_id(name: str | None) -> int:
    """Stable positive id of a step type name (CRC-32, 31 bits; the same in every process); 0 for none."""
    if not name:
        return 0
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF or 1


STEP_FIELDS = ("sample", "group", "trajectory", "index", "anchor", "reward", "penalty", "terminal")


@dataclass(frozen=True)
class StepTable:
    """``S`` environment steps, the unit of step-level credit assignment (GiGPO).

    Universal columns, one value per step:

    * ``sample``     ``[S]`` the batch row holding this step's action tokens;
    * ``group``      ``[S]`` the env group (G copies of one task and seed), equal to the row's ``group_index``;
    * ``trajectory`` ``[S]`` the trajectory (episode), equal to the row's ``trajectory_index``;
    * ``index``      ``[S]`` the turn number within its trajectory, 0-based;
    * ``anchor``     ``[S]`` dense id of the anchor group: steps of one env group that acted from the same
      environment state (exact anchor key, no turn number, so revisited states pool);
    * ``reward``     ``[S]`` the environment reward ``r_t`` of the step;
    * ``penalty``    ``[S]`` the penalty charged to the step (``coef`` for an invalid action, else 0);
    * ``terminal``   ``[S]`` bool: the trajectory's last step (done, failed or out of turns).

    ``columns``: named method-specific signals, ``[S]`` each, produced from the steps by the registered step
    annotators (``STEP_ANNOTATORS``, :mod:`grove.experience.step_annotators`: e.g. ``kind``, the step's type, which
    Step-GRPO groups by, and ``outcome``, the outcome the environment reports, which outcome-only estimators score).
    An estimator declares the columns it reads (``step_columns`` when it registers) and reads them with
    :meth:`column`.
    """

    sample: Tensor
    group: Tensor
    trajectory: Tensor
    index: Tensor
    anchor: Tensor
    reward: Tensor
    penalty: Tensor
    terminal: Tensor
    columns: Mapping[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.sample.shape
        if len(s) != 1:
            raise ValueError(f"StepTable.sample must be 1-D, got shape {tuple(s)}")
        for name in STEP_FIELDS:
            if getattr(self, name).shape != s:
                raise ValueError(f"StepTable.{name} shape {tuple(getattr(self, name).shape)} != {tuple(s)}")
        for name, values in self.columns.items():
            if values.shape != s:
                raise ValueError(f"StepTable column {name!r} shape {tuple(values.shape)} != {tuple(s)}")

    @property
    def num_steps(self) -> int:
        return self.sample.shape[0]

    def column(self, name: str) -> Tensor:
        """The named column; a clear error when no step annotator produced it."""
        if name not in self.columns:
            raise ValueError(
                f"the step table has no column {name!r} (it has: {', '.join(sorted(self.columns)) or 'none'}); a "
                "registered step annotator (STEP_ANNOTATORS) produces it from the environment's steps"
            )
        return self.columns[name]

    def with_columns(self, **columns: Tensor) -> StepTable:
        """This table with the named columns added or replaced."""
        return dataclasses.replace(self, columns={**self.columns, **columns})

    def select(self, keep: Tensor) -> StepTable:
        return StepTable(
            **{name: getattr(self, name)[keep] for name in STEP_FIELDS},
            columns={name: values[keep] for name, values in self.columns.items()},
        )

    def to(self, device: torch.device | str) -> StepTable:
        return StepTable(
            **{name: getattr(self, name).to(device) for name in STEP_FIELDS},
            columns={name: values.to(device) for name, values in self.columns.items()},
        )


def select_steps(steps: StepTable, token_steps: Tensor, rows: Tensor, num_samples: int) -> tuple[StepTable, Tensor]:
    """The steps of the selected ``rows`` (in row order), renumbered; ``token_steps`` remapped to them."""
    new_row = torch.full((num_samples,), -1, dtype=torch.long, device=rows.device)
    new_row[rows] = torch.arange(len(rows), device=rows.device)
    mapped = new_row[steps.sample]
    keep = (mapped >= 0).nonzero().flatten()
    keep = keep[torch.argsort(mapped[keep], stable=True)]  # steps follow their rows' new order
    new_id = torch.full((steps.num_steps,), -1, dtype=torch.long, device=rows.device)
    new_id[keep] = torch.arange(len(keep), device=rows.device)
    kept = steps.select(keep)
    kept = dataclasses.replace(kept, sample=new_row[kept.sample])
    remapped = torch.where(token_steps >= 0, new_id[token_steps.clamp_min(0)], token_steps)
    return kept, remapped


def stack_step_tables(tables: Sequence[StepTable]) -> StepTable:
    """The tables one after the other (their ids already made disjoint by the caller); every table must have the
    same named columns."""
    names = set(tables[0].columns)
    if any(set(t.columns) != names for t in tables):
        raise ValueError("the step tables to concatenate have different columns")
    return StepTable(
        **{name: torch.cat([getattr(t, name) for t in tables]) for name in STEP_FIELDS},
        columns={name: torch.cat([t.columns[name] for t in tables]) for name in sorted(names)},
    )
