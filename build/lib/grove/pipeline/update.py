"""The policy update: μ epochs × mini-batches (optimizer steps) × micro-batches (accumulation).

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
aggregation scale (token and sequence counts, D^3S's kept-token count) is summed over ranks before the
micro-batch loop, D^3S's batch-scope token ranking sees every rank's tokens, each rank's loss is multiplied
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
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.aggregation import AggregationScale, SequenceCount
from grove.core.losses import PolicyLossFn, PolicyLossInput
from grove.distributed.strategies import Strategy
from grove.distributed.world import World
from grove.infra.precision import autocast
from grove.kernels.output_projection import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CHUNK_SIZE,
    accumulating_weight_gradient_in_place,
    reusing_weight_casts,
)
from grove.models.logprob_module import response_logprobs
from grove.pipeline.downsampling import LossTokenSelection, TokenSelection
from grove.pipeline.micro_batches import micro_batches
from grove.pipeline.update_totals import TrainedTokens, UpdateTotals

log = logging.getLogger(__name__)

ALL_LOSS_TOKENS = LossTokenSelection()  # no token selection: every loss token is trained on


@dataclass(frozen=True)
class LossComponents:
    """The resolved loss pieces (registry functions and their validated parameters)."""

    policy_loss: PolicyLossFn
    policy_params: BaseModel
    loss_aggregation: Callable[[Tensor, Tensor, AggregationScale], Tensor]  # the token loss reduced to one number
    kl_estimator: Callable[[Tensor, Tensor], Tensor] | None  # set when the KL term is in the loss
    temperature: float
    max_response_length: int
    chunk_size: int = DEFAULT_CHUNK_SIZE
    logit_cache_bytes: int = DEFAULT_CACHE_BYTES  # softmax of a micro-batch kept for backward up to this size
    forward: str = "padded"  # training-forward layout: "packed" | "shared_prefix" | "padded" (grove.models.forward_layouts)
    precision: str = "fp32"  # "bf16": forward under bfloat16 autocast
    token_selection: TokenSelection | None = None  # D^3S token-level down-sampling (grove.pipeline.downsampling)
    sequence_count: SequenceCount = "all_rows"  # which rows the seq_mean_* aggregations count (grove.core.aggregation)
    skip_zero_advantage: bool = False  # leave zero-advantage samples out (exact for this config; see samples_with_signal)
    # the batch's old log-probs and advantages are a rollout's: the metrics compare them with the training forward
    # (logprob_mismatch_*) and count skipped zero-advantage samples; off for demonstrations (supervised fine-tuning)
    rollout_metrics: bool = True


@dataclass(frozen=True)
class UpdateSchedule:
    ppo_epochs: int
    mini_batches: int
    micro_batch_size: int
    max_grad_norm: float | None
    recompute_old_logprobs: bool = False
    micro_batch_tokens: int | None = None  # a token budget per micro-batch (train.micro_batch_tokens, resolved)

    @property
    def on_policy(self) -> bool:
        return self.ppo_epochs == 1 and self.mini_batches == 1

    @property
    def old_from_current_forward(self) -> bool:
        return self.on_policy and not self.recompute_old_logprobs


@dataclass(frozen=True)
class Coefficients:
    """The step's loss coefficients (controllers may change them between steps)."""

    kl: float = 0.0
    entropy: float = 0.0
    token_keep_ratio: float = 1.0  # D^3S: fraction of loss tokens kept (this step's schedule value)


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _entropy_pass(model: torch.nn.Module, parts: LossComponents) -> Callable[[RolloutBatch], Tensor]:
    """The training forward's entropies of a micro-batch (what batch-scope token selection ranks by)."""

    def entropy_of(mb: RolloutBatch) -> Tensor:
        with autocast(parts.precision, _device(model)):
            _, ent = response_logprobs(
                model, mb, parts.forward, temperature=parts.temperature, with_entropy=True, chunk_size=parts.chunk_size
            )
        return ent

    return entropy_of


def _global_scale(
    mini: RolloutBatch, micro_indices: list[Tensor], parts: LossComponents, tokens: LossTokenSelection, world: World
) -> AggregationScale:
    """The mini-batch's aggregation scale with counts summed over all ranks (the single-process values). Every
    sample counts, computed or left out for lack of signal (:meth:`LossTokenSelection.scale_tokens`)."""
    local = AggregationScale.from_mask(mini.loss_mask, parts.max_response_length, sequence_count=parts.sequence_count)
    sequences = local.rows(mini.loss_mask)
    kept = tokens.scale_tokens(mini.loss_mask, micro_indices)  # the tokens that will really be in the loss
    sequences, kept = world.sum_floats([sequences, kept], "update: loss scale")
    return dataclasses.replace(
        local,
        num_tokens=max(kept, 1.0),  # the loss tokens, after any in-loss token selection
        num_sequences=max(sequences, 1.0),
    )


def _skipping(parts: LossComponents, coefs: Coefficients, tokens: LossTokenSelection) -> bool:
    """Whether samples without signal are left out (no entropy term, and a token selection that allows it:
    :attr:`LossTokenSelection.per_sequence`)."""
    return parts.skip_zero_advantage and coefs.entropy == 0 and tokens.per_sequence


def loss_statistic_names(parts: LossComponents) -> list[str]:
    """The names of the policy loss's per-token statistics, from the loss on one fully masked token: an update that
    computed no sample (every advantage zero, ``train.skip_zero_advantage``) still logs each of them, as NaN."""
    token, index = torch.zeros(1, 1), torch.zeros(1, dtype=torch.long)
    masked_token = PolicyLossInput(
        logprobs=token, old_logprobs=token, advantages=token, loss_mask=token, ref_logprobs=token,
        rollout_logprobs=token, entropy=token, group_index=index, trajectory_index=index, step_index=index,
    )
    return list(parts.policy_loss(masked_token, parts.policy_params).token_stats)


def micro_batch_loss(
    model: torch.nn.Module,
    mb: RolloutBatch,
    parts: LossComponents,
    scale: AggregationScale,
    coefs: Coefficients,
    *,
    old_from_current: bool,
    tokens: LossTokenSelection = ALL_LOSS_TOKENS,
) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor]:
    """Loss of one micro-batch (already divided by the global scale), its per-token statistics, the
    rollout-vs-training log-prob mismatch and the mask of the tokens in the loss (after token selection)."""
    logprobs, entropy = response_logprobs(
        model, mb, parts.forward, temperature=parts.temperature, with_entropy=True, chunk_size=parts.chunk_size,
        cache_bytes=parts.logit_cache_bytes,
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
    out = parts.policy_loss(inputs, parts.policy_params)
    token_loss = out.token_loss if mb.correction_weights is None else out.token_loss * mb.correction_weights
    weight = (lambda t: t) if mb.sample_weights is None else (lambda t: t * mb.sample_weights[:, None])
    loss = parts.loss_aggregation(weight(token_loss), mask, scale)
    stats = dict(out.token_stats)
    stats["entropy"] = entropy.detach()
    if parts.kl_estimator is not None and mb.ref_logprobs is not None:
        kl = parts.kl_estimator(logprobs, mb.ref_logprobs)
        loss = loss + coefs.kl * parts.loss_aggregation(weight(kl), mask, scale)
        stats["kl"] = kl.detach()
    if coefs.entropy:
        loss = loss - coefs.entropy * parts.loss_aggregation(weight(entropy), mask, scale)
    mismatch = (logprobs.detach() - rollout).abs() * mb.loss_mask
    return loss, stats, mismatch, mask


@dataclass(frozen=True)
class _UpdateContext:
    """What every mini-batch of one update shares."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    params: list[torch.nn.Parameter]
    parts: LossComponents
    schedule: UpdateSchedule
    coefs: Coefficients
    tokens: LossTokenSelection
    strategy: Strategy
    trained_tokens: TrainedTokens | None


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: RolloutBatch,
    parts: LossComponents,
    schedule: UpdateSchedule,
    generator: torch.Generator,
    coefs: Coefficients = Coefficients(),
    strategy: Strategy | None = None,
    trained_tokens: TrainedTokens | None = None,
) -> dict[str, float]:
    """Run μ epochs of mini-batch updates on one step's rollouts (this rank's share of them); return metrics
    averaged over the update and, with several ranks, over all ranks. ``trained_tokens``, when given, receives the
    loss mask its rows were trained on (:class:`TrainedTokens`)."""
    strategy = strategy or Strategy("none", World())
    model.train()
    n = batch.num_samples
    if n < schedule.mini_batches:
        raise ValueError(f"train.mini_batches ({schedule.mini_batches}) exceeds this step's {n} samples")
    ctx = _UpdateContext(
        model, optimizer, scheduler, [p for p in model.parameters() if p.requires_grad], parts, schedule, coefs,
        LossTokenSelection(parts.token_selection, coefs.token_keep_ratio), strategy, trained_tokens,
    )
    totals = UpdateTotals()
    for epoch in range(schedule.ppo_epochs):
        order = torch.randperm(n, generator=generator) if not schedule.on_policy else torch.arange(n)
        # exactly `mini_batches` near-equal mini-batches, whatever the step's sample count (agent steps vary)
        for mini_index, mini_idx in enumerate(torch.tensor_split(order, schedule.mini_batches)):
            _mini_batch_step(ctx, batch, mini_idx, epoch, mini_index, totals)
    optimizer.zero_grad(set_to_none=True)  # no gradients held through the next generation phase
    totals.summed_over_ranks(strategy.world)
    metrics = totals.metrics(scheduler.get_last_lr()[0], ctx.tokens, lambda: loss_statistic_names(parts))
    if not parts.rollout_metrics:
        metrics = {k: v for k, v in metrics.items() if not k.startswith(("logprob_mismatch", "zero_advantage"))}
    return metrics


def _mini_batch_step(
    ctx: _UpdateContext, batch: RolloutBatch, mini_idx: Tensor, epoch: int, mini_index: int, totals: UpdateTotals
) -> None:
    """One optimizer step: the mini-batch's micro-batches accumulated, the gradient clipped, the step taken (or
    skipped when the loss or the gradient norm is not finite)."""
    parts, coefs, tokens, world = ctx.parts, ctx.coefs, ctx.tokens, ctx.strategy.world
    mini = batch.select(mini_idx)
    micro_indices, real, left_out = micro_batches(
        mini, parts.forward, _skipping(parts, coefs, tokens), ctx.schedule.micro_batch_size, world,
        ctx.schedule.micro_batch_tokens,
    )
    if epoch == 0:
        totals.zero_advantage_skipped += len(left_out)
    candidates = mini.loss_mask  # loss tokens before token selection (for the statistics)
    mini = tokens.restrict_mini_batch(mini, micro_indices, _entropy_pass(ctx.model, parts), world)
    scale = _global_scale(mini, micro_indices[:real], parts, tokens, world)
    totals.candidate_tokens += float(candidates.sum())
    ctx.optimizer.zero_grad(set_to_none=True)
    total = 0.0
    offending: list[int] = []  # trajectories of micro-batches whose loss is not finite
    first_pass = epoch == 0 and mini_index == 0
    # one cast of the output projection's weight per optimizer step (it changes only at the step); with one
    # process its weight gradient is added into .grad by its backward (no [V, H] buffer held by autograd)
    in_place = accumulating_weight_gradient_in_place() if ctx.strategy.gradients_written_in_place else nullcontext()
    with reusing_weight_casts(), in_place:
        for k, micro_idx in enumerate(micro_indices):
            mb = mini.select(micro_idx).trimmed()
            with ctx.strategy.accumulating(ctx.model, sync=k == len(micro_indices) - 1), world.phase("update: backward"):
                with autocast(parts.precision, _device(ctx.model)):
                    loss, stats, mismatch, in_loss = micro_batch_loss(
                        ctx.model, mb, parts, scale, coefs, old_from_current=ctx.schedule.old_from_current_forward,
                        tokens=tokens,
                    )
                weight = ctx.strategy.gradient_scale if k < real else 0.0
                (loss * weight if weight != 1.0 else loss).backward()
            if k >= real:
                continue
            in_loss, mismatch = in_loss.cpu(), mismatch.cpu()
            if ctx.trained_tokens is not None and epoch == 0:
                ctx.trained_tokens.record(mini_idx[micro_idx.cpu()], in_loss)
            stats = {name: v.cpu() for name, v in stats.items()}
            total += float(loss.detach())
            if not math.isfinite(float(loss.detach())):
                offending += mb.trajectory_index.tolist()
            row_candidates = candidates[micro_idx][:, : mb.loss_mask.shape[1]].float()
            totals.add_micro_batch(mb, stats, row_candidates, in_loss, mismatch, first_pass)
    totals.grad_tokens += tokens.kept_count(mini.loss_mask[left_out])  # in the loss, zero gradient
    if ctx.trained_tokens is not None and epoch == 0 and len(left_out):
        ctx.trained_tokens.record(mini_idx[left_out.cpu()], tokens.left_out_mask(mini.select(left_out)))
    if not micro_indices:  # no sample of any rank has a signal: the gradient is zero, the optimizer still steps
        for p in ctx.params:
            p.grad = torch.zeros_like(p)
    grad_norm = _clipped_step(ctx, offending, epoch, mini_index, totals)
    totals.losses.append(total)
    totals.grad_norms.append(grad_norm)


def _clipped_step(ctx: _UpdateContext, offending: list[int], epoch: int, mini_index: int, totals: UpdateTotals) -> float:
    """Clip the global gradient norm and step the optimizer and the schedule, unless the loss (on any rank) or the
    norm is not finite: then this mini-batch never happened (counted, its trajectories logged). The norm."""
    world = ctx.strategy.world
    max_norm = ctx.schedule.max_grad_norm if ctx.schedule.max_grad_norm is not None else float("inf")
    with world.phase("update: gradient norm"):
        grad_norm = ctx.strategy.clip_grad_norm(ctx.params, max_norm)
    if world.any(bool(offending), "update: non-finite check") or not math.isfinite(grad_norm):
        ctx.optimizer.zero_grad(set_to_none=True)  # this mini-batch never happened
        totals.skipped_steps += 1
        ids = sorted(set(sum(world.gather_objects(offending, "update: non-finite samples"), [])))
        log.warning(
            "non-finite %s: optimizer step skipped (epoch %d, mini-batch %d); trajectories %s",
            "loss" if ids else f"gradient norm ({grad_norm})", epoch, mini_index, ids[:50] or "(all)",
        )
    else:
        ctx.optimizer.step()
        ctx.scheduler.step()
    return grad_norm
