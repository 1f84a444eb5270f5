"""Quantities the config implies rather than states: batch sizes per step, optimizer steps, the reference model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grove.config.schema import GroveConfig
    from grove.config.sections import TrainConfig

__all__ = ["batch_quantities", "generates_from_bf16_copy", "needs_reference_model"]


def batch_quantities(t: TrainConfig) -> dict[str, int]:
    """The batch quantities a ``train`` section implies (printed by ``grove config show``)."""
    mini = t.completions_per_step // t.mini_batches
    return {
        "prompts_per_step": t.prompts_per_step,
        "completions_per_step": t.completions_per_step,
        "mini_batch_size (completions per optimizer step)": mini,
        "micro_batch_size (completions per forward/backward)": min(t.micro_batch_size, mini),
        "gradient_accumulation_steps": -(-mini // t.micro_batch_size),
        "optimizer_steps_per_rollout": t.mini_batches * t.ppo_epochs,
        "total_optimizer_steps": t.mini_batches * t.ppo_epochs * t.steps,
        "total_completions": t.completions_per_step * t.steps,
    }


def needs_reference_model(cfg: GroveConfig) -> bool:
    """Whether a run loads the reference policy: a KL term (``kl.coef > 0``), or a policy loss that reads
    the reference log-probs (registered with ``requires=("ref_logprobs",)``)."""
    from grove.registry import POLICY_LOSSES

    return cfg.algorithm.kl.coef > 0 or "ref_logprobs" in POLICY_LOSSES.entry(cfg.algorithm.policy_loss.id).requires


def generates_from_bf16_copy(cfg: GroveConfig) -> bool:
    """Whether rollouts decode from a bfloat16 copy of the weights: ``rollout.bf16_weights``, or, when that is
    null (the default), whether ``train.precision`` is bf16 (docs/benchmarks.md, issue 16: the faster decode
    at the precision the update already computes in)."""
    if cfg.rollout.bf16_weights is not None:
        return cfg.rollout.bf16_weights
    return cfg.train.precision == "bf16"
