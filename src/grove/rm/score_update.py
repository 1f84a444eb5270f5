"""The reward model's update: one optimizer step on a step's examples, accumulated over micro-batches.

:class:`ScoreUpdate` is an :class:`grove.pipeline.update_seam.Updater`, built once per run and called by the trainer's
loop as the policy's update is; its loss is :class:`ScoreLoss`. The step's
counts (its pairs, or each head's labels) are summed over the ranks first and every micro-batch's loss is divided by
them (:mod:`grove.rm.objectives`), so the accumulated gradient is that of the step's mean loss whatever the
micro-batch size or the number of ranks; each rank's loss is multiplied by the strategy's ``gradient_scale`` (the
wrappers average gradients), and every rank runs as many micro-batches (a rank with fewer repeats its last one with
the loss multiplied by 0: FSDP2 all-gathers parameters in every forward). A micro-batch holds
``train.micro_batch_size`` examples (pairs, or labelled completions); a pair's two sequences are never split. The
gradient norm is clipped to ``train.max_grad_norm``; a step whose loss or norm is not finite on any rank does not
step the optimizer (``skipped_optimizer_steps``), as in the policy update.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from grove.batch import RolloutBatch
from grove.infra.precision import autocast
from grove.pipeline.loss_token_filter import LossTokenFilter
from grove.pipeline.update_seam import Coefficients, UpdateContext, UpdateOutcome
from grove.rm.objectives import bradley_terry_loss, regression_loss
from grove.rm.score_batches import example_rows, pair_rows

__all__ = ["ScoreLoss", "ScoreUpdate", "sequence_scores"]

log = logging.getLogger(__name__)


def sequence_scores(model: nn.Module, batch: RolloutBatch) -> Tensor:
    """``[N, heads]`` scores of the batch's sequences under the score module ``model`` (possibly wrapped)."""
    device = next(model.parameters()).device
    scores = model(batch.input_ids.to(device), batch.attention_mask.to(device))
    if not torch.is_grad_enabled():
        from torch.distributed.fsdp import FSDPModule

        if isinstance(model, FSDPModule):  # a no-grad forward leaves the root gathered, expecting a backward
            model.reshard()
    return scores


@dataclass(frozen=True)
class ScoreLoss:
    """The loss of a reward model (see the module docstring): ``pairwise`` for Bradley–Terry pairs (with
    ``center_rewards_coefficient``), else per-head regression; ``precision`` is ``train.precision``."""

    pairwise: bool
    center_rewards_coefficient: float
    precision: str

    def loss(self, scores: Tensor, targets: Tensor, groups: Tensor, scale: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The loss of rows with ``scores``, ``targets`` and example ``groups`` (a batch's ``rewards`` and
        ``group_index``) divided by the step's counts ``scale``, and its sums for the step's metrics."""
        targets = targets.to(scores.device)
        if self.pairwise:
            chosen, rejected = pair_rows(groups)
            r_c, r_r = scores[chosen, 0], scores[rejected, 0]
            loss = bradley_terry_loss(r_c, r_r, targets[chosen, 0], self.center_rewards_coefficient, float(scale))
            r_c, r_r = r_c.detach(), r_r.detach()
            return loss, {"pairs_correct": float((r_c > r_r).sum()), "margin_sum": float((r_c - r_r).sum())}
        present = ~torch.isnan(targets)
        errors = torch.where(present, scores.detach() - torch.nan_to_num(targets), 0.0) ** 2
        return regression_loss(scores, targets, scale.to(scores.device)), {"squared_error_sum": float(errors.sum())}


class ScoreUpdate:
    """The reward model's :class:`grove.pipeline.update_seam.Updater`: ``score_loss`` over micro-batches of
    ``micro_batch_size`` examples, the gradient norm clipped to ``max_grad_norm``, one optimizer step per step."""

    def __init__(
        self, context: UpdateContext, score_loss: ScoreLoss, micro_batch_size: int, max_grad_norm: float | None
    ) -> None:
        self.context = context
        self.score_loss = score_loss
        self.micro_batch_size = micro_batch_size
        self.max_grad_norm = max_grad_norm
        self.world = context.strategy.world

    def step(self, batch: RolloutBatch, coefficients: Coefficients, tokens: LossTokenFilter) -> UpdateOutcome:
        """One optimizer step on this rank's share of the step (``coefficients`` and ``tokens`` are the policy's: a
        score has no tokens to filter); the step's metrics, over all ranks."""
        self.context.model.train()
        units = example_rows(batch.group_index)
        if self.score_loss.pairwise:
            local_counts = [float(len(units))]
        else:
            local_counts = (~torch.isnan(batch.rewards)).sum(0).double().tolist()
        counts = torch.tensor(self.world.sum_floats(local_counts, "update: loss scale"), dtype=torch.float64)
        scale = counts.float() if not self.score_loss.pairwise else counts[0]
        self.context.optimizer.zero_grad(set_to_none=True)
        loss_total, tokens_seen, sums = self._accumulate(batch, units, scale)
        names = sorted(sums)
        loss_total, tokens_seen, *summed = self.world.sum_floats(
            [loss_total, tokens_seen, *(sums[n] for n in names)], "update: metrics"
        )
        skipped, grad_norm = self._clipped_step(loss_total)
        metrics = {
            "loss": loss_total, "grad_norm": grad_norm, "lr": self.context.scheduler.get_last_lr()[0],
            "skipped_optimizer_steps": float(skipped), "trained_tokens": tokens_seen,
        }
        metrics.update(self._objective_metrics(dict(zip(names, summed, strict=True)), counts))
        return UpdateOutcome(metrics)

    def _accumulate(
        self, batch: RolloutBatch, units: list[Tensor], scale: Tensor
    ) -> tuple[float, float, dict[str, float]]:
        """This rank's micro-batches' gradients accumulated (with weight-0 passes so that every rank runs as many);
        their loss, token count and the objective's sums."""
        model, strategy = self.context.model, self.context.strategy
        size = self.micro_batch_size
        chunks = [torch.cat(units[i : i + size]) for i in range(0, len(units), size)]
        real = len(chunks)
        chunks += [chunks[-1]] * (self.world.max_int(real, "update: micro-batch count") - real)
        loss_total, tokens = 0.0, 0.0
        sums: dict[str, float] = {}
        device = next(model.parameters()).device
        for k, rows in enumerate(chunks):
            mb = batch.select(rows).trimmed()
            with strategy.accumulating(model, sync=k == len(chunks) - 1), self.world.phase("update: backward"):
                with autocast(self.score_loss.precision, device):
                    scores = sequence_scores(model, mb)
                    loss, stats = self.score_loss.loss(scores.float(), mb.rewards, mb.group_index, scale)
                weight = strategy.gradient_scale if k < real else 0.0
                (loss * weight if weight != 1.0 else loss).backward()
            if k >= real:
                continue
            loss_total += float(loss.detach())
            tokens += float(mb.attention_mask.sum())
            for name, value in stats.items():
                sums[name] = sums.get(name, 0.0) + value
        return loss_total, tokens, sums

    def _clipped_step(self, loss_total: float) -> tuple[bool, float]:
        """Clip the gradient norm and step, unless the loss or the norm is not finite; whether it was skipped, and
        the norm."""
        optimizer = self.context.optimizer
        params = [p for p in self.context.model.parameters() if p.requires_grad]
        max_norm = self.max_grad_norm if self.max_grad_norm is not None else float("inf")
        with self.world.phase("update: gradient norm"):
            grad_norm = self.context.strategy.clip_grad_norm(params, max_norm)
        skipped = not math.isfinite(loss_total) or not math.isfinite(grad_norm)
        if skipped:
            log.warning("non-finite %s: optimizer step skipped", "loss" if not math.isfinite(loss_total) else
                        f"gradient norm ({grad_norm})")
        else:
            optimizer.step()
            self.context.scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return skipped, grad_norm

    def _objective_metrics(self, sums: dict[str, float], counts: Tensor) -> dict[str, float]:
        if self.score_loss.pairwise:
            pairs = float(counts[0])
            return {"train_pairwise_accuracy": sums["pairs_correct"] / max(pairs, 1.0),
                    "train_margin_mean": sums["margin_sum"] / max(pairs, 1.0), "trained_pairs": pairs}
        labels = float(counts.sum())
        return {"train_mse": sums["squared_error_sum"] / max(labels, 1.0), "trained_labels": labels}
