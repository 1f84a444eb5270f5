"""Supervised fine-tuning (``grove sft``): the warm start before RL.

    sft.data → tokenised examples (loss on the policy's tokens only) → batches of sft.batch_size
      → micro-batches of the negative log-likelihood → clip → AdamW → metrics
      → held-out loss, evaluation (success or accuracy with a 95 % interval) and checkpoints, as in ``grove train``

It runs on the machinery of :class:`grove.training.trainer.Trainer`: the policy models (precision, LoRA, DDP /
FSDP2 under ``torchrun``: :mod:`grove.training.policy_models`), the update loop (:func:`grove.pipeline.update.policy_update`
with the ``nll`` policy loss and ``token_mean`` aggregation, so the loss is the mean cross-entropy of the trained
tokens over the step's batch whatever the micro-batching or the number of ranks), the run directory, checkpoints and
exact resume (the data order is an epoch-based :class:`grove.experience.task_sampler.TaskSampler`), the logs and the
held-out evaluation of the config's ``env`` or ``task``. At the end it writes ``RUN_DIR/model/``, a plain
transformers model (LoRA adapters merged) that ``model.init_from``, ``grove eval --model`` and
``AutoModelForCausalLM.from_pretrained`` load.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import torch

import grove.builtin_components  # noqa: F401
from grove.config import ConfigError, GroveConfig
from grove.distributed.world import World, derived_seed, init_world
from grove.evaluation.evaluate import EvalResult
from grove.experience import SourceContext, build_experience_source
from grove.experience.task_sampler import TaskSampler
from grove.infra import checkpoint as ckpt
from grove.infra.precision import autocast
from grove.infra.progress import TrainProgress
from grove.infra.run_logs import NullRunLogger, RunLogger
from grove.infra.runtime import configure_runtime
from grove.models.merged_export import export_merged
from grove.pipeline.update import Coefficients, LossComponents, UpdateSchedule, policy_update
from grove.registry import LOSS_AGGREGATIONS, POLICY_LOSSES, NoParams
from grove.resolve import check_config
from grove.rollout.engine import context_length
from grove.rollout_engines import build_rollout_engine
from grove.sft.batches import sft_batch
from grove.sft.data import SftExample
from grove.sft.splits import load_splits
from grove.training.optim import build_optimizer
from grove.training.policy_models import build_policy_models
from grove.training.preflight import preflight
from grove.training.run_checkpoint import (
    RunState,
    prepare_run_dir,
    record_resumed_config,
    restore_run_checkpoint,
    save_run_checkpoint,
)
from grove.training.stop_signals import StopRequests
from grove.training.trainer import TrainSummary, seed_everything

__all__ = ["SftTrainer", "evaluates_policy"]

log = logging.getLogger(__name__)

#: the context length assumed when neither the model nor the tokenizer states one
_FALLBACK_MAX_LENGTH = 2048


def evaluates_policy(cfg: GroveConfig) -> bool:
    """Whether ``grove sft`` evaluates the policy as ``grove train`` would (``sft.evaluate``; unset: when the config
    has an ``env`` or names a ``task`` of its own, the default task being no evaluation anyone asked for)."""
    assert cfg.sft is not None
    if cfg.sft.evaluate is not None:
        return cfg.sft.evaluate
    return cfg.env is not None or "task" in cfg.model_fields_set


def _models_config(cfg: GroveConfig) -> GroveConfig:
    """The config the policy models are built from: no reference model and no KL term (SFT has none)."""
    algorithm = cfg.algorithm.model_copy(
        update={
            "kl": cfg.algorithm.kl.model_copy(update={"coef": 0.0}),
            "policy_loss": cfg.algorithm.policy_loss.model_copy(update={"id": "nll", "params": {}}),
        }
    )
    return cfg.model_copy(update={"algorithm": algorithm})


class SftTrainer:
    def __init__(self, cfg: GroveConfig, run_dir: Path, *, resume: bool = False, world: World | None = None) -> None:
        if cfg.sft is None:
            raise ConfigError(
                "grove sft needs an `sft` section naming its data, e.g. sft: {data: [demos.jsonl]} (docs/warm-start.md)"
            )
        self.cfg, self.run_dir, self.sft = check_config(cfg), run_dir, cfg.sft
        self.world = world or init_world(cfg.distributed.timeout_seconds, cfg.distributed.device)
        if self.sft.batch_size < self.world.size:
            raise ConfigError(
                f"sft.batch_size ({self.sft.batch_size}) is smaller than the number of processes ({self.world.size}); "
                "each rank needs at least one example per step: raise it or launch fewer processes"
            )
        preflight(cfg)
        start = prepare_run_dir(cfg, run_dir, self.world, resume)
        self.resume_from = start.checkpoint
        configure_runtime(**cfg.runtime_settings())
        seed_everything(cfg.seed)
        self.models = build_policy_models(_models_config(cfg), self.world, self.resume_from)
        self.models.release_generation_weights()  # refreshed only to evaluate
        self.model, self.tokenizer = self.models.train_module, self.models.tokenizer
        self.max_length = self.sft.max_length or context_length(self.models.causal_lm, self.tokenizer) or _FALLBACK_MAX_LENGTH
        self.splits = load_splits(cfg, self.tokenizer, self.max_length)
        self.packs = self.sft.packing and cfg.train.forward == "packed"
        self.total_steps = self.sft.total_steps(len(self.splits.train))
        self.sampler = self._sampler()
        self.loss_parts = LossComponents(
            policy_loss=POLICY_LOSSES.get("nll"),
            policy_params=NoParams(),
            loss_aggregation=LOSS_AGGREGATIONS.get("token_mean"),
            kl_estimator=None,
            temperature=1.0,
            max_response_length=self.max_length,
            logit_cache_bytes=int(cfg.train.logit_cache_mb * 2**20),
            forward=cfg.train.forward,
            precision=cfg.train.precision,
        )
        self.schedule = UpdateSchedule(1, 1, cfg.train.micro_batch_size, cfg.train.max_grad_norm)
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.optim, self.total_steps, seed=cfg.seed)
        self.generator = torch.Generator().manual_seed(derived_seed(cfg.seed, self.world.rank))
        self.evaluating = evaluates_policy(cfg)
        self.evaluator = self._evaluator()
        self.state = RunState(
            self.models, self.optimizer, self.scheduler, self.sampler, self.generator, {}, self.world, cfg.seed
        )
        self.step = 0 if self.resume_from is None else restore_run_checkpoint(self.resume_from, self.state)
        record_resumed_config(cfg, run_dir, start, self.world)
        resume_step = None if not resume else (self.step if self.resume_from is not None else -1)
        self.logger = (
            RunLogger(run_dir, tensorboard=cfg.logging.tensorboard, resume_step=resume_step)
            if self.world.is_main
            else NullRunLogger()
        )

    def _sampler(self) -> TaskSampler:
        """The epoch-based order of the training examples (its position is part of the checkpoint)."""
        return TaskSampler(len(self.splits.train), self.cfg.seed)

    def _evaluator(self):
        """The held-out evaluation of the config's ``env`` or ``task`` (rank 0), or ``None``."""
        if not self.evaluating or not self.world.is_main:
            return None
        engine = build_rollout_engine(self.cfg.rollout, self.models.generation_model, self.tokenizer)
        return build_experience_source(SourceContext.for_evaluation(self.cfg, engine, self.tokenizer))

    # ------------------------------------------------------------------ evaluation
    def held_out_loss(self) -> dict[str, float]:
        """Mean cross-entropy of the held-out examples' trained tokens (every rank computes it: FSDP2 needs all)."""
        held = self.splits.held_out
        if not held:
            return {}
        total = tokens = 0.0
        size = self.cfg.train.micro_batch_size
        self.model.eval()
        with autocast(self.cfg.train.precision, self.world.device):
            for start in range(0, len(held), size):
                batch = self._batch(held[start : start + size])
                logprobs = self.models.logprobs(self.model, batch, self.loss_parts.forward, 1.0)
                mask = batch.loss_mask.to(logprobs.dtype)
                total -= float((logprobs * mask).sum())
                tokens += float(mask.sum())
        return {"held_out_loss": total / max(tokens, 1.0), "held_out_tokens": tokens}

    def evaluate(self, final: bool = False) -> EvalResult | None:
        """Held-out loss, and (rank 0, when the config has an env or a task) the policy's held-out evaluation."""
        record: dict = self.held_out_loss()
        result = None
        if self.evaluating:
            self.models.refresh_generation_weights()  # every rank: under FSDP2 the full weights are gathered
            if self.evaluator is not None:
                self.model.eval()
                with autocast(self.cfg.train.precision, self.world.device):
                    result = self.evaluator.evaluate(step=self.step)
                self.logger.log_eval_samples(self.step, result.samples)
                record.update(result.record())
            self.models.release_generation_weights()
        if record and self.world.is_main:
            self.logger.log_eval(self.step, {**record, **({"final": True} if final else {})})
        self.world.barrier("evaluation on rank 0")
        return result

    def _batch(self, examples: list[SftExample]):
        """The examples as a batch; packed (``sft.packing``) into rows of at most ``sft.pack_length`` tokens, by default
        the longest example's length: the packed forward attends densely within a row (a block mask), so a row longer
        than the longest example would cost more attention than the padded layout saves."""
        pack_length = None
        if self.packs:
            pack_length = self.sft.pack_length or max(len(e.input_ids) for e in examples)
        return sft_batch(examples, self.pad_token_id, pack_length=pack_length)

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    # ------------------------------------------------------------------ one step
    def _step_examples(self) -> list[SftExample]:
        """This rank's share of the step's examples (every rank draws the step's indices: the sampler stays in step)."""
        indices = self.sampler.next(self.sft.batch_size)
        start, end = self.world.shard(len(indices))
        return [self.splits.train[i] for i in indices[start:end]]

    def train_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        batch = self._batch(self._step_examples())
        metrics = policy_update(
            self.model, self.optimizer, self.scheduler, batch, self.loss_parts, self.schedule, self.generator,
            Coefficients(), self.models.strategy,
        )
        seconds = time.perf_counter() - t0
        metrics = {k: v for k, v in metrics.items() if not k.startswith(("logprob_mismatch", "zero_advantage"))}
        metrics.update(
            {
                "step_seconds": seconds,
                "trained_tokens_per_second": metrics.get("trained_tokens", 0.0) / max(seconds, 1e-9),
                "epoch": self.sampler.state.epoch + self.sampler.state.position / self.sampler.num_examples,
            }
        )
        return metrics

    # ------------------------------------------------------------------ the loop
    def run(self) -> TrainSummary:
        start = time.perf_counter()
        if self.step == 0 and self.cfg.eval.before_training:
            self.evaluate()
        progress = TrainProgress(
            total=self.total_steps, completed=self.step, enabled=self.cfg.logging.progress, silent=not self.world.is_main,
            label="sft",
        )
        every = self.sft.eval_every
        with progress, StopRequests() as stop:
            while self.step < self.total_steps:
                self.step += 1
                metrics = self.train_step()
                metrics["elapsed_seconds"] = time.perf_counter() - start
                self.logger.log_step(self.step, metrics)
                progress.update(self.step, metrics)
                stopping = self.world.any(stop.requested, "stop request")
                last = self.step == self.total_steps or stopping
                if every and self.step % every == 0 and not last:
                    self.evaluate()
                if self.step % self.cfg.checkpoint.every == 0 or last:
                    save_run_checkpoint(self.run_dir, self.step, self.state, self.cfg.checkpoint.keep_last)
                if stopping:
                    self.logger.close()
                    return TrainSummary(self.run_dir, self.step, time.perf_counter() - start, stop.signal_name or "signal")
        self.evaluate(final=True)
        self.logger.close()
        summary = TrainSummary(self.run_dir, self.step, time.perf_counter() - start)
        if self.world.is_main:
            self._export_model()
            self._write_summary(summary)
        self.world.barrier("final model")
        return summary

    def _export_model(self) -> None:
        """``RUN_DIR/model/``: the last checkpoint as a plain transformers model (adapters merged)."""
        out = self.run_dir / "model"
        if out.exists():  # a resumed run that had finished before writes it again
            shutil.rmtree(out)
        export_merged(ckpt.latest_checkpoint(self.run_dir), out)

    def _write_summary(self, s: TrainSummary) -> None:
        evals = self.logger.evals.read()
        first = next((e for e in evals if e["step"] == 0), None)
        data = {
            "steps": s.steps,
            "seconds_this_process": s.seconds,
            "train_rows": len(self.splits.train),
            "held_out_rows": len(self.splits.held_out),
            "before": first,
            "after": evals[-1] if evals else None,
            "model": str(self.run_dir / "model"),
        }
        self.logger.write_summary(data)
