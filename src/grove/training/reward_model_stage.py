"""``grove rm``: reward-model training as a :class:`grove.training.training_stage.TrainingStage`.

    rm.data → preference pairs or labelled completions, tokenised as the chat a completion ends
      (:mod:`grove.rm.examples`) → rm.batch_size per step, shared over the ranks
      (:class:`grove.experience.reward_examples.RewardExampleSource`) → scores of a sequence classifier
      (:mod:`grove.training.reward_models`) → the Bradley–Terry or regression loss (:mod:`grove.rm.objectives`),
      accumulated over micro-batches (:class:`grove.rm.score_update.ScoreUpdate`, the stage's updater) → clip → AdamW

The loop, checkpoints and exact resume, logs, stop signals and the time budget are the trainer's. Each evaluation
(before, every ``rm.eval_every`` steps, after) reports the held-out loss and agreement (:mod:`grove.rm.agreement`)
in ``eval.jsonl``; the summary holds the last. The run ends by writing ``RUN_DIR/model/``: a plain
``AutoModelForSequenceClassification`` directory (LoRA adapters and the score head merged) with its tokenizer,
``id2label`` naming the heads, ``problem_type: regression`` and ``grove_reward_model`` (objective, text format,
standardisation), which a ``sequence_classifier`` reward reads as one objective per head.
"""

from __future__ import annotations

import functools
from pathlib import Path

from grove.config import GroveConfig
from grove.distributed.world import World
from grove.experience.reward_examples import RewardExampleSource
from grove.models.reward_model_network import export_sequence_classifier
from grove.resolve import RunPlan
from grove.rm.held_out import HeldOutAgreement
from grove.rm.reward_splits import load_rm_splits, regression_heads
from grove.rm.score_update import ScoreLoss, ScoreUpdate
from grove.training.policy_models import PolicyModels
from grove.training.reward_models import build_reward_models
from grove.training.training_stage import (
    StageInputs,
    TrainingStage,
    stored_example_loss,
    stored_example_stage,
)

__all__ = ["RewardModelTraining", "TEXT_FORMAT"]

#: how a reward model's input text is made (``grove_reward_model.text`` in its config.json)
TEXT_FORMAT = "chat_template: the prompt's messages, then the completion as an assistant message; last token scored"


def _info(cfg: GroveConfig) -> dict[str, object]:
    assert cfg.rm is not None
    return {"objective": cfg.rm.objective, "text": TEXT_FORMAT}


class RewardModelTraining:
    """The :class:`grove.training.training_stage.StageKind` of ``grove rm``."""

    def build_models(self, plan: RunPlan, world: World, resume_from: Path | None) -> PolicyModels:
        return build_reward_models(plan.cfg, world, resume_from, regression_heads(plan.cfg), _info(plan.cfg))

    def build(self, inputs: StageInputs) -> TrainingStage:
        cfg, models, world = inputs.cfg, inputs.models, inputs.world
        rm = cfg.rm
        assert rm is not None
        tokenizer = models.tokenizer
        splits = load_rm_splits(cfg, tokenizer)
        pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
        source = RewardExampleSource(splits, rm.batch_size, cfg.seed, pad, pairwise=rm.is_pairwise, world=world)
        score_loss = ScoreLoss(rm.is_pairwise, rm.center_rewards_coefficient, cfg.train.precision)
        held_out = HeldOutAgreement(
            tuple(source.held_out_batches(cfg.train.micro_batch_size)), score_loss, splits.heads, splits.scale,
            rm.bootstrap_samples, cfg.seed,
        )
        info = {**_info(cfg), "heads": list(splits.heads)}
        if not rm.is_pairwise:
            info.update({"standardized": rm.standardize, **splits.scale.record()})
        # the loop's token-level settings; the reward model's loss is its updater's own
        loss = stored_example_loss(inputs.plan, rm.max_length, forward="padded")
        steps = rm.total_steps(len(splits.train))
        return stored_example_stage(
            cfg, "rm", steps, source, loss, rm.eval_every,
            evaluates_policy=False,
            summary={
                "train_rows": len(splits.train),
                "held_out_rows": len(splits.held_out),
                "objective": rm.objective,
                "heads": list(splits.heads),
                "model": str(inputs.run_dir / "model"),
            },
            updater=functools.partial(
                ScoreUpdate, score_loss=score_loss, micro_batch_size=cfg.train.micro_batch_size,
                max_grad_norm=cfg.train.max_grad_norm,
            ),
            held_out_evaluation=held_out,
            export=functools.partial(export_sequence_classifier, heads=splits.heads, info=info, pad_token_id=pad),
            records_token_details=False,
        )
