"""The training loop.

    sample prompts → G completions each → rewards → advantages
      → μ epochs × mini-batches × micro-batches of the policy loss → clip → AdamW → metrics
      → periodic evaluation and checkpoint

Every algorithm choice is a registry lookup resolved once in :func:`resolve_loss_components`; the
loop itself has no per-algorithm branches. Under ``torchrun`` every rank runs this same loop on its share of
the step's groups (:mod:`grove.distributed`); the step's batch is gathered before advantages, the update
reduces gradients across ranks, and rank 0 alone writes logs, evaluations and checkpoints.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import grove.builtin_components  # noqa: F401
from grove.batch import RolloutBatch
from grove.config import ConfigError, GroveConfig, dump_config
from grove.distributed.checkpoint_state import gather_full_optimizer_state, load_full_optimizer_state
from grove.distributed.world import World, derived_seed
from grove.evaluation.evaluate import EvalResult
from grove.experience import SourceContext, build_experience_source
from grove.infra import checkpoint as ckpt
from grove.infra.precision import autocast
from grove.infra.progress import TrainProgress
from grove.infra.run_logs import NullRunLogger, RunLogger
from grove.infra.runtime import configure_runtime, release_host_memory
from grove.pipeline.coefficients import EntropyController, KLController
from grove.pipeline.collect import KLInReward
from grove.pipeline.downsampling import SampleSelection, TokenSelection, select_rollouts
from grove.pipeline.rollout_correction import apply_rollout_correction
from grove.pipeline.step_metrics import step_metrics
from grove.pipeline.trajectory_weighting import apply_trajectory_weighting
from grove.pipeline.update import Coefficients, LossComponents, UpdateSchedule, policy_update
from grove.registry import ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES
from grove.rollout.hf_engine import TransformersEngine
from grove.training.optim import build_optimizer
from grove.training.policy_models import build_policy_models


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_loss_components(cfg: GroveConfig) -> LossComponents:
    a = cfg.algorithm
    return LossComponents(
        policy_loss=POLICY_LOSSES.get(a.policy_loss.id),
        policy_params=a.policy_loss.validated(POLICY_LOSSES),
        aggregate=LOSS_AGGREGATIONS.get(a.aggregation),
        kl_estimator=KL_ESTIMATORS.get(a.kl.estimator) if a.kl.coef > 0 and a.kl.placement == "loss" else None,
        temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0,
        max_response_length=cfg.rollout.max_new_tokens,
        logit_cache_bytes=int(cfg.train.logit_cache_mb * 2**20),
        forward=cfg.train.forward,
        precision=cfg.train.precision,
        token_selection=TokenSelection(cfg.selection.tokens.scope) if cfg.selection.tokens is not None else None,
        sequence_count=a.sequence_count,
    )


@dataclass
class TrainSummary:
    run_dir: Path
    steps: int
    seconds: float


class Trainer:
    def __init__(self, cfg: GroveConfig, run_dir: Path, *, resume: bool = False, world: World | None = None) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.world = world or World()
        if cfg.train.prompts_per_step < self.world.size:
            raise ConfigError(
                f"train.prompts_per_step ({cfg.train.prompts_per_step}) is smaller than the number of processes "
                f"({self.world.size}); each rank needs at least one prompt group: raise it or launch fewer processes"
            )
        self.resume_from = self._prepare_run_dir(resume)
        configure_runtime(cfg.threads, cfg.host_allocator)
        seed_everything(cfg.seed)

        self.loss_parts = resolve_loss_components(cfg)
        self.models = build_policy_models(cfg, self.world, self.resume_from)
        self.model, self.tokenizer = self.models.train_module, self.models.tokenizer
        self.engine = TransformersEngine(self.models.generation_model, self.tokenizer)
        a = cfg.algorithm
        self.generator = torch.Generator().manual_seed(derived_seed(cfg.seed, self.world.rank))
        self.advantage_fn = ADVANTAGE_ESTIMATORS.get(a.advantage.id)
        self.advantage_params = a.advantage.validated(ADVANTAGE_ESTIMATORS)
        self.source = build_experience_source(
            SourceContext(
                cfg=cfg,
                engine=self.engine,
                tokenizer=self.tokenizer,
                generator=self.generator,
                advantage_fn=self.advantage_fn,
                advantage_params=self.advantage_params,
                reference=self.models.reference_logprobs(self.loss_parts.forward, self.loss_parts.temperature),
                kl_in_reward=self._kl_in_reward,
                world=self.world,
            )
        )
        self.kl_controller = KLController(a.kl.coef, a.kl.adaptive, a.kl.target, a.kl.horizon)
        self.entropy_controller = EntropyController(
            a.entropy.coef, a.entropy.target, a.entropy.step, a.entropy.max_coef
        )
        t = cfg.train
        self.schedule = UpdateSchedule(
            t.ppo_epochs, t.mini_batches, t.micro_batch_size, t.max_grad_norm, t.old_logprobs == "recompute"
        )
        total_optimizer_steps = t.steps * t.ppo_epochs * t.mini_batches
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.optim, total_optimizer_steps)
        self.step = 0
        if self.resume_from is not None:
            self._restore(self.resume_from)
        # resuming keeps the log records up to the checkpoint's step; a run killed before its first
        # checkpoint starts over, so none of its records are kept (step -1)
        resume_step = None if not resume else (self.step if self.resume_from is not None else -1)
        self.logger = (
            RunLogger(run_dir, tensorboard=cfg.logging.tensorboard, resume_step=resume_step)
            if self.world.is_main
            else NullRunLogger()
        )

    # ------------------------------------------------------------------ run directory
    def _prepare_run_dir(self, resume: bool) -> Path | None:
        config_path = self.run_dir / "config.yaml"
        if resume:
            latest = ckpt.latest_checkpoint(self.run_dir)
            if latest is None:
                if not config_path.exists():
                    raise ConfigError(f"--resume {self.run_dir}: no such run (no config.yaml there)")
                # killed before the first checkpoint: start over in the same directory
            return latest
        if ckpt.list_checkpoints(self.run_dir) or (self.run_dir / "metrics.jsonl").exists():
            raise ConfigError(
                f"output_dir {str(self.run_dir)!r} already holds a run; continue it with "
                f"--resume {self.run_dir}, or choose a new one with --set output_dir=..."
            )
        if self.world.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config_path.write_text(dump_config(self.cfg))
        self.world.barrier("run directory")
        return None

    def _restore(self, path: Path) -> None:
        """Optimizer, schedules, sampler, controllers and RNG streams (the weights were loaded with the model)."""
        state = ckpt.load_trainer_state(path)
        load_full_optimizer_state(self.model, self.optimizer, state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        self.source.load_state_dict(state.sampler)
        ranks = state.rank_states or [{"generator": state.generator, "rng": state.rng}]
        if self.world.rank < len(ranks):
            self.generator.set_state(ranks[self.world.rank]["generator"])
            ckpt.restore_rng(ranks[self.world.rank]["rng"])
        else:  # more ranks than the run that wrote the checkpoint: a fresh stream of this rank's own
            self.generator.manual_seed(derived_seed(self.cfg.seed * 1_000_003 + state.step, self.world.rank))
        self.kl_controller.load_state_dict(state.controllers["kl"])
        self.entropy_controller.load_state_dict(state.controllers["entropy"])
        self.step = state.step

    def _save(self) -> None:
        with self.world.phase("checkpoint: gather"):
            model_state = self.models.gather_state()
            optimizer_state = gather_full_optimizer_state(self.model, self.optimizer)
        rank_states = self.world.gather_objects(
            {"generator": self.generator.get_state(), "rng": ckpt.capture_rng()}, "checkpoint: RNG states"
        )
        if self.world.is_main:
            state = ckpt.TrainerState(
                step=self.step,
                optimizer=optimizer_state,
                scheduler=self.scheduler.state_dict(),
                sampler=self.source.state_dict(),
                generator=rank_states[0]["generator"],
                rng=rank_states[0]["rng"],
                controllers={"kl": self.kl_controller.state_dict(), "entropy": self.entropy_controller.state_dict()},
                rank_states=rank_states,
            )
            write_model = self.models.write_model(model_state)
            ckpt.save_checkpoint(self.run_dir, write_model, self.tokenizer, state, self.cfg.checkpoint.keep_last)
        self.world.barrier("checkpoint: rank 0 writing")

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> EvalResult | None:
        """Held-out evaluation on rank 0 (the others wait); ``None`` on the other ranks."""
        self.model.eval()
        result = None
        if self.world.is_main:
            result = self.source.evaluate()
            self.logger.log_eval(self.step, result.record())
            with (self.run_dir / f"eval_samples_step{self.step:06d}.jsonl").open("w") as f:
                for s in result.samples:
                    f.write(json.dumps(s) + "\n")
        self.world.barrier("evaluation on rank 0")
        return result

    # ------------------------------------------------------------------ one step
    def _logprobs(self, model, batch) -> torch.Tensor:
        """No-grad log-probs of ``batch``'s responses (recomputed old policy), ``train.forward`` layout."""
        return self.models.logprobs(model, batch, self.loss_parts.forward, self.loss_parts.temperature)

    def _kl_in_reward(self) -> KLInReward | None:
        kl = self.cfg.algorithm.kl
        if kl.placement != "reward":
            return None
        return KLInReward(KL_ESTIMATORS.get(kl.estimator), self.kl_controller.coef)

    def _keep_ratio(self, selection) -> float:
        """This step's D^3S keep ratio (1.0 when that selection is off); schedules count steps from 0."""
        return 1.0 if selection is None else selection.ratio.at(self.step - 1, self.cfg.train.steps)

    def _select_rollouts(self, exp) -> tuple[RolloutBatch, torch.Tensor, dict[str, float]]:
        """D^3S sample-level down-sampling (``selection.samples``) over the whole step's batch: the rollouts the
        update trains on, and their rows in ``exp.batch``."""
        samples = self.cfg.selection.samples
        if samples is None:
            return exp.batch, torch.arange(exp.batch.num_samples), {}
        selection = SampleSelection(samples.scope, samples.advantages == "recompute", samples.min_per_group)
        selected = select_rollouts(
            exp.batch,
            exp.scores,
            selection,
            self._keep_ratio(samples),
            self.advantage_fn,
            self.advantage_params,
        )
        return selected.batch, selected.rows, selected.metrics

    def _own_rows(self, batch: RolloutBatch, rows: torch.Tensor, local_rows: torch.Tensor | None) -> RolloutBatch:
        """The part of the step's (selected) batch this rank generated and trains on."""
        if local_rows is None or not self.world.distributed:
            return batch
        own = torch.isin(rows, local_rows).nonzero().flatten()
        if own.numel() == 0:
            raise RuntimeError(
                f"{self.world.label}: sample selection kept none of this rank's rollouts; raise "
                "selection.samples.ratio or min_per_group, or use selection.samples.scope: group"
            )
        return batch.select(own)

    def train_step(self) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.model.eval()
        kl = cfg.algorithm.kl
        with autocast(cfg.train.precision, self.world.device):
            exp = self.source.collect(self.step)
        release_host_memory()  # generation's freed KV cache goes back to the OS before the update
        batch, kept_rows, selection_stats = self._select_rollouts(exp)
        batch, weighting_stats = apply_trajectory_weighting(batch, cfg.algorithm.trajectory_weighting)
        trained_samples = batch.num_samples  # over all ranks
        batch = self._own_rows(batch, kept_rows, exp.local_rows)
        t_train = time.perf_counter()
        if self.schedule.recompute_old_logprobs:
            with autocast(cfg.train.precision, self.world.device):
                old = self._logprobs(self.model, batch)
            batch = batch.replace(old_logprobs=old, rollout_logprobs=batch.old_logprobs)
        batch, correction_stats = apply_rollout_correction(batch, cfg.algorithm.rollout_correction)
        correction_stats = self.world.mean_over_ranks(correction_stats, "update: correction statistics")
        coefs = Coefficients(
            kl=self.kl_controller.coef if kl.placement == "loss" else 0.0,
            entropy=self.entropy_controller.active_coef(),
            token_keep_ratio=self._keep_ratio(cfg.selection.tokens),
        )
        update = policy_update(
            self.model, self.optimizer, self.scheduler, batch, self.loss_parts, self.schedule, self.generator, coefs,
            self.models.strategy,
        )
        with self.world.phase("update: refresh the generation weights"):
            self.models.refresh_generation_weights()
        release_host_memory()
        t_end = time.perf_counter()
        observed_kl = update.get("kl", exp.stats.get("kl_in_reward"))
        if observed_kl is not None:
            self.kl_controller.update(observed_kl, trained_samples)
        self.entropy_controller.update(update["entropy"])
        metrics = step_metrics(exp, exp.batch, accuracy_reward=self.cfg.accuracy_reward_name)  # all rollouts
        metrics.update(update)
        metrics.update(exp.stats)
        metrics.update(selection_stats)
        metrics.update(correction_stats)
        metrics.update(weighting_stats)
        metrics.update(
            {
                "kl_coef": self.kl_controller.coef,
                "entropy_coef": coefs.entropy,
                "rollout_seconds": t_train - t0,
                "train_seconds": t_end - t_train,
                "step_seconds": t_end - t0,
                "generated_tokens_per_second": exp.generated_tokens / max(exp.generation_seconds, 1e-9),
                "trained_tokens_per_second": update["trained_tokens"] / max(t_end - t_train, 1e-9),
            }
        )
        self.logger.log_samples(self.step, exp.samples)
        return metrics

    # ------------------------------------------------------------------ the loop
    def run(self) -> TrainSummary:
        cfg = self.cfg
        start = time.perf_counter()
        if self.step == 0 and cfg.eval.before_training:
            self.evaluate()
        progress = TrainProgress(
            total=cfg.train.steps, completed=self.step, enabled=cfg.logging.progress, silent=not self.world.is_main
        )
        budget = cfg.train.time_budget_seconds
        loop_start = time.perf_counter()
        with progress:
            while self.step < cfg.train.steps:
                self.step += 1
                metrics = self.train_step()
                metrics["elapsed_seconds"] = time.perf_counter() - loop_start
                self.logger.log_step(self.step, metrics)
                progress.update(self.step, metrics)
                out_of_time = budget is not None and metrics["elapsed_seconds"] >= budget
                last = self.step == cfg.train.steps or out_of_time
                if cfg.eval.every and self.step % cfg.eval.every == 0 and not last:
                    result = self.evaluate()
                    if result is not None:
                        progress.note(f"step {self.step}: held-out {result.report}")
                if self.step % cfg.checkpoint.every == 0 or last:
                    self._save()
                if out_of_time:
                    progress.note(f"time budget of {budget:.0f}s used after step {self.step}; stopping")
                    break
        self.evaluate()
        self.logger.close()
        summary = TrainSummary(self.run_dir, self.step, time.perf_counter() - start)
        if self.world.is_main:
            self._write_summary(summary)
        return summary

    def _write_summary(self, s: TrainSummary) -> None:
        evals = self.logger.evals.read()  # on a resumed run the 'before' evaluation is in the log
        first = next((e for e in evals if e["step"] == 0), None)
        data = {"steps": s.steps, "seconds_this_process": s.seconds, "before": first, "after": evals[-1]}
        (self.run_dir / "summary.json").write_text(json.dumps(data, indent=2))
