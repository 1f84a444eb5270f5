"""The ``algorithm`` section: reward combination, advantage estimator, policy loss, loss aggregation, KL, entropy and
the DAPO and rollout-correction stages."""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from grove.config.components import ComponentSpec
from grove.config.sections import Section
from grove.core.aggregation import SequenceCount

__all__ = [
    "DEPRECATED_KEYS",
    "AlgorithmConfig",
    "DynamicSamplingConfig",
    "EntropyConfig",
    "KLConfig",
    "OverlongConfig",
    "RolloutCorrectionConfig",
    "current_keys",
]

log = logging.getLogger("grove.config")

#: deprecated keys of the ``algorithm`` section and the key each stands for: a config that gives one is read as if it
#: gave the other (same value), with a warning naming the key to write
DEPRECATED_KEYS: dict[str, str] = {"reward_aggregation": "reward_combination"}


def current_keys(section: Any) -> Any:
    """``section`` (the ``algorithm`` mapping of a config) with each of :data:`DEPRECATED_KEYS` replaced by the key it
    stands for, one warning line each; a section that gives both keys is a ``ValueError`` naming both. Anything
    else is returned as it is."""
    if not isinstance(section, dict) or not DEPRECATED_KEYS.keys() & section.keys():
        return section
    section = dict(section)
    for old, new in DEPRECATED_KEYS.items():
        if old not in section:
            continue
        if new in section:
            raise ValueError(
                f"algorithm.{old} and algorithm.{new} are the same setting ({old} is its deprecated spelling); "
                f"give only algorithm.{new}"
            )
        log.warning("algorithm.%s is deprecated: write algorithm.%s (same value)", old, new)
        section[new] = section.pop(old)
    return section


class KLConfig(Section):
    estimator: str = Field("k3", description="KL estimator id (k1, k2, k3, low_var_k3, ...).")
    coef: float = Field(0.0, ge=0.0, description="β (initial β when adaptive). 0: no KL and no reference model (unless the policy loss reads ref_logprobs).")
    placement: Literal["loss", "reward"] = Field(
        "loss", description="'loss': β·KL aggregated into the loss; 'reward': β·Σ_t KL_t subtracted from the score."
    )
    adaptive: bool = Field(False, description="Adapt β towards a target KL (Ziegler et al. 2019).")
    target: float = Field(0.1, gt=0.0, description="Target per-token KL of the adaptive controller.")
    horizon: int = Field(10_000, ge=1, description="Horizon (in samples) of the adaptive controller.")


class EntropyConfig(Section):
    coef: float = Field(0.0, description="Entropy bonus coefficient (the aggregated entropy is subtracted from the loss).")
    target: float | None = Field(
        None, gt=0.0, description="Adaptive (Skywork-OR1): bonus only below this entropy, coefficient adjusted each step."
    )
    step: float = Field(0.005, gt=0.0, description="Adaptive coefficient change per step.")
    max_coef: float = Field(0.05, ge=0.0, description="Upper bound of the adaptive coefficient.")


class DynamicSamplingConfig(Section):
    enabled: bool = Field(False, description="DAPO: keep sampling groups until prompts_per_step have non-zero reward variance.")
    max_rounds: int = Field(3, ge=1, description="Generation rounds per step at most (the first included).")


class OverlongConfig(Section):
    filter: bool = Field(False, description="DAPO overlong filtering: truncated completions get no loss.")
    soft_penalty: bool = Field(False, description="DAPO soft overlong punishment, added as the reward 'overlong_penalty'.")
    cache_tokens: int | None = Field(
        None, ge=1, description="Length of the penalty ramp before max_new_tokens (default: 20% of it, as DAPO's 4k of 20k)."
    )
    max_penalty: float = Field(1.0, ge=0.0, description="Penalty at (and beyond) max_new_tokens.")


class RolloutCorrectionConfig(Section):
    mode: Literal["none", "truncate", "mask"] = Field(
        "none",
        description="Importance weights for the rollout-vs-training mismatch: 'truncate' (TIS, min(ρ, cap)), "
        "'mask' (MIS, ρ if ρ <= cap else 0). Needs train.old_logprobs: recompute.",
    )
    level: Literal["token", "sequence"] = Field("token", description="ρ per token, or exp(Σ log ρ) per sequence.")
    cap: float = Field(2.0, gt=0.0, description="TIS cap / MIS upper threshold.")
    lower: float | None = Field(None, gt=0.0, description="MIS only: also drop ρ below this (IcePop band).")


class AlgorithmConfig(Section):
    preset: str | None = Field(
        None, description="A named bundle of settings from a paper (grove.config.presets); keys you set override it."
    )
    reward_combination: ComponentSpec = Field(
        default_factory=lambda: ComponentSpec(id="sum_then_normalize"),
        description="The reward combiner: how several rewards/objectives become one score before the advantage "
        "estimator: sum_then_normalize (weighted sum, default), normalize_then_sum (GDPO), variance_weighted "
        "(MO-GRPO), gated, ensemble_min, mean_minus_std (docs/multi-objective.md).",
    )
    advantage: ComponentSpec = Field(
        default_factory=lambda: ComponentSpec(id="grpo"), description="Advantage estimator and its parameters."
    )
    policy_loss: ComponentSpec = Field(
        default_factory=lambda: ComponentSpec(id="ppo_clip"), description="Policy loss and its parameters."
    )
    aggregation: str = Field("token_mean", description="Loss aggregation mode.")
    sequence_count: SequenceCount = Field(
        "all_rows",
        description="What the seq_mean_* aggregations divide by: 'all_rows' of the mini-batch (TRL; verl 0.9.1's "
        "trainer) or only 'rows_with_loss_tokens' (verl 0.9.1's agg_loss on a batch without global batch info). They "
        "differ only when a row is fully masked (overlong filtering, D^3S batch-scope token selection).",
    )
    trajectory_weighting: Literal["per_sample", "per_trajectory"] = Field(
        "per_sample",
        description="'per_sample': every sample weighs the same in the aggregation, so an agent trajectory cut into T "
        "per-step samples counts T times; 'per_trajectory': each sample's loss is scaled by (samples per step / "
        "trajectories per step) / (its trajectory's samples), so every trajectory weighs the same (Agent Lightning's "
        "per_rollout_mean; under seq_mean_* aggregations exactly a mean over trajectories of the mean over their "
        "steps). Single-turn samples are their own trajectories: no change there.",
    )
    kl: KLConfig = Field(default_factory=KLConfig)
    entropy: EntropyConfig = Field(default_factory=EntropyConfig)
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    overlong: OverlongConfig = Field(default_factory=OverlongConfig)
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)

    @model_validator(mode="before")
    @classmethod
    def _current_keys(cls, data: Any) -> Any:
        return current_keys(data)

    @field_validator("aggregation", mode="before")
    @classmethod
    def _normalise_aggregation(cls, v: Any) -> Any:
        # verl spells these with hyphens ("seq-mean-token-sum"); accept both spellings.
        return v.replace("-", "_") if isinstance(v, str) else v
