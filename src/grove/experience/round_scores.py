"""A round's reward scores and what can be wrong with them as a whole: samples no weighted reward applies to
(left out of the step, said once; a round left with none is an error naming the cause) and weighted rewards whose
sum overflows float32 (an error naming each reward's value and weight). Used by
:mod:`grove.experience.completion_collection`."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from grove.rewards.scoring import RewardFunctionError, RewardSpec, sample_detail
from grove.rewards.values import FLOAT32_MAX

__all__ = ["RoundScores", "check_weighted_sums", "nothing_to_train_on", "say_left_out"]

log = logging.getLogger("grove.rewards")  # with the rewards' own failure reports


@dataclass(frozen=True)
class RoundScores:
    """A round's scores: ``rewards [M, K]`` (NaN: does not apply), the columns' names and weights, the prompt
    texts, and ``unscorable [M]``: samples no weighted column applies to (every weighted reward returned ``None``
    for them, or failed on them with ``on_error: skip``), which cannot be scored. ``skipped``: the samples some
    reward with ``on_error: skip`` failed on."""

    rewards: Tensor
    names: list[str]
    weights: list[float]
    prompts: list[str]
    unscorable: Tensor
    skipped: frozenset[int]


def check_weighted_sums(
    rewards: Tensor, names: Sequence[str], weights: Sequence[float], prompts: list[str], texts: list[str], step: int
) -> None:
    """Raise :class:`RewardFunctionError` when some sample's weighted rewards ``Σ_k |w_k r_k|`` exceed float32's
    range: every value fits float32 (the rewards' check), but their weighted sum (in whatever order a combiner
    adds them) could become ±inf, and a NaN/inf score would only surface steps later as skipped updates."""
    w = torch.tensor(weights, dtype=torch.float64)
    magnitude = torch.nansum((rewards.double() * w).abs(), dim=1)
    over = (magnitude > FLOAT32_MAX).nonzero().flatten()
    if not len(over):
        return
    i = int(over[0])
    terms = ", ".join(
        f"{name} {value:g} × weight {weight:g}"
        for name, value, weight in zip(names, rewards[i].tolist(), weights, strict=True)
        if weight != 0 and not math.isnan(value)
    )
    raise RewardFunctionError(
        f"step {step}: the weighted rewards of sample {i} ({terms}) add up to {float(magnitude[i]):g} in "
        f"magnitude, beyond float32's largest value {FLOAT32_MAX:.4g}: the combined reward would be ±inf "
        f"({len(over)} sample(s) of the round); scale these rewards or their weights down; "
        f"{sample_detail(prompts, texts, i)}"
    )


def _weighted_reward_names(rewards: Sequence[RewardSpec]) -> str:
    """The rewards with a weighted column, quoted, for messages: ``'a', 'b'``."""
    return ", ".join(repr(r.name) for r in rewards if any(w != 0 for w in r.column_weights))


def nothing_to_train_on(rewards: Sequence[RewardSpec], scored: RoundScores, step: int) -> str:
    """Why a round none of whose samples can be scored gives nothing to train on (the RewardFunctionError's message)."""
    n = int(scored.unscorable.numel())
    if not any(w != 0 for w in scored.weights):
        return (
            f"step {step}: every reward has weight 0 (logged only), so none of the {n} samples of the round can be "
            f"scored; give at least one reward (or objective) a non-zero weight"
        )
    failed = len(scored.skipped)
    skip = (
        "skipped by a failing reward (on_error: skip; its first failure is logged on 'grove.rewards'; on_error: "
        "zero trains on them with reward 0)"
    )
    none = f"the weighted rewards ({_weighted_reward_names(rewards)}) returned None ('does not apply') for every objective"
    if failed == n:
        cause = f"every sample was {skip} and no other weighted reward applies to it"
    elif failed:
        cause = f"{failed} samples were {skip}, and for the other {n - failed} {none}"
    else:
        cause = (
            f"{none}; a sample needs at least one weighted reward that applies to it (return a number, e.g. 0.0, "
            f"where the reward should count)"
        )
    return f"step {step}: no weighted reward applies to any of the {n} samples of the round ({cause}); nothing to train on"


def say_left_out(rewards: Sequence[RewardSpec], notices: set[str], scored: RoundScores, step: int) -> None:
    """Warn, once per run, that samples no weighted reward applies to are left out (failures under
    ``on_error: skip`` are already reported by the rewards themselves); ``notices``: the run's once-given warnings."""
    unscorable = scored.unscorable.nonzero().flatten().tolist()
    returned_none = [i for i in unscorable if i not in scored.skipped]
    if not returned_none or "left_out" in notices:
        return
    notices.add("left_out")
    log.warning(
        "step %d: %d of %d samples are left out of the step: the weighted rewards (%s) returned None ('does not "
        "apply') for every objective of them, so they cannot be scored; they are not trained on and their groups "
        "are normalised over their other samples. Counted per step in the metric reward_excluded_samples; this "
        "warning is not repeated.",
        step, len(returned_none), scored.unscorable.numel(), _weighted_reward_names(rewards),
    )
