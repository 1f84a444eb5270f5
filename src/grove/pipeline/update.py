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
from collections import defaultdict
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
from grove.pipeline.downsampling import (
    TokenSelection,
    select_loss_tokens,
    selected_token_count,
    signal_token_mask,
    tokens_with_signal,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LossComponents:
    """The resolved loss pieces (registry functions and their validated parameters)."""

    policy_loss: PolicyLossFn
    policy_params: BaseModel
    aggregate: Callable[[Tensor, Tensor, AggregationScale], Tensor]
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


@dataclass(frozen=True)
class UpdateSchedule:
    ppo_epochs: int
    mini_batches: int
    micro_batch_size: int
    max_grad_norm: float | None
    recompute_old_logprobs: bool = False

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


@dataclass
class TrainedTokens:
    """Out-parameter of :func:`policy_update`: the loss mask some rows of its batch were trained on, after D^3S token
    selection, as the update computed it (scope ``batch`` ranks the whole mini-batch, ``micro_batch`` each
    micro-batch, so only the update knows it). The first epoch's mask: later epochs select again from the entropies
    of the updated policy. A row left out for lack of signal (``train.skip_zero_advantage``) gets the tokens its
    selection counts in the loss (all scores zero: its first tokens). ``filled`` stays false when the update does
    not run (a non-finite advantage skips it).

    Build it with :meth:`for_rows`; the update fills ``mask`` through :meth:`record`."""

    rows: Tensor  # [k] rows of the update's batch
    mask: Tensor  # [k, R] float32, R the batch's response width
    position: Tensor  # [N] each batch row's index in ``rows``, -1 for rows not asked for
    filled: bool = False

    @classmethod
    def for_rows(cls, rows: Tensor, batch: RolloutBatch) -> TrainedTokens:
        rows = rows.cpu()
        position = torch.full((batch.num_samples,), -1, dtype=torch.long)
        position[rows] = torch.arange(len(rows))
        return cls(rows, torch.zeros(len(rows), batch.loss_mask.shape[1]), position)

    def record(self, batch_rows: Tensor, mask: Tensor) -> None:
        """Keep the lines of ``mask`` (``[m, r]``, the loss mask of rows ``batch_rows`` of the update's batch, ``r``
        their trimmed width) whose rows were asked for."""
        at = self.position[batch_rows.cpu()]
        asked = at >= 0
        self.mask[at[asked], : mask.shape[1]] = mask.detach().cpu()[asked].float()
        self.filled = True


class TokenStats:
    """Sums of per-token statistics over loss tokens, for micro-batch-independent averages."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.tokens = 0.0

    def add(self, values: dict[str, Tensor], mask: Tensor) -> None:
        self.tokens += float(mask.sum())
        for name, v in values.items():
            self.sums[name] += float((v.detach().float() * mask).sum())

    def means(self) -> dict[str, float]:
        return {k: v / max(self.tokens, 1.0) for k, v in self.sums.items()}

    def summed_over(self, world: World) -> TokenStats:
        """These sums added over all ranks (a rank that computed no sample, ``train.skip_zero_advantage``, has no
        statistic names of its own: the names are the union over ranks)."""
        names = sorted(set().union(*world.gather_objects(sorted(self.sums), "update: metric names")))
        totals = world.sum_floats([self.tokens, *(self.sums.get(k, 0.0) for k in names)], "update: metrics")
        out = TokenStats()
        out.tokens = totals[0]
        out.sums.update(zip(names, totals[1:], strict=True))
        return out


def _selects_tokens(parts: LossComponents, coefs: Coefficients) -> bool:
    return parts.token_selection is not None and coefs.token_keep_ratio < 1.0


def _selects_in_loss(parts: LossComponents, coefs: Coefficients) -> bool:
    """Token selection inside each micro-batch's loss (scopes ``sequence`` and ``micro_batch``)."""
    return _selects_tokens(parts, coefs) and parts.token_selection.scope != "batch"


@torch.no_grad()
def _batch_token_mask(
    model: torch.nn.Module,
    mini: RolloutBatch,
    micro_indices: list[Tensor],
    parts: LossComponents,
    ratio: float,
    world: World,
) -> Tensor:
    """Token scope ``batch``: the mini-batch's loss mask restricted to its top ``|A|·H`` tokens over all
    sequences (of every rank), with the entropies of a no-grad pass of the same training forward (same layout
    and micro-batches, so the same values the gradient pass computes; it costs one extra forward)."""
    entropy = torch.zeros(mini.loss_mask.shape, dtype=torch.float32, device=mini.loss_mask.device)
    for idx in micro_indices:
        mb = mini.select(idx).trimmed()
        with autocast(parts.precision, _device(model)):
            _, ent = response_logprobs(
                model, mb, parts.forward, temperature=parts.temperature, with_entropy=True, chunk_size=parts.chunk_size
            )
        entropy[idx, : ent.shape[1]] = ent.float().cpu()
    if not world.distributed:
        return select_loss_tokens(mini.loss_mask, mini.advantages, entropy, parts.token_selection, ratio)
    local = (mini.loss_mask, mini.advantages, entropy)
    ranks = world.gather_objects(local, "update: batch-scope token selection")
    width = max(t[0].shape[1] for t in ranks)
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]))  # noqa: E731
    mask, adv, ent = (torch.cat([pad(r[i]) for r in ranks]) for i in range(3))
    selected = select_loss_tokens(mask, adv, ent, parts.token_selection, ratio)
    first = sum(r[0].shape[0] for r in ranks[: world.rank])
    return selected[first : first + mini.num_samples, : mini.loss_mask.shape[1]]


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _global_scale(
    mini: RolloutBatch, micro_indices: list[Tensor], parts: LossComponents, coefs: Coefficients, world: World
) -> AggregationScale:
    """The mini-batch's aggregation scale with counts summed over all ranks (the single-process values). Every
    sample counts, computed or left out for lack of signal: token selection within each completion keeps a count
    per row; across a micro-batch (never skipping) a count per micro-batch of ``micro_indices``."""
    local = AggregationScale.from_mask(mini.loss_mask, parts.max_response_length, sequence_count=parts.sequence_count)
    sequences = local.rows(mini.loss_mask)
    if _selects_in_loss(parts, coefs) and parts.token_selection.scope == "micro_batch":
        kept = sum(_loss_token_count(mini.loss_mask[i], parts, coefs) for i in micro_indices)
    else:  # normalise by the tokens that will really be in the loss
        kept = _loss_token_count(mini.loss_mask, parts, coefs)
    sequences, kept = world.sum_floats([sequences, kept], "update: loss scale")
    return dataclasses.replace(
        local,
        num_tokens=max(kept, 1.0),  # the loss tokens, after any in-loss token selection
        num_sequences=max(sequences, 1.0),
    )


def samples_with_signal(mini: RolloutBatch) -> Tensor:
    """``bool [samples]``: which samples have a loss token with a non-zero advantage.

    The others (every completion of a group with one reward, a sample without loss tokens) contribute exactly zero
    to the gradient of a loss that is row-local and linear in its advantages, aggregated as a sum of per-row terms
    over the mini-batch's global counts (``zero_advantage_rows_skippable`` in the registries): their forward and
    backward are work for nothing. ``train.skip_zero_advantage`` leaves them out; the aggregation scale is still
    the whole mini-batch's, so every other sample's term is unchanged."""
    return signal_token_mask(mini.loss_mask, mini.advantages).any(dim=1)


def _skipping(parts: LossComponents, coefs: Coefficients) -> bool:
    """Whether samples without signal are left out: token selection within each completion (scope ``sequence``)
    keeps a count known before the forward and gives a zero-advantage sample's kept tokens a zero gradient, so it
    allows the skip; selection across several samples (``micro_batch``, ``batch``) would rank without them."""
    per_sequence = not _selects_tokens(parts, coefs) or parts.token_selection.scope == "sequence"
    return parts.skip_zero_advantage and coefs.entropy == 0 and per_sequence


def _loss_token_count(mask: Tensor, parts: LossComponents, coefs: Coefficients) -> float:
    """How many of ``mask``'s tokens are in the loss after the in-loss token selection (known before the forward)."""
    if _selects_in_loss(parts, coefs):
        return selected_token_count(mask, parts.token_selection, coefs.token_keep_ratio)
    return float(mask.sum())


def _left_out_loss_mask(left_out: RolloutBatch, parts: LossComponents, coefs: Coefficients) -> Tensor:
    """The loss mask of samples left out for lack of signal as their in-loss token selection would make it: every
    advantage is zero, so every score ``|A|·H`` is zero and each row keeps its first tokens (the count
    :func:`_loss_token_count` puts in the aggregation scale)."""
    if not _selects_in_loss(parts, coefs):
        return left_out.loss_mask
    zeros = torch.zeros_like(left_out.advantages, dtype=torch.float32)
    return select_loss_tokens(left_out.loss_mask, left_out.advantages, zeros, parts.token_selection,
                              coefs.token_keep_ratio)


def loss_statistic_names(parts: LossComponents) -> list[str]:
    """The names of the policy loss's per-token statistics, from the loss on one fully masked token: an update that
    computed no sample (every advantage zero, ``train.skip_zero_advantage``) still logs each of them, as NaN."""
    token, index = torch.zeros(1, 1), torch.zeros(1, dtype=torch.long)
    masked_token = PolicyLossInput(
        logprobs=token, old_logprobs=token, advantages=token, loss_mask=token, ref_logprobs=token,
        rollout_logprobs=token, entropy=token, group_index=index, trajectory_index=index, step_index=index,
    )
    return list(parts.policy_loss(masked_token, parts.policy_params).token_stats)


def _micro_batches(
    mini: RolloutBatch, parts: LossComponents, coefs: Coefficients, size: int, world: World
) -> tuple[list[Tensor], int, Tensor]:
    """The mini-batch's micro-batches (sample indices, largest first), how many of them are real, and the samples
    left out because they carry no signal (:func:`samples_with_signal`, when :func:`_skipping`).

    Order: groups kept together for the prompt-sharing forwards (within a group, longest first); otherwise
    length-sorted, which wastes less compute on padding. Every rank runs as many micro-batches (FSDP2 gathers
    parameters in each forward): the extra ones repeat the last real one (on a rank with none, its shortest sample)
    and run with weight 0. No micro-batch at all when no rank has a sample to compute."""
    tokens = mini.response_lengths + mini.prompt_mask.sum(1)
    order = torch.argsort(tokens, descending=True, stable=True)
    if parts.forward != "padded":
        order = order[torch.argsort(mini.group_index[order], stable=True)]
    left_out = order[:0]
    if _skipping(parts, coefs):  # samples whose gradient is exactly zero are not computed
        signal = samples_with_signal(mini)[order]
        order, left_out = order[signal], order[~signal]
    micro = largest_first([m for m in torch.split(order, size) if len(m)], tokens)
    real = len(micro)
    count = world.max_int(real, "update: micro-batch count")
    filler = micro[-1:] or [torch.argsort(tokens, stable=True)[:1]]
    return micro + filler * (count - real), real, left_out


def largest_first(micro_indices: list[Tensor], tokens: Tensor) -> list[Tensor]:
    """The micro-batches in decreasing order of their token count (``tokens [samples]``; ties keep their order).

    Why: the host allocator's heap grows to the largest working set it has served, and blocks freed by a small
    micro-batch are too small for a larger one that follows, so a growing sequence of sizes raises the
    high-water mark once per size. Largest first, every later micro-batch fits into blocks the first one freed:
    the bf16 update's peak RSS fell 3.79 → 3.57-3.63 GiB at the same update time (``benchmarks/step_memory.py``,
    docs/benchmarks.md, issue 16). Gradients are sums over micro-batches, so only the summation order (float
    rounding) changes."""
    return sorted(micro_indices, key=lambda idx: -int(tokens[idx].sum()))  # sorted() is stable


def micro_batch_loss(
    model: torch.nn.Module,
    mb: RolloutBatch,
    parts: LossComponents,
    scale: AggregationScale,
    coefs: Coefficients,
    *,
    old_from_current: bool,
) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor]:
    """Loss of one micro-batch (already divided by the global scale), its per-token statistics, the
    rollout-vs-training log-prob mismatch and the mask of the tokens in the loss (after token selection)."""
    logprobs, entropy = response_logprobs(
        model, mb, parts.forward, temperature=parts.temperature, with_entropy=True, chunk_size=parts.chunk_size,
        cache_bytes=parts.logit_cache_bytes,
    )
    mb = mb.to(logprobs.device) if mb.prompt_ids.device != logprobs.device else mb
    mask = mb.loss_mask.to(logprobs.dtype)
    if _selects_in_loss(parts, coefs):
        mask = select_loss_tokens(mask, mb.advantages, entropy, parts.token_selection, coefs.token_keep_ratio)
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
    loss = parts.aggregate(weight(token_loss), mask, scale)
    stats = dict(out.token_stats)
    stats["entropy"] = entropy.detach()
    if parts.kl_estimator is not None and mb.ref_logprobs is not None:
        kl = parts.kl_estimator(logprobs, mb.ref_logprobs)
        loss = loss + coefs.kl * parts.aggregate(weight(kl), mask, scale)
        stats["kl"] = kl.detach()
    if coefs.entropy:
        loss = loss - coefs.entropy * parts.aggregate(weight(entropy), mask, scale)
    mismatch = (logprobs.detach() - rollout).abs() * mb.loss_mask
    return loss, stats, mismatch, mask


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
    world = strategy.world
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    n = batch.num_samples
    if n < schedule.mini_batches:
        raise ValueError(f"train.mini_batches ({schedule.mini_batches}) exceeds this step's {n} samples")
    token_stats = TokenStats()
    losses: list[float] = []
    grad_norms: list[float] = []
    mismatch_max = 0.0
    mismatch_sum = 0.0
    mismatch_tokens = 0.0
    grad_tokens = 0.0
    signal_tokens = 0.0
    candidate_tokens = 0.0  # loss tokens before token selection, of computed and left-out samples
    skipped = 0
    zero_advantage_skipped = 0
    for epoch in range(schedule.ppo_epochs):
        order = torch.randperm(n, generator=generator) if not schedule.on_policy else torch.arange(n)
        # exactly `mini_batches` near-equal mini-batches, whatever the step's sample count (agent steps vary)
        for mini_index, mini_idx in enumerate(torch.tensor_split(order, schedule.mini_batches)):
            mini = batch.select(mini_idx)
            micro_indices, real, left_out = _micro_batches(mini, parts, coefs, schedule.micro_batch_size, world)
            if epoch == 0:
                zero_advantage_skipped += len(left_out)
            candidates = mini.loss_mask  # loss tokens before token selection (for the statistics)
            if _selects_tokens(parts, coefs) and not _selects_in_loss(parts, coefs):
                mini = mini.replace(
                    loss_mask=_batch_token_mask(model, mini, micro_indices, parts, coefs.token_keep_ratio, world)
                )
            scale = _global_scale(mini, micro_indices[:real], parts, coefs, world)
            candidate_tokens += float(candidates.sum())
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            offending: list[int] = []  # trajectories of micro-batches whose loss is not finite
            first_pass = epoch == 0 and mini_index == 0
            # one cast of the output projection's weight per optimizer step (it changes only at the step); with one
            # process its weight gradient is added into .grad by its backward (no [V, H] buffer held by autograd)
            in_place = accumulating_weight_gradient_in_place() if strategy.gradients_written_in_place else nullcontext()
            with reusing_weight_casts(), in_place:
                for k, micro_idx in enumerate(micro_indices):
                    mb = mini.select(micro_idx).trimmed()
                    with strategy.accumulating(model, sync=k == len(micro_indices) - 1), world.phase("update: backward"):
                        with autocast(parts.precision, _device(model)):
                            loss, stats, mismatch, in_loss = micro_batch_loss(
                                model, mb, parts, scale, coefs, old_from_current=schedule.old_from_current_forward
                            )
                        weight = strategy.gradient_scale if k < real else 0.0
                        (loss * weight if weight != 1.0 else loss).backward()
                    if k >= real:
                        continue
                    in_loss, mismatch = in_loss.cpu(), mismatch.cpu()
                    if trained_tokens is not None and epoch == 0:
                        trained_tokens.record(mini_idx[micro_idx.cpu()], in_loss)
                    stats = {name: v.cpu() for name, v in stats.items()}
                    total += float(loss.detach())
                    if not math.isfinite(float(loss.detach())):
                        offending += mb.trajectory_index.tolist()
                    token_stats.add(stats, candidates[micro_idx][:, : mb.loss_mask.shape[1]].float())
                    grad_tokens += float(in_loss.sum())
                    signal_tokens += tokens_with_signal(in_loss, mb.advantages)
                    if first_pass:  # before any optimizer step: a clean rollout-vs-training comparison
                        mismatch_max = max(mismatch_max, float(mismatch.max()) if mismatch.numel() else 0.0)
                        mismatch_sum += float(mismatch.sum())
                        mismatch_tokens += float(mb.loss_mask.sum())
            grad_tokens += _loss_token_count(mini.loss_mask[left_out], parts, coefs)  # in the loss, zero gradient
            if trained_tokens is not None and epoch == 0 and len(left_out):
                trained_tokens.record(mini_idx[left_out.cpu()], _left_out_loss_mask(mini.select(left_out), parts, coefs))
            if not micro_indices:  # no sample of any rank has a signal: the gradient is zero, the optimizer still steps
                for p in params:
                    p.grad = torch.zeros_like(p)
            max_norm = schedule.max_grad_norm if schedule.max_grad_norm is not None else float("inf")
            with world.phase("update: gradient norm"):
                grad_norm = strategy.clip_grad_norm(params, max_norm)
            if world.any(bool(offending), "update: non-finite check") or not math.isfinite(grad_norm):
                optimizer.zero_grad(set_to_none=True)  # this mini-batch never happened
                skipped += 1
                ids = sorted(set(sum(world.gather_objects(offending, "update: non-finite samples"), [])))
                log.warning(
                    "non-finite %s: optimizer step skipped (epoch %d, mini-batch %d); trajectories %s",
                    "loss" if ids else f"gradient norm ({grad_norm})", epoch, mini_index, ids[:50] or "(all)",
                )
            else:
                optimizer.step()
                scheduler.step()
            losses.append(total)
            grad_norms.append(grad_norm)
    optimizer.zero_grad(set_to_none=True)  # no gradients held through the next generation phase
    if world.distributed:  # the run's numbers, not this rank's: sums over ranks, the largest mismatch
        token_stats = token_stats.summed_over(world)
        losses = world.sum_floats(losses, "update: metrics")
        mismatch_sum, mismatch_tokens, grad_tokens, signal_tokens, candidate_tokens, zero_advantage_skipped = (
            world.sum_floats([mismatch_sum, mismatch_tokens, grad_tokens, signal_tokens, candidate_tokens,
                              float(zero_advantage_skipped)], "update: metrics")
        )
        mismatch_max = max(world.gather_objects(mismatch_max, "update: metrics"))
    means = token_stats.means()
    if not token_stats.sums:  # no sample was computed: the statistics were not measured
        means = {name: float("nan") for name in loss_statistic_names(parts)}
    metrics = {
        "loss": sum(losses) / len(losses),
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "grad_norm_max": max(grad_norms),
        "lr": scheduler.get_last_lr()[0],
        "entropy": means.pop("entropy", float("nan")),
        "logprob_mismatch_max": mismatch_max,
        "logprob_mismatch_mean": mismatch_sum / max(mismatch_tokens, 1.0),
        "trained_tokens": token_stats.tokens,
        "grad_tokens": grad_tokens,
        "grad_tokens_with_signal": signal_tokens,
        "skipped_optimizer_steps": float(skipped),
        "zero_advantage_samples_skipped": float(zero_advantage_skipped),
    }
    if _selects_tokens(parts, coefs):
        metrics["selection/token_keep_ratio"] = coefs.token_keep_ratio
        metrics["selection/kept_tokens_frac"] = grad_tokens / max(candidate_tokens, 1.0)
    if "kl" in means:
        metrics["kl"] = means.pop("kl")
    metrics.update({f"{k}_frac" if k.startswith(("clip", "dual")) else k: v for k, v in means.items()})
    return metrics
