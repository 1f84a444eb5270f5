"""``grove rm``: reward-model training as a :class:`grove.training.training_stage.TrainingStage`.

    rm.data → preference pairs or labelled completions, tokenised as the chat a completion ends
      (:mod:`grove.rm.examples`) → rm.batch_size per step, shared over the ranks
      (:class:`grove.experience.reward_examples.RewardExampleSource`) → scores of a sequence classifier
      (:mod:`grove.training.reward_models`) → the Bradley–Terry or regression loss (:mod:`grove.rm.objectives`),
      accumulated over micro-batches (:class:`grove.rm.score_update.ScoreUpdate`) → clip → AdamW

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

from grove.config import ConfigError, GroveConfig
from grove.distributed.world import World
from grove.experience.reward_examples import RewardExampleSource
from grove.models.reward_model_network import export_sequence_classifier
from grove.pipeline.update import LossComponents
from grove.registry import LOSS_AGGREGATIONS, POLICY_LOSSES, NoParams
from grove.rm.held_out import HeldOutAgreement
from grove.rm.reward_splits import load_rm_splits, regression_heads
from grove.rm.score_update import ScoreUpdate
from grove.training.policy_models import PolicyModels
from grove.training.reward_models import build_reward_models
from grove.training.training_stage import StageInputs, TrainingStage, stored_example_stage

__all__ = ["RewardModelTraining", "TEXT_FORMAT"]

#: how a reward model's input text is made (``grove_reward_model.text`` in its config.json)
TEXT_FORMAT = "chat_template: the prompt's messages, then the completion as an assistant message; last token scored"


def _info(cfg: GroveConfig) -> dict[str, object]:
    assert cfg.rm is not None
    return {"objective": cfg.rm.objective, "text": TEXT_FORMAT}


class RewardModelTraining:
    """The :class:`grove.training.training_stage.StageKind` of ``grove rm``."""

    def check(self, cfg: GroveConfig, world: World) -> None:
        if cfg.rm is None:
            raise ConfigError(
                "grove rm needs an `rm` section naming its data, e.g. rm: {data: [pairs.jsonl], objective: "
                "bradley_terry} (docs/reward-model-training.md)"
            )
        if cfg.rm.batch_size < world.size:
            raise ConfigError(
                f"rm.batch_size ({cfg.rm.batch_size}) is smaller than the number of processes ({world.size}); each "
                "rank needs at least one example per step: raise it or launch fewer processes"
            )

    def build_models(self, cfg: GroveConfig, world: World, resume_from: Path | None) -> PolicyModels:
        return build_reward_models(cfg, world, resume_from, regression_heads(cfg), _info(cfg))

    def build(self, inputs: StageInputs) -> TrainingStage:
        cfg, models, world = inputs.cfg, inputs.models, inputs.world
        rm = cfg.rm
        assert rm is not None
        tokenizer = models.tokenizer
        splits = load_rm_splits(cfg, tokenizer)
        pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
        source = RewardExampleSource(splits, rm.batch_size, cfg.seed, pad, pairwise=rm.is_pairwise, world=world)
        update = ScoreUpdate(rm.is_pairwise, rm.center_rewards_coefficient, cfg.train.precision)
        held_out = HeldOutAgreement(
            tuple(source.held_out_batches(cfg.train.micro_batch_size)), update, splits.heads, splits.scale,
            rm.bootstrap_samples, cfg.seed,
        )
        info = {**_info(cfg), "heads": list(splits.heads)}
        if not rm.is_pairwise:
            info.update({"standardized": rm.standardize, **splits.scale.record()})
        loss = LossComponents(  # the loop's token-level settings; the reward model's loss is the update's own
            policy_loss=POLICY_LOSSES.get("nll"), policy_params=NoParams(),
            loss_aggregation=LOSS_AGGREGATIONS.get("token_mean"), kl_estimator=None, temperature=1.0,
            max_response_length=rm.max_length, forward="padded", precision=cfg.train.precision, rollout_metrics=False,
        )
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
            update=update,
            held_out_evaluation=held_out,
            export=functools.partial(export_sequence_classifier, heads=splits.heads, info=info, pad_token_id=pad),
            records_token_details=False,
        )
