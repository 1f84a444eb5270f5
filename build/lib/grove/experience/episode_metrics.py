"""Per-step metrics of agent experience: episodes, actions, anchor groups, timing."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from grove.batch import RolloutBatch
from grove.envs.base import EnvironmentSuite, EpisodeRecord
from grove.experience.env_failures import ERROR_KINDS
from grove.experience.episode_records import EpisodeRun, Trajectory
from grove.experience.step_results import checked_summary
from grove.user_code import user_code

__all__ = [
    "ANCHOR_SIZE_BINS",
    "anchor_metrics",
    "environment_summary",
    "episode_metrics",
    "mask_coverage",
    "rollout_timing",
]

#: upper edges of the anchor-group size histogram bins (the last bin is open)
ANCHOR_SIZE_BINS = (1, 2, 4, 8)


def episode_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    n = max(len(trajectories), 1)
    turns = [len(t.turns) for t in trajectories]
    actions = [turn for t in trajectories for turn in t.turns]
    return {
        "success_rate": sum(t.won for t in trajectories) / n,
        "episode_return_mean": sum(t.episode_return for t in trajectories) / n,
        "turns_per_episode": sum(turns) / n,
        "turns_per_episode_max": float(max(turns, default=0)),
        "invalid_action_rate": sum(a.invalid for a in actions) / max(len(actions), 1),
        "episodes": float(len(trajectories)),
        "episodes_truncated_fraction": sum(t.truncated for t in trajectories) / n,
        "context_overflow_fraction": sum(t.context_overflow for t in trajectories) / n,
    }


def anchor_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Anchor groups: how many, their mean size, a size histogram, and the fraction of steps that share a state."""
    anchor = batch.steps.anchor
    if anchor.numel() == 0:
        return {}
    _, sizes = torch.unique(anchor, return_counts=True)
    metrics = {
        "anchor_groups": float(len(sizes)),
        "anchor_group_size_mean": float(sizes.float().mean()),
        "anchor_steps_in_shared_groups": float(sizes[sizes > 1].sum()) / anchor.numel(),
    }
    low = 0
    for high in ANCHOR_SIZE_BINS:
        label = f"{low + 1}" if high == low + 1 else f"{low + 1}-{high}"
        metrics[f"anchor_group_size_hist/{label}"] = float(((sizes > low) & (sizes <= high)).sum())
        low = high
    metrics[f"anchor_group_size_hist/{low + 1}+"] = float((sizes > low).sum())
    return metrics


def rollout_timing(runs: Sequence[EpisodeRun]) -> dict[str, float]:
    """Generation and environment time of a step's rounds of episodes, environment steps/s, the environment's
    failures (in all, and per kind: ``environment_errors/raised``, ``exited``, ``timeout``, ``malformed``), the
    trajectories ended because their context would not fit, and the share of the turns' context tokens whose keys
    and values were reused instead of prefilled."""
    env_seconds = sum(r.environment_seconds for r in runs)
    return {
        "prompt_tokens_reused_fraction": sum(r.prompt_tokens_reused for r in runs)
        / max(sum(r.prompt_tokens for r in runs), 1),
        "generation_seconds": sum(r.generation_seconds for r in runs),
        "environment_seconds": env_seconds,
        "environment_steps_per_second": sum(r.environment_steps for r in runs) / max(env_seconds, 1e-9),
        "environment_errors": float(sum(r.errors for r in runs)),
        **{f"environment_errors/{kind}": float(sum(r.error_kinds.get(kind, 0) for r in runs)) for kind in ERROR_KINDS},
        "context_overflow_trajectories": float(sum(r.context_overflows for r in runs)),
    }


def mask_coverage(batch: RolloutBatch) -> dict[str, float]:
    """Fraction of the response tokens the forward sees that are in the loss (the rest are environment tokens)."""
    seen = float(batch.response_mask.sum())
    return {"loss_mask_coverage": float(batch.loss_mask.sum()) / max(seen, 1.0)}


def environment_summary(suite: EnvironmentSuite, trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The environment's own metrics of these episodes (its ``summarize`` hook), ``{}`` when it has none. A hook
    that calls ``sys.exit`` stops the run with a :class:`grove.user_code.UserCodeExit`, one that returns anything
    but a mapping of names to numbers with a
    :class:`grove.experience.step_results.MalformedEnvironmentResult`, each naming the environment."""
    if suite.summarize is None or not trajectories:
        return {}
    records = [
        EpisodeRecord(
            task_id=t.task_id,
            infos=tuple(turn.info for turn in t.turns),
            valid=tuple(not turn.invalid for turn in t.turns),
            won=t.won,
            truncated=t.truncated,
        )
        for t in trajectories
    ]
    with user_code(f"environment {suite.name!r} summarize"):
        summary = suite.summarize(records)
    return checked_summary(summary, f"environment {suite.name!r} summarize")
