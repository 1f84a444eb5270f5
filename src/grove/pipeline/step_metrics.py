"""Per-step rollout statistics (rewards, accuracy, advantages, lengths), vectorised."""

from __future__ import annotations

import torch

from grove.batch import RolloutBatch
from grove.core.shaping import group_reward_spread
from grove.core.token_ops import row_mean


def zero_std_group_fraction(scores: torch.Tensor, group_index: torch.Tensor) -> float:
    """Fraction of groups whose members all got the same score (they carry no GRPO signal)."""
    spread, _ = group_reward_spread(scores, group_index)
    return float((spread == 0).float().mean())


def weighted_reward(batch: RolloutBatch) -> torch.Tensor | None:
    """``[N]``: the weighted sum of the objectives that apply (``Σ_k w_k r_ik``), or None without weights."""
    if not batch.reward_weights:
        return None
    w = torch.tensor(batch.reward_weights, dtype=batch.rewards.dtype)
    return torch.nansum(batch.rewards * w, dim=1)


def step_metrics(exp, batch: RolloutBatch, *, accuracy_reward: str) -> dict[str, float]:
    """``reward_mean``/``reward_std`` are of the weighted reward sum (whatever the reward combiner turns it into:
    ``score_mean`` is what the estimator received); ``zero_std_group_fraction`` counts groups whose score is
    constant, i.e. groups without signal under the reward combiner."""
    scores = exp.scores
    reward = weighted_reward(batch)
    reward = scores if reward is None else reward
    metrics: dict[str, float] = {"reward_mean": float(reward.mean()), "reward_std": float(reward.std(unbiased=False))}
    if reward is not scores:
        metrics["score_mean"] = float(scores.mean())
        metrics["score_std"] = float(scores.std(unbiased=False))
    for k, name in enumerate(batch.reward_names):
        column = batch.rewards[:, k]
        valid = column[~column.isnan()]
        if valid.numel():
            metrics[f"reward/{name}_mean"] = float(valid.mean())
            metrics[f"reward/{name}_std"] = float(valid.std(unbiased=False))
    if accuracy_reward in batch.reward_names:  # agent experience reports success_rate per episode instead
        acc = batch.rewards[:, batch.reward_names.index(accuracy_reward)]
        metrics["accuracy"] = float((torch.nan_to_num(acc, nan=0.0) >= 1.0).float().mean())
    seq_adv = row_mean(batch.advantages, batch.policy_token_mask)
    metrics["advantage_mean"] = float(seq_adv.mean())
    metrics["advantage_std"] = float(seq_adv.std(unbiased=False))
    metrics["advantage_abs_max"] = float(seq_adv.abs().max())
    metrics["zero_std_group_fraction"] = zero_std_group_fraction(scores, batch.group_index)
    lengths = batch.response_lengths.float()
    metrics["samples"] = float(batch.num_samples)
    metrics["completion_length_mean"] = float(lengths.mean())
    metrics["completion_length_max"] = float(lengths.max())
    metrics["completion_length_min"] = float(lengths.min())
    metrics["truncated_fraction"] = float(batch.truncated.float().mean())
    metrics["generated_tokens"] = float(exp.generated_tokens)
    return metrics
