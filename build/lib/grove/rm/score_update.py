"""The reward model's update: one optimizer step on a step's examples, accumulated over micro-batches.

It takes the place of :func:`grove.pipeline.update.policy_update` in the trainer's loop (a
:class:`grove.training.training_stage.TrainingStage` carries its update) and is called the same way. The step's
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
from typing import Any

import torch
from torch import Tensor, nn

from grove.batch import RolloutBatch
from grove.distributed.strategies import Strategy
from grove.infra.precision import autocast
from grove.rm.objectives import bradley_terry_loss, regression_loss
from grove.rm.score_batches import example_rows, pair_rows

__all__ = ["ScoreUpdate", "sequence_scores"]

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
class ScoreUpdate:
    """The update of a reward model (see the module docstring): ``pairwise`` for Bradley–Terry pairs (with
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

    def __call__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, batch: RolloutBatch, parts: Any,
        schedule: Any, generator: torch.Generator, coefs: Any = None, strategy: Strategy | None = None,
        trained_tokens: Any = None,
    ) -> dict[str, float]:
        """One optimizer step on this rank's share of the step (the policy update's signature; ``parts``,
        ``generator``, ``coefs`` and ``trained_tokens`` are not used); the step's metrics, over all ranks."""
        assert strategy is not None
        world = strategy.world
        model.train()
        units = example_rows(batch.group_index)
        if self.pairwise:
            local_counts = [float(len(units))]
        else:
            local_counts = (~torch.isnan(batch.rewards)).sum(0).double().tolist()
        counts = torch.tensor(world.sum_floats(local_counts, "update: loss scale"), dtype=torch.float64)
        size = schedule.micro_batch_size
        chunks = [torch.cat(units[i : i + size]) for i in range(0, len(units), size)]
        real = len(chunks)
        total_chunks = world.max_int(real, "update: micro-batch count")
        chunks += [chunks[-1]] * (total_chunks - real)
        scale = counts.float() if not self.pairwise else counts[0]
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer.zero_grad(set_to_none=True)
        loss_total, tokens = 0.0, 0.0
        sums: dict[str, float] = {}
        device = next(model.parameters()).device
        for k, rows in enumerate(chunks):
            mb = batch.select(rows).trimmed()
            with strategy.accumulating(model, sync=k == len(chunks) - 1), world.phase("update: backward"):
                with autocast(self.precision, device):
                    scores = sequence_scores(model, mb)
                    loss, stats = self.loss(scores.float(), mb.rewards, mb.group_index, scale)
                weight = strategy.gradient_scale if k < real else 0.0
                (loss * weight if weight != 1.0 else loss).backward()
            if k >= real:
                continue
            loss_total += float(loss.detach())
            tokens += float(mb.attention_mask.sum())
            for name, value in stats.items():
                sums[name] = sums.get(name, 0.0) + value
        names = sorted(sums)
        loss_total, tokens, *summed = world.sum_floats([loss_total, tokens, *(sums[n] for n in names)],
                                                       "update: metrics")
        sums = dict(zip(names, summed, strict=True))
        max_norm = schedule.max_grad_norm if schedule.max_grad_norm is not None else float("inf")
        with world.phase("update: gradient norm"):
            grad_norm = strategy.clip_grad_norm(params, max_norm)
        skipped = not math.isfinite(loss_total) or not math.isfinite(grad_norm)
        if skipped:
            log.warning("non-finite %s: optimizer step skipped", "loss" if not math.isfinite(loss_total) else
                        f"gradient norm ({grad_norm})")
        else:
            optimizer.step()
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        metrics = {
            "loss": loss_total, "grad_norm": grad_norm, "lr": scheduler.get_last_lr()[0],
            "skipped_optimizer_steps": float(skipped), "trained_tokens": tokens,
        }
        if self.pairwise:
            pairs = float(counts[0])
            metrics.update({"train_pairwise_accuracy": sums["pairs_correct"] / max(pairs, 1.0),
                            "train_margin_mean": sums["margin_sum"] / max(pairs, 1.0), "trained_pairs": pairs})
        else:
            labels = float(counts.sum())
            metrics.update({"train_mse": sums["squared_error_sum"] / max(labels, 1.0), "trained_labels": labels})
        return metrics
