"""``grove train``: reinforcement learning as a :class:`grove.training.training_stage.TrainingStage`.

The experience source the config selects (``experience_source``: completions of a task, or environment episodes),
the credit assignment of :mod:`grove.pipeline.credit` with the configured estimator and reward combiner, the
batch stages, loss and token filter the front door resolved (:attr:`grove.resolve.RunPlan.components`), and the KL
and entropy controllers.
"""

from __future__ import annotations

from pathlib import Path

from grove.distributed.world import World
from grove.experience import SourceContext, build_experience_source
from grove.pipeline.coefficients import EntropyController, KLController
from grove.pipeline.credit import CreditAssignment
from grove.pipeline.step_coefficients import ControlledCoefficients
from grove.pipeline.update_seam import UpdateSchedule
from grove.resolve import RunPlan
from grove.training.policy_models import PolicyModels, build_policy_models
from grove.training.training_stage import StageInputs, TrainingStage

__all__ = ["ReinforcementLearning"]


class ReinforcementLearning:
    """The :class:`grove.training.training_stage.StageKind` of ``grove train``."""

    def build_models(self, plan: RunPlan, world: World, resume_from: Path | None) -> PolicyModels:
        return build_policy_models(plan.cfg, world, resume_from, plan.model_needs)

    def build(self, inputs: StageInputs) -> TrainingStage:
        cfg, models, t, a = inputs.cfg, inputs.models, inputs.cfg.train, inputs.cfg.algorithm
        components = inputs.plan.components
        loss = components.loss
        coefficients = ControlledCoefficients(
            kl=KLController(a.kl.coef, a.kl.adaptive, a.kl.target, a.kl.horizon),
            entropy=EntropyController(a.entropy.coef, a.entropy.target, a.entropy.step, a.entropy.max_coef),
            kl_in_loss=a.kl.placement == "loss",
            kl_in_reward_estimator=components.kl_in_reward_estimator,
        )
        source = build_experience_source(
            SourceContext(plan=inputs.plan, engine=inputs.engine, tokenizer=models.tokenizer,
                          generator=inputs.generator, world=inputs.world)
        )
        credit = CreditAssignment(
            advantage_fn=components.advantage_fn,
            advantage_params=components.advantage_params,
            combiner=components.combiner,
            combiner_params=components.combiner_params,
            reference=models.reference_logprobs(loss.forward, loss.temperature),
            kl_in_reward=coefficients.kl_in_reward,
            world=inputs.world,
            pad_token_id=inputs.engine.pad_token_id,
            samples_per_step=cfg.logging.samples_per_step,
            accuracy_reward=inputs.plan.accuracy_reward,
        )
        return TrainingStage(
            label="train",
            steps=t.steps,
            optimizer_steps=t.steps * t.ppo_epochs * t.mini_batches,
            source=source,
            credit=credit,
            stages=components.stages,
            loss=loss,
            schedule=UpdateSchedule(
                t.ppo_epochs, t.mini_batches, t.micro_batch_size, t.max_grad_norm, t.old_logprobs == "recompute"
            ),
            coefficients=coefficients,
            eval_every=cfg.eval.every,
            token_filter=components.token_filter,
        )
