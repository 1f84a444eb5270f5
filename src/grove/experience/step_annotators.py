"""Step annotators: the named, method-specific columns of the step table (``STEP_ANNOTATORS``).

An annotator is ``fn(turns) -> Tensor [S]``: from the played turns of a step's batch (one per step, in step-table
order: each :class:`grove.experience.episodes.Turn` with its observation, parsed action, reward and the
environment's ``info``) the column's value per step. Every registered annotator runs when the batch is built
(:func:`grove.experience.trajectory_batch.trajectories_to_batch`); an estimator reads the columns it declared
(``step_columns``) with :meth:`grove.batch.StepTable.column`. A new step-level method is an estimator file plus,
when it needs a per-step signal the table lacks, an annotator like these.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import torch
from torch import Tensor

from grove.batch import step_kind_id
from grove.experience.episode_records import Turn
from grove.registry import STEP_ANNOTATORS

__all__ = ["action_id", "step_action", "step_kind", "step_outcome", "step_type"]


def step_type(turn: Turn) -> str | None:
    """The environment's ``info["step_type"]``; ``"invalid"`` for an action that could not be parsed."""
    if "step_type" in turn.info:
        return str(turn.info["step_type"])
    return None if turn.parsed.valid else "invalid"


@STEP_ANNOTATORS.register("kind", summary="The step's type as a stable integer id (info['step_type']; 0 for none).")
def step_kind(turns: Sequence[Turn]) -> Tensor:
    """``long [S]``: :func:`grove.batch.step_kind_id` of each step's type (``"query"``, ``"answer"``, ...), so
    Step-GRPO can compare corresponding steps."""
    return torch.tensor([step_kind_id(step_type(t)) for t in turns], dtype=torch.long)


def action_id(turn: Turn) -> int:
    """A stable non-negative integer for the parsed action (the same text, case and surrounding spaces aside, gives
    the same id in every run); -1 for an action that could not be parsed."""
    if not turn.parsed.valid or turn.parsed.action is None:
        return -1
    return zlib.crc32(turn.parsed.action.strip().lower().encode("utf-8")) & 0x7FFFFFFF


@STEP_ANNOTATORS.register("action", summary="The parsed action as a stable integer id (-1: an unparsed action).")
def step_action(turns: Sequence[Turn]) -> Tensor:
    """``long [S]``: :func:`action_id` of each step, so that the steps of an anchor group can be told apart by what
    they did (GiGPO's diagnostics: :mod:`grove.core.advantages.step_credit_diagnostics`)."""
    return torch.tensor([action_id(t) for t in turns], dtype=torch.long)


@STEP_ANNOTATORS.register("outcome", summary="The outcome the environment reports on the step (info['outcome'], else 0).")
def step_outcome(turns: Sequence[Turn]) -> Tensor:
    """``float32 [S]``: e.g. the final answer's correctness on an answer step, 0 on the others, so an episode's outcome
    is the sum over its steps: what outcome-only estimators score instead of the summed step rewards."""
    return torch.tensor([float(t.info.get("outcome", 0.0)) for t in turns], dtype=torch.float32)
