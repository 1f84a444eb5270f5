"""What a config implies rather than states: the reference model, the bf16 generation copy, the zero-advantage
skip, the weights of the models its rewards load."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grove.config.schema import GroveConfig
    from grove.config.sections import RolloutConfig

__all__ = ["generates_from_bf16_copy", "generation_rollout", "needs_reference_model", "reward_model_bytes", "zero_advantage_skip_blocker"]


def needs_reference_model(cfg: GroveConfig) -> bool:
    """Whether a run loads the reference policy: a KL term (``kl.coef > 0``), or a policy loss that reads
    the reference log-probs (registered with ``requires=("ref_logprobs",)``)."""
    from grove.registry import POLICY_LOSSES

    return cfg.algorithm.kl.coef > 0 or "ref_logprobs" in POLICY_LOSSES.entry(cfg.algorithm.policy_loss.id).requires


def reward_model_bytes(cfg: GroveConfig) -> int:
    """Bytes of the weights of the models the rewards load themselves (``sequence_classifier``, ``judge``): the sum
    of ``model_bytes()`` over the rewards whose parameters declare :class:`grove.registry.LoadsModelWeights`."""
    from grove.registry import REWARD_FUNCTIONS, LoadsModelWeights

    return sum(
        r.validated(REWARD_FUNCTIONS).model_bytes()
        for r in cfg.rewards
        if r.id in REWARD_FUNCTIONS and REWARD_FUNCTIONS.entry(r.id).declares(LoadsModelWeights)
    )


def generates_from_bf16_copy(cfg: GroveConfig) -> bool:
    """Whether rollouts decode from a bfloat16 copy of the weights: ``rollout.bf16_weights``, or, when that is
    null (the default), whether ``train.precision`` is bf16 (docs/benchmarks.md: the faster decode
    at the precision the update already computes in)."""
    if cfg.rollout.bf16_weights is not None:
        return cfg.rollout.bf16_weights
    return cfg.train.precision == "bf16"


def generation_rollout(cfg: GroveConfig) -> RolloutConfig:
    """The ``rollout`` section the run's engine is built with: ``bf16_weights`` resolved
    (:func:`generates_from_bf16_copy`), so an engine that keeps its own copy of the weights knows its dtype."""
    return cfg.rollout.model_copy(update={"bf16_weights": generates_from_bf16_copy(cfg)})


def zero_advantage_skip_blocker(cfg: GroveConfig) -> str | None:
    """Why ``train.skip_zero_advantage`` does not apply to this config (``None``: it applies).

    Leaving zero-advantage samples out of the update must change no gradient and no input of a controller: the
    policy loss and the aggregation must declare it (``zero_advantage_rows_skippable``: row-local and vanishing with
    the advantage; a sum of per-row terms over global counts), there must be no KL term in the loss, no entropy bonus
    or entropy target (whose controller reads the update's entropy), and no D^3S token selection across several
    samples (scopes ``micro_batch`` and ``batch`` rank their tokens together; scope ``sequence`` ranks within each
    completion, keeps a count known before the forward, and a zero-advantage sample's kept tokens have a zero
    gradient). ``grove config show`` prints the answer."""
    from grove.registry import LOSS_AGGREGATIONS, POLICY_LOSSES

    a = cfg.algorithm
    if not cfg.train.skip_zero_advantage:
        return "train.skip_zero_advantage is false"
    if not POLICY_LOSSES.entry(a.policy_loss.id).zero_advantage_rows_skippable:
        return f"the policy loss {a.policy_loss.id!r} does not declare zero_advantage_rows_skippable"
    if not LOSS_AGGREGATIONS.entry(a.aggregation).zero_advantage_rows_skippable:
        return f"the aggregation {a.aggregation!r} does not declare zero_advantage_rows_skippable"
    if a.kl.coef > 0 and a.kl.placement == "loss":
        return "the KL term in the loss has a gradient whatever the advantage (algorithm.kl)"
    if a.entropy.coef != 0 or a.entropy.target is not None:
        return "an entropy bonus or target reads every sample's entropy (algorithm.entropy)"
    if cfg.selection.tokens is not None and cfg.selection.tokens.scope != "sequence":
        return (f"D^3S token selection with scope {cfg.selection.tokens.scope!r} ranks the tokens of several samples "
                "together (selection.tokens.scope: sequence ranks within each completion and allows the skip)")
    return None
