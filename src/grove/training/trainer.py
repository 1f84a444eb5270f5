"""The training loop.

    collect (the source's scored experience) → credit (advantages) → stages (D^3S rollouts, trajectory weights,
      old log-probs, rollout correction) → update (μ epochs × mini-batches × micro-batches of the policy loss,
      clip, AdamW) → metrics → periodic evaluation and checkpoint

Every algorithm choice is a registry lookup resolved once (:func:`grove.resolve.resolve_components`); the
loop itself has no per-algorithm branches. Under ``torchrun`` every rank runs this same loop on its share of
the step's groups (:mod:`grove.distributed`); the step's batch is gathered before advantages, the update
reduces gradients across ranks, and rank 0 alone writes logs, evaluations and checkpoints.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from grove.batch import RolloutBatch
from grove.config import ConfigError, GroveConfig
from grove.config.derived import generates_from_bf16_copy
from grove.distributed.world import World, derived_seed, init_world
from grove.evaluation.evaluate import EvalResult
from grove.evaluation.stats import describe_sampled
from grove.experience import SourceContext, build_experience_source
from grove.infra import fault_points
from grove.infra.precision import autocast, slow_bf16_warning
from grove.infra.progress import TrainProgress
from grove.infra.run_logs import NullRunLogger, RunLogger
from grove.infra.runtime import configure_runtime, release_host_memory
from grove.pipeline.batch_stages import StageBatch, StageContext
from grove.pipeline.coefficients import EntropyController, KLController
from grove.pipeline.credit import CreditAssignment, KLInReward
from grove.pipeline.downsampling import keep_ratio_at
from grove.pipeline.step_metrics import step_metrics
from grove.pipeline.token_details import TokenDetailsRecorder
from grove.pipeline.update import Coefficients, UpdateSchedule, policy_update
from grove.resolve import check_config, resolve_components
from grove.rollout_engines import build_rollout_engine
from grove.training.nonfinite_guard import NonFiniteGuard, nonfinite_advantage_trajectories
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

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class TrainSummary:
    run_dir: Path
    steps: int
    seconds: float
    stopped_by: str | None = None  # the signal that stopped the run early (SIGTERM, SIGINT), if one did


class Trainer:
    def __init__(self, cfg: GroveConfig, run_dir: Path, *, resume: bool = False, world: World | None = None) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        # no world given (the Python API): the config's device in one process, as `grove train` places it
        self.world = world or init_world(cfg.distributed.timeout_seconds, cfg.distributed.device)
        if cfg.train.prompts_per_step < self.world.size:
            raise ConfigError(
                f"train.prompts_per_step ({cfg.train.prompts_per_step}) is smaller than the number of processes "
                f"({self.world.size}); each rank needs at least one prompt group: raise it or launch fewer processes"
            )
        check_config(cfg)  # a config built in code gets the checks a loaded one had
        preflight(cfg)  # user code and model names resolve before anything is written or loaded
        start = prepare_run_dir(cfg, run_dir, self.world, resume)
        self.resume_from = start.checkpoint
        configure_runtime(**cfg.runtime_settings())
        slow_bf16 = slow_bf16_warning(cfg.train.precision, generates_from_bf16_copy(cfg), self.world.device)
        if slow_bf16 is not None and self.world.is_main:
            log.warning("warning: %s", slow_bf16)
        seed_everything(cfg.seed)

        self.components = resolve_components(cfg)
        self.loss_parts = self.components.loss
        self.models = build_policy_models(cfg, self.world, self.resume_from)
        self.model, self.tokenizer = self.models.train_module, self.models.tokenizer
        self.engine = build_rollout_engine(cfg.rollout, self.models.generation_model, self.tokenizer)
        a = cfg.algorithm
        self.generator = torch.Generator().manual_seed(derived_seed(cfg.seed, self.world.rank))
        self.source = build_experience_source(
            SourceContext(cfg=cfg, engine=self.engine, tokenizer=self.tokenizer, generator=self.generator,
                          world=self.world)
        )
        self.credit = CreditAssignment(
            advantage_fn=self.components.advantage_fn,
            advantage_params=self.components.advantage_params,
            aggregator=self.components.aggregator,
            aggregator_params=self.components.aggregator_params,
            reference=self.models.reference_logprobs(self.loss_parts.forward, self.loss_parts.temperature),
            kl_in_reward=self._kl_in_reward,
            world=self.world,
            pad_token_id=self.engine.pad_token_id,
            samples_per_step=cfg.logging.samples_per_step,
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
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.optim, total_optimizer_steps, seed=cfg.seed)
        self.state = RunState(
            self.models, self.optimizer, self.scheduler, self.source, self.generator,
            {"kl": self.kl_controller, "entropy": self.entropy_controller}, self.world, cfg.seed,
        )
        self.step = 0 if self.resume_from is None else restore_run_checkpoint(self.resume_from, self.state)
        record_resumed_config(cfg, run_dir, start, self.world)
        self.nonfinite_guard = NonFiniteGuard(t.max_skipped_steps, t.ppo_epochs * t.mini_batches, run_dir)
        # resuming keeps the log records up to the checkpoint's step; a run killed before its first
        # checkpoint starts over, so none of its records are kept (step -1)
        resume_step = None if not resume else (self.step if self.resume_from is not None else -1)
        self.logger = (
            RunLogger(run_dir, tensorboard=cfg.logging.tensorboard, resume_step=resume_step)
            if self.world.is_main
            else NullRunLogger()
        )
        details = cfg.logging.token_details
        self.token_details = TokenDetailsRecorder(
            details.every, details.max_samples, self.loss_parts, self.tokenizer, self.logger.log_token_details
        )

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, final: bool = False) -> EvalResult | None:
        """Held-out evaluation on rank 0 (the others wait); ``None`` on the other ranks. ``final``: the end-of-run
        evaluation, after the last checkpoint (marked so that a resumed run replaces it instead of adding one)."""
        self.model.eval()
        result = None
        if self.world.is_main:
            result = self.source.evaluate(step=self.step)
            self.logger.log_eval_samples(self.step, result.samples)  # then the record, which marks it done
            self.logger.log_eval(self.step, {**result.record(), **({"final": True} if final else {})})
        self.world.barrier("evaluation on rank 0")
        return result

    def _periodic_evaluation_missing(self) -> bool:
        """Whether the resumed step is an ``eval.every`` step without its evaluation in ``eval.jsonl``: a run stopped
        (SIGTERM, Ctrl-C, time budget) on such a step writes its checkpoint without evaluating it, and an uninterrupted
        run evaluates it just before that checkpoint, so evaluating it first thing reproduces the uninterrupted run
        (evaluation draws on no training RNG stream)."""
        every = self.cfg.eval.every
        if not every or not 0 < self.step < self.cfg.train.steps or self.step % every:
            return False
        missing = self.world.is_main and not any(
            r.get("step") == self.step and not r.get("final") for r in self.logger.evals.read()
        )
        return self.world.any(missing, "resume: evaluation of the resumed step")

    # ------------------------------------------------------------------ one step
    def _logprobs(self, model, batch) -> torch.Tensor:
        """No-grad log-probs of ``batch``'s responses (recomputed old policy), ``train.forward`` layout."""
        return self.models.logprobs(model, batch, self.loss_parts.forward, self.loss_parts.temperature)

    def _kl_in_reward(self) -> KLInReward | None:
        estimator = self.components.kl_in_reward_estimator
        return None if estimator is None else KLInReward(estimator, self.kl_controller.coef)

    def _own_rows(self, staged: StageBatch, local_rows: torch.Tensor | None) -> StageBatch:
        """The part of the step's (selected) batch this rank generated and trains on."""
        if local_rows is None or not self.world.distributed:
            return staged
        own = torch.isin(staged.rows, local_rows).nonzero().flatten()
        if own.numel() == 0:
            raise RuntimeError(
                f"{self.world.label}: sample selection kept none of this rank's rollouts; raise "
                "selection.samples.ratio or min_per_group, or use selection.samples.scope: group"
            )
        return staged.select(own)

    def _stage_context(self) -> StageContext:
        def old_logprobs(batch: RolloutBatch) -> torch.Tensor:
            with autocast(self.cfg.train.precision, self.world.device):
                return self._logprobs(self.model, batch)

        return StageContext(self.step, self.cfg.train.steps, self.world, old_logprobs)

    def train_step(self) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.model.eval()
        kl = cfg.algorithm.kl
        with autocast(cfg.train.precision, self.world.device):
            exp = self.credit(self.source.collect(self.step))
        fault_points.reached("generation", self.step)
        self.models.release_generation_weights()  # the update runs without the generation copy
        release_host_memory()  # generation's freed KV cache goes back to the OS before the update
        stages, context = self.components.stages, self._stage_context()
        staged = stages.run_whole_step(StageBatch.of(exp), context)  # D^3S's rollouts, trajectory weights
        trained_samples = staged.batch.num_samples  # over all ranks
        nonfinite_advantages = nonfinite_advantage_trajectories(staged.batch)
        staged = self._own_rows(staged, exp.local_rows)
        t_train = time.perf_counter()
        staged = stages.run_this_rank(staged, context)  # old log-probs recomputed, rollout correction
        batch, source_rows = staged.batch, staged.rows
        coefs = Coefficients(
            kl=self.kl_controller.coef if kl.placement == "loss" else 0.0,
            entropy=self.entropy_controller.active_coef(),
            token_keep_ratio=keep_ratio_at(
                cfg.selection.tokens.ratio if cfg.selection.tokens else None, self.step, cfg.train.steps
            ),
        )
        token_details = self.token_details.capture(self.step, self.model, batch, source_rows)  # before the update
        if nonfinite_advantages:  # the guard of docs/reliability.md: no update from these advantages
            update = {"skipped_optimizer_steps": float(self.schedule.ppo_epochs * self.schedule.mini_batches)}
        else:
            update = policy_update(
                self.model, self.optimizer, self.scheduler, batch, self.loss_parts, self.schedule, self.generator,
                coefs, self.models.strategy, token_details.trained_tokens,
            )
        fault_points.reached("update", self.step)
        with self.world.phase("update: refresh the generation weights"):
            self.models.refresh_generation_weights()
        release_host_memory()
        t_end = time.perf_counter()
        observed_kl = update.get("kl", exp.stats.get("kl_in_reward"))
        if observed_kl is not None:
            self.kl_controller.update(observed_kl, trained_samples)
        if math.isfinite(update.get("entropy", float("nan"))):
            self.entropy_controller.update(update["entropy"])
        metrics = step_metrics(exp, exp.batch, accuracy_reward=self.cfg.accuracy_reward_name)  # all rollouts
        metrics.update(update)
        metrics.update(exp.stats)
        metrics.update(staged.stats)
        metrics["nonfinite_advantage_samples"] = float(len(nonfinite_advantages))
        metrics.update(
            {
                "kl_coef": self.kl_controller.coef,
                "entropy_coef": coefs.entropy,
                "rollout_seconds": t_train - t0,
                "train_seconds": t_end - t_train,
                "step_seconds": t_end - t0,
                "generated_tokens_per_second": exp.generated_tokens / max(exp.generation_seconds, 1e-9),
                "trained_tokens_per_second": update.get("trained_tokens", 0.0) / max(t_end - t_train, 1e-9),
            }
        )
        self.logger.log_samples(self.step, exp.samples)
        metrics.update(token_details.write())  # rank 0 writes its own rows (the other ranks' logger writes nothing)
        return metrics

    # ------------------------------------------------------------------ the loop
    def run(self) -> TrainSummary:
        cfg = self.cfg
        start = time.perf_counter()
        if (self.step == 0 and cfg.eval.before_training) or self._periodic_evaluation_missing():
            self.evaluate()
        progress = TrainProgress(
            total=cfg.train.steps, completed=self.step, enabled=cfg.logging.progress, silent=not self.world.is_main
        )
        budget = cfg.train.time_budget_seconds
        loop_start = time.perf_counter()
        with progress, StopRequests() as stop:
            while self.step < cfg.train.steps:
                self.step += 1
                metrics = self.train_step()
                metrics["elapsed_seconds"] = time.perf_counter() - loop_start
                self.nonfinite_guard.observe(metrics)
                self.logger.log_step(self.step, metrics)
                progress.update(self.step, metrics)
                self.nonfinite_guard.check(self.step)
                out_of_time = budget is not None and metrics["elapsed_seconds"] >= budget
                stopping = self.world.any(stop.requested, "stop request")  # a signal on any rank stops them all
                last = self.step == cfg.train.steps or out_of_time or stopping
                if cfg.eval.every and self.step % cfg.eval.every == 0 and not last:
                    result = self.evaluate()
                    if result is not None:
                        sampled = describe_sampled(result.extra)
                        progress.note(f"step {self.step}: held-out {result.report}" + (f"; {sampled}" if sampled else ""))
                if self.step % cfg.checkpoint.every == 0 or last:
                    save_run_checkpoint(self.run_dir, self.step, self.state, cfg.checkpoint.keep_last)
                if stopping:
                    self.logger.close()
                    return TrainSummary(self.run_dir, self.step, time.perf_counter() - start, stop.signal_name or "signal")
                if out_of_time:
                    progress.note(f"time budget of {budget:.0f}s used after step {self.step}; stopping")
                    break
        self.evaluate(final=True)
        self.logger.close()
        summary = TrainSummary(self.run_dir, self.step, time.perf_counter() - start)
        if self.world.is_main:
            self._write_summary(summary)
        return summary

    def _write_summary(self, s: TrainSummary) -> None:
        evals = self.logger.evals.read()  # on a resumed run the 'before' evaluation is in the log
        first = next((e for e in evals if e["step"] == 0), None)
        data = {"steps": s.steps, "seconds_this_process": s.seconds, "before": first, "after": evals[-1]}
        self.logger.write_summary(data)
