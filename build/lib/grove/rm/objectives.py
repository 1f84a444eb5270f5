"""The reward-model losses on fixed scores: Bradley–Terry preferences and multi-head regression.

**Bradley–Terry** (Bradley & Terry 1952; the reward model of Ouyang et al. 2022, *InstructGPT*, eq. 1): a pair's
loss is ``-log σ(r_c - r_r - m)`` for the chosen score ``r_c``, the rejected score ``r_r`` and the pair's margin
``m`` (0 unless ``rm.margin_column`` names one: Touvron et al. 2023, *Llama 2*, eq. 2), plus
``c · (r_c + r_r)²`` with ``c = rm.center_rewards_coefficient`` (TRL's ``RewardTrainer``, after Eisenstein et al.
2023), which keeps the scores centred on 0 since the preference term sees only differences. The step's loss is the
mean over its pairs.

**Regression**: each head ``h`` has the mean squared error over the rows that give it a label,
``MSE_h = Σ_i m_ih (s_ih - y_ih)² / Σ_i m_ih`` (``m_ih`` 1 where row ``i`` has a label for ``h``), and the loss is the
mean of ``MSE_h`` over the heads with at least one label in the step: every head weighs the same whatever its label
count, and a missing label is no evidence either way.

Both divide by counts of the whole step (``pairs``, ``label_counts``) when given, so micro-batches and ranks add up to
exactly the full step's loss (the gradient accumulation of :mod:`grove.rm.score_update`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["bradley_terry_loss", "regression_loss"]


def bradley_terry_loss(
    chosen: Tensor, rejected: Tensor, margin: Tensor | None = None, center_rewards_coefficient: float = 0.0,
    pairs: float | None = None,
) -> Tensor:
    """``Σ_pairs [-log σ(r_c - r_r - m) + c (r_c + r_r)²] / pairs`` (``pairs``: this tensor's pair count unless the
    step's is given)."""
    difference = chosen - rejected if margin is None else chosen - rejected - margin
    terms = -F.logsigmoid(difference)
    if center_rewards_coefficient:
        terms = terms + center_rewards_coefficient * (chosen + rejected) ** 2
    return terms.sum() / (pairs if pairs is not None else max(chosen.numel(), 1))


def regression_loss(scores: Tensor, targets: Tensor, label_counts: Tensor | None = None) -> Tensor:
    """The mean over heads of each head's MSE (``targets`` ``NaN`` where a row has no label for a head).
    ``label_counts`` ``[H]``: each head's label count over the whole step (default: in ``targets``)."""
    present = ~torch.isnan(targets)
    counts = present.sum(0).to(scores.dtype) if label_counts is None else label_counts.to(scores.dtype)
    heads = (counts > 0).sum().clamp(min=1)
    weight = torch.where(counts > 0, 1.0 / (counts.clamp(min=1) * heads), torch.zeros_like(counts))
    squared = torch.where(present, scores - torch.nan_to_num(targets), torch.zeros_like(scores)) ** 2
    return (squared * weight).sum()
