"""``grove sft``: supervised fine-tuning as a :class:`grove.training.training_stage.TrainingStage`, the warm start
before RL.

    sft.data → tokenised examples (loss on the policy's tokens only) → sft.batch_size per step, shared over the
      ranks (:class:`grove.experience.demonstrations.DemonstrationSource`) → the negative log-likelihood
      (``nll`` policy loss, ``token_mean`` aggregation: the mean cross-entropy of the step's trained tokens whatever
      the micro-batching or the number of ranks) → clip → AdamW

A demonstration needs no credit (:class:`grove.pipeline.supervised_targets.SupervisedTargets`), no reference model,
no KL and no entropy bonus; one epoch and one mini-batch per step. Each evaluation reports the held-out loss and,
with an ``env`` or a ``task`` of the config's own (``sft.evaluate``), the policy's held-out evaluation as
``grove train`` runs it. The run ends by writing ``RUN_DIR/model/``, a plain transformers model (LoRA adapters
merged) that ``model.init_from``, ``grove eval --model`` and ``AutoModelForCausalLM.from_pretrained`` load.
"""

from __future__ import annotations

from pathlib import Path

from grove.config import GroveConfig
from grove.distributed.world import World
from grove.experience import SourceContext, build_experience_source
from grove.experience.demonstrations import DemonstrationSource
from grove.resolve import RunPlan
from grove.rollout.engine import context_length
from grove.sft.splits import load_splits
from grove.training.policy_models import PolicyModels, build_policy_models
from grove.training.training_stage import (
    StageInputs,
    TrainingStage,
    stored_example_loss,
    stored_example_stage,
)

__all__ = ["SupervisedFineTuning", "evaluates_policy"]

#: the context length assumed when neither the model nor the tokenizer states one
_FALLBACK_MAX_LENGTH = 2048


def evaluates_policy(cfg: GroveConfig) -> bool:
    """Whether ``grove sft`` evaluates the policy as ``grove train`` would (``sft.evaluate``; unset: when the config
    has an ``env`` or names a ``task`` of its own, the default task being no evaluation anyone asked for)."""
    assert cfg.sft is not None
    if cfg.sft.evaluate is not None:
        return cfg.sft.evaluate
    return cfg.env is not None or "task" in cfg.model_fields_set


class SupervisedFineTuning:
    """The :class:`grove.training.training_stage.StageKind` of ``grove sft``."""

    def build_models(self, plan: RunPlan, world: World, resume_from: Path | None) -> PolicyModels:
        """The policy's models; the ``nll`` loss needs no reference model (:attr:`grove.resolve.RunPlan.model_needs`)."""
        return build_policy_models(plan.cfg, world, resume_from, plan.model_needs)

    def build(self, inputs: StageInputs) -> TrainingStage:
        cfg, models, world = inputs.cfg, inputs.models, inputs.world
        sft = cfg.sft
        assert sft is not None
        models.release_generation_weights()  # refreshed only to evaluate
        tokenizer = models.tokenizer
        max_length = sft.max_length or context_length(models.causal_lm, tokenizer) or _FALLBACK_MAX_LENGTH
        splits = load_splits(cfg, tokenizer, max_length)
        evaluating = evaluates_policy(cfg)
        policy_evaluation = None
        if evaluating and world.is_main:
            policy_evaluation = build_experience_source(
                SourceContext.for_evaluation(inputs.plan, inputs.engine, tokenizer)
            )
        packs = sft.packing and cfg.train.forward == "packed"
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        source = DemonstrationSource(
            splits, sft.batch_size, cfg.seed, int(pad), world=world,
            pack_length=(sft.pack_length or 0) if packs else None, policy_evaluation=policy_evaluation,
        )
        loss = stored_example_loss(inputs.plan, max_length, forward=cfg.train.forward)
        steps = sft.total_steps(len(splits.train))
        return stored_example_stage(
            cfg, "sft", steps, source, loss, sft.eval_every,
            evaluates_policy=evaluating,
            held_out=tuple(source.held_out_batches(cfg.train.micro_batch_size)),
            summary={
                "train_rows": len(splits.train),
                "held_out_rows": len(splits.held_out),
                "model": str(inputs.run_dir / "model"),
            },
        )
