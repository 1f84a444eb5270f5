"""The policy update: μ epochs × mini-batches (optimizer steps) × micro-batches (accumulation).

The update seam: an :class:`Updater` is built once per run from its :class:`UpdateContext` (model, optimizer,
learning-rate schedule, distributed strategy, generator, micro-batch token budget) and each step calls
``updater.step(batch, coefficients, tokens)`` with the step's batch, its loss coefficients (:class:`Coefficients`)
and its loss-token filter (:class:`grove.pipeline.loss_token_filter.LossTokenFilter`: every loss token, or D^3S's
top ``|A|·H``); it returns an :class:`UpdateOutcome`. :class:`PolicyUpdate` is the policy's; ``grove rm``'s
:class:`grove.rm.score_update.ScoreUpdate` is another.

The loss of a micro-batch is aggregated with the *mini-batch's* global scale (token and sequence
counts), so summing micro-batch losses, which is what gradient accumulation does, gives exactly
the full mini-batch loss whatever the micro-batch size (``grove.core.aggregation``).

Old log-probs (``train.old_logprobs``): with ``auto``, an on-policy update (one epoch, one
mini-batch) uses the current forward's detached log-probs as ``old_logprobs``, so the ratio is
exactly 1 and no extra forward is spent, and an off-policy update uses the rollout engine's
log-probs (they equal the training forward's to within the mismatch logged as
``logprob_mismatch_max``); with ``recompute`` the trainer has replaced ``batch.old_logprobs`` by a
no-grad training forward before the update, and those are used as they are.

Many processes (``distributed.strategy``: ``ddp`` | ``fsdp2``): each rank updates on its own samples. The
aggregation scale (token and sequence counts, the filter's kept-token count) is summed over ranks before the
micro-batch loop, a filter that ranks the whole mini-batch sees every rank's tokens, each rank's loss is multiplied
by :attr:`grove.distributed.strategies.Strategy.gradient_scale`, and every rank runs the same number of
micro-batches (a rank with fewer repeats its last one with the loss multiplied by 0: FSDP2 all-gathers
parameters in every forward, so all ranks must run as many). With one mini-batch per epoch the loss,
gradients and update equal the single-process run on the union of the ranks' samples
(``tests/test_distributed_equivalence.py``); with several, each rank splits its own samples.

Samples without signal (``train.skip_zero_advantage``, where :attr:`LossComponents.skip_zero_advantage` says it
is exact): a sample whose advantages are all zero, e.g. each completion of a group whose rewards are all equal,
adds exactly zero to the gradient of a row-local loss that is linear in the advantages, so it is left out of the
forward and backward (:func:`samples_with_signal`). The aggregation scale still counts it, so the loss, the
gradients and the optimizer step are those of the full computation up to summation order; when no sample of a
mini-batch has a signal the gradients are set to zero and the optimizer still steps (AdamW's moments decay and
weight decay applies, as after a zero gradient). Early in a run most groups agree (a demo step had 12–72% of its
loss tokens with a non-zero advantage), so this is the update's largest saving on binary rewards.

Non-finite guard: a mini-batch whose loss (on any rank) or global gradient norm is not finite does not step
the optimizer or the learning-rate schedule; its gradients are dropped, the skip is counted
(``skipped_optimizer_steps``) and the trajectories of the offending micro-batches are logged as a warning.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from contextlib import ExitStack
from dataclasses import dataclass, field

import torch
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.aggregation import AggregationScale
from grove.core.losses import PolicyLossInput
from grove.distributed.world import World
from grove.infra.precision import autocast
from grove.kernels.output_projection import accumulating_weight_gradient_in_place, reusing_weight_casts
from grove.models.logprob_module import response_logprobs
from grove.pipeline.loss_token_filter import EVERY_LOSS_TOKEN, LossTokenFilter
from grove.pipeline.micro_batches import MicroBatchPlan, micro_batches
from grove.pipeline.update_seam import (
    Coefficients,
    LossComponents,
    UpdateContext,
    UpdateOutcome,
    UpdateSchedule,
)
from grove.pipeline.update_totals import UpdateTotals

__all__ = ["Coefficients", "LossComponents", "PolicyUpdate", "UpdateSchedule", "loss_statistic_names",
           "micro_batch_loss"]

log = logging.getLogger(__name__)

NO_COEFFICIENTS = Coefficients()  # no KL term, no entropy bonus


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _global_scale(
    mini: RolloutBatch, computed: list[Tensor], loss: LossComponents, tokens: LossTokenFilter, world: World
) -> AggregationScale:
    """The mini-batch's aggregation scale with counts summed over all ranks (the single-process values). Every
    sample counts, computed or left out for lack of signal (:meth:`LossTokenFilter.scale_tokens`)."""
    local = AggregationScale.from_mask(mini.loss_mask, loss.max_response_length, sequence_count=loss.sequence_count)
    sequences = local.rows(mini.loss_mask)
    kept = tokens.scale_tokens(mini.loss_mask, computed)  # the tokens that will really be in the loss
    sequences, kept = world.sum_floats([sequences, kept], "update: loss scale")
    return dataclasses.replace(
        local,
        num_tokens=max(kept, 1.0),  # the loss tokens, after the filter
        num_sequences=max(sequences, 1.0),
    )


def loss_statistic_names(loss: LossComponents) -> list[str]:
    """The names of the policy loss's per-token statistics, from the loss on one fully masked token: an update that
    computed no sample (every advantage zero, ``train.skip_zero_advantage``) still logs each of them, as NaN."""
    token, index = torch.zeros(1, 1), torch.zeros(1, dtype=torch.long)
    masked_token = PolicyLossInput(
        logprobs=token, old_logprobs=token, advantages=token, loss_mask=token, ref_logprobs=token,
        rollout_logprobs=token, entropy=token, group_index=index, trajectory_index=index, step_index=index,
    )
    return list(loss.policy_loss(masked_token, loss.policy_params).token_stats)


def micro_batch_loss(
    model: torch.nn.Module,
    mb: RolloutBatch,
    loss: LossComponents,
    scale: AggregationScale,
    coefs: Coefficients,
    *,
    old_from_current: bool,
    tokens: LossTokenFilter = EVERY_LOSS_TOKEN,
) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor]:
    """Loss of one micro-batch (already divided by the global scale), its per-token statistics, the
    rollout-vs-training log-prob mismatch and the mask of the tokens in the loss (after the filter)."""
    logprobs, entropy = response_logprobs(
        model, mb, loss.forward, temperature=loss.temperature, with_entropy=True, chunk_size=loss.chunk_size,
        cache_bytes=loss.logit_cache_bytes,
    )
    mb = mb.to(logprobs.device) if mb.prompt_ids.device != logprobs.device else mb
    mask = tokens.in_loss_mask(mb.loss_mask.to(logprobs.dtype), mb.advantages, entropy)
    rollout = mb.rollout_logprobs if mb.rollout_logprobs is not None else mb.old_logprobs
    inputs = PolicyLossInput(
        logprobs=logprobs,
        old_logprobs=logprobs.detach() if old_from_current else mb.old_logprobs,
        advantages=mb.advantages,
        loss_mask=mask,
        ref_logprobs=mb.ref_logprobs,
        rollout_logprobs=rollout,
        entropy=entropy,
        group_index=mb.group_index,
        trajectory_index=mb.trajectory_index,
        step_index=mb.step_index,
    )
    out = loss.policy_loss(inputs, loss.policy_params)
    token_loss = out.token_loss if mb.correction_weights is None else out.token_loss * mb.correction_weights
    weight = (lambda t: t) if mb.sample_weights is None else (lambda t: t * mb.sample_weights[:, None])
    value = loss.loss_aggregation(weight(token_loss), mask, scale)
    stats = dict(out.token_stats)
    stats["entropy"] = entropy.detach()
    if loss.kl_estimator is not None and mb.ref_logprobs is not None:
        kl = loss.kl_estimator(logprobs, mb.ref_logprobs)
        value = value + coefs.kl * loss.loss_aggregation(weight(kl), mask, scale)
        stats["kl"] = kl.detach()
    if coefs.entropy:
        value = value - coefs.entropy * loss.loss_aggregation(weight(entropy), mask, scale)
    mismatch = (logprobs.detach() - rollout).abs() * mb.loss_mask
    return value, stats, mismatch, mask


@dataclass(frozen=True)
class _StepSettings:
    """What every mini-batch of one step's update shares."""

    coefs: Coefficients
    tokens: LossTokenFilter
    micro_batch_tokens: int | None
    totals: UpdateTotals = field(default_factory=UpdateTotals)


@dataclass
class _MiniBatch:
    """One mini-batch of an update: its rows in the step's batch, its samples, where it falls in the update."""

    rows: Tensor
    batch: RolloutBatch
    epoch: int
    index: int

    @property
    def first_pass(self) -> bool:
        """Before any optimizer step of the update (a clean rollout-vs-training comparison)."""
        return self.epoch == 0 and self.index == 0


class _TrainedMask:
    """The loss mask each row of a step's batch was trained on in the first epoch (later epochs filter again, from
    the entropies of the updated policy)."""

    def __init__(self, batch: RolloutBatch) -> None:
        self.mask = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)

    def record(self, rows: Tensor, mask: Tensor) -> None:
        self.mask[rows.cpu(), : mask.shape[1]] = mask.detach().cpu().float()


class PolicyUpdate:
    """The policy's :class:`grove.pipeline.update_seam.Updater` (see the module docstring): built once with the
    run's ``context``, ``loss`` and ``schedule``."""

    def __init__(self, context: UpdateContext, loss: LossComponents, schedule: UpdateSchedule) -> None:
        self.context = context
        self.loss = loss
        self.schedule = schedule
        self.model = context.model
        self.strategy = context.strategy
        self.world = context.strategy.world

    def step(
        self, batch: RolloutBatch, coefficients: Coefficients = NO_COEFFICIENTS,
        tokens: LossTokenFilter = EVERY_LOSS_TOKEN,
    ) -> UpdateOutcome:
        """μ epochs of mini-batch updates on one step's rollouts (this rank's share of them); the metrics averaged
        over the update and, with several ranks, over all ranks."""
        self.model.train()
        n, schedule = batch.num_samples, self.schedule
        if n < schedule.mini_batches:
            raise ValueError(f"train.mini_batches ({schedule.mini_batches}) exceeds this step's {n} samples")
        budget = self.context.micro_batch_tokens
        settings = _StepSettings(
            coefficients, tokens, budget(batch, schedule.micro_batch_size) if budget else schedule.micro_batch_tokens
        )
        trained = _TrainedMask(batch) if tokens.selects else None
        for epoch in range(schedule.ppo_epochs):
            order = torch.randperm(n, generator=self.context.generator) if not schedule.on_policy else torch.arange(n)
            # exactly `mini_batches` near-equal mini-batches, whatever the step's sample count (agent steps vary)
            for index, rows in enumerate(torch.tensor_split(order, schedule.mini_batches)):
                masks = self._mini_batch_step(_MiniBatch(rows, batch.select(rows), epoch, index), settings)
                if trained is not None and epoch == 0:
                    for micro_rows, mask in masks:
                        trained.record(rows[micro_rows.cpu()], mask)
        self.context.optimizer.zero_grad(set_to_none=True)  # no gradients held through the next generation phase
        totals = settings.totals
        totals.summed_over_ranks(self.world)
        metrics = totals.metrics(
            self.context.scheduler.get_last_lr()[0], tokens, lambda: loss_statistic_names(self.loss)
        )
        if not self.loss.rollout_metrics:
            metrics = {k: v for k, v in metrics.items() if not k.startswith(("logprob_mismatch", "zero_advantage"))}
        return UpdateOutcome(metrics, trained.mask if trained is not None else None)

    def _skipping(self, settings: _StepSettings) -> bool:
        """Whether samples without signal are left out (no entropy term, and a filter that allows it:
        :attr:`LossTokenFilter.per_sequence`)."""
        return self.loss.skip_zero_advantage and settings.coefs.entropy == 0 and settings.tokens.per_sequence

    def _entropy_of(self, mb: RolloutBatch) -> Tensor:
        """The training forward's entropies of a micro-batch (what a filter over the whole mini-batch ranks by)."""
        with autocast(self.loss.precision, _device(self.model)):
            _, entropy = response_logprobs(
                self.model, mb, self.loss.forward, temperature=self.loss.temperature, with_entropy=True,
                chunk_size=self.loss.chunk_size,
            )
        return entropy

    def _mini_batch_step(self, mini: _MiniBatch, settings: _StepSettings) -> list[tuple[Tensor, Tensor]]:
        """One optimizer step: forward and backward of each micro-batch, the gradient clipped, the step taken (or
        skipped when the loss or the gradient norm is not finite). The loss mask each micro-batch's rows (indices in
        the mini-batch) were trained on."""
        tokens, totals = settings.tokens, settings.totals
        plan = micro_batches(
            mini.batch, self.loss.forward, self._skipping(settings), self.schedule.micro_batch_size, self.world,
            settings.micro_batch_tokens,
        )
        if mini.epoch == 0:
            totals.zero_advantage_skipped += len(plan.left_out)
        candidates = mini.batch.loss_mask  # loss tokens before the filter (for the statistics)
        # every pass, fillers included: FSDP2 needs as many forwards on every rank
        passes = plan.computed + plan.rank_fillers
        mini.batch = tokens.restrict_mini_batch(mini.batch, passes, self._entropy_of, self.world)
        scale = _global_scale(mini.batch, plan.computed, self.loss, tokens, self.world)
        totals.candidate_tokens += float(candidates.sum())
        self.context.optimizer.zero_grad(set_to_none=True)
        with self._weight_reuse():
            masks, offending = self._accumulate(mini, plan, scale, settings, candidates)
            self._rank_filler_passes(mini.batch, plan, scale, settings)
        if len(plan.left_out):
            masks.append((plan.left_out, tokens.left_out_mask(mini.batch.select(plan.left_out))))
        totals.grad_tokens += tokens.kept_count(mini.batch.loss_mask[plan.left_out])  # in the loss, zero gradient
        if not plan.passes:  # no sample of any rank has a signal: the gradient is zero, the optimizer still steps
            for p in self._trained_parameters():
                p.grad = torch.zeros_like(p)
        totals.grad_norms.append(self._clipped_step(offending, mini, totals))
        return masks

    def _weight_reuse(self) -> ExitStack:
        """One cast of the output projection's weight per optimizer step (it changes only at the step); with one
        process its weight gradient is added into .grad by its backward (no [V, H] buffer held by autograd)."""
        stack = ExitStack()
        stack.enter_context(reusing_weight_casts())
        if self.strategy.gradients_written_in_place:
            stack.enter_context(accumulating_weight_gradient_in_place())
        return stack

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _backward(self, mb: RolloutBatch, scale: AggregationScale, settings: _StepSettings, *, sync: bool,
                  weight: float) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor]:
        """Forward and backward of one micro-batch, its loss multiplied by ``weight``; gradients are reduced across
        ranks when ``sync`` (the last pass)."""
        with self.strategy.accumulating(self.model, sync=sync), self.world.phase("update: backward"):
            with autocast(self.loss.precision, _device(self.model)):
                result = micro_batch_loss(
                    self.model, mb, self.loss, scale, settings.coefs,
                    old_from_current=self.schedule.old_from_current_forward, tokens=settings.tokens,
                )
            (result[0] * weight if weight != 1.0 else result[0]).backward()
        return result

    def _accumulate(
        self, mini: _MiniBatch, plan: MicroBatchPlan, scale: AggregationScale, settings: _StepSettings,
        candidates: Tensor,
    ) -> tuple[list[tuple[Tensor, Tensor]], list[int]]:
        """The computed micro-batches' gradients accumulated; their trained masks and the trajectories of those
        whose loss is not finite. The loss of the mini-batch is recorded in the totals."""
        totals, masks, offending, total = settings.totals, [], [], 0.0
        for k, micro_idx in enumerate(plan.computed):
            mb = mini.batch.select(micro_idx).trimmed()
            loss, stats, mismatch, in_loss = self._backward(
                mb, scale, settings, sync=k == plan.passes - 1, weight=self.strategy.gradient_scale
            )
            in_loss, mismatch = in_loss.cpu(), mismatch.cpu()
            masks.append((micro_idx, in_loss))
            value = float(loss.detach())
            total += value
            if not math.isfinite(value):
                offending += mb.trajectory_index.tolist()
            row_candidates = candidates[micro_idx][:, : mb.loss_mask.shape[1]].float()
            stats = {name: v.cpu() for name, v in stats.items()}
            totals.add_micro_batch(mb, stats, row_candidates, in_loss, mismatch, mini.first_pass)
        totals.losses.append(total)
        return masks, offending

    def _rank_filler_passes(
        self, mini: RolloutBatch, plan: MicroBatchPlan, scale: AggregationScale, settings: _StepSettings
    ) -> None:
        """The passes with weight 0 that make every rank run as many forwards as the busiest one (FSDP2 all-gathers
        parameters in each)."""
        first = len(plan.computed)
        for k, micro_idx in enumerate(plan.rank_fillers, start=first):
            self._backward(mini.select(micro_idx).trimmed(), scale, settings, sync=k == plan.passes - 1, weight=0.0)

    def _clipped_step(self, offending: list[int], mini: _MiniBatch, totals: UpdateTotals) -> float:
        """Clip the global gradient norm and step the optimizer and the schedule, unless the loss (on any rank) or
        the norm is not finite: then this mini-batch never happened (counted, its trajectories logged). The norm."""
        world, optimizer = self.world, self.context.optimizer
        max_norm = self.schedule.max_grad_norm if self.schedule.max_grad_norm is not None else float("inf")
        with world.phase("update: gradient norm"):
            grad_norm = self.strategy.clip_grad_norm(self._trained_parameters(), max_norm)
        if world.any(bool(offending), "update: non-finite check") or not math.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)  # this mini-batch never happened
            totals.skipped_steps += 1
            ids = sorted(set(sum(world.gather_objects(offending, "update: non-finite samples"), [])))
            log.warning(
                "non-finite %s: optimizer step skipped (epoch %d, mini-batch %d); trajectories %s",
                "loss" if ids else f"gradient norm ({grad_norm})", mini.epoch, mini.index, ids[:50] or "(all)",
            )
        else:
            optimizer.step()
            self.context.scheduler.step()
        return grad_norm
