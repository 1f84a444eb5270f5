"""What an update counts: its running totals and metrics (:class:`UpdateTotals`) and the per-token statistics summed
over loss tokens (:class:`TokenStats`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from grove.batch import RolloutBatch
from grove.distributed.world import World
from grove.pipeline.loss_token_filter import LossTokenFilter, tokens_with_signal

__all__ = ["TokenStats", "UpdateTotals"]


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


@dataclass
class UpdateTotals:
    """The running totals of one update, over its epochs, mini-batches and micro-batches (this rank's until
    :meth:`summed_over_ranks`); :meth:`metrics` turns them into the step's update metrics."""

    token_stats: TokenStats = field(default_factory=TokenStats)
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    mismatch_max: float = 0.0
    mismatch_sum: float = 0.0
    mismatch_tokens: float = 0.0
    grad_tokens: float = 0.0  # tokens in the loss (after token selection), computed or left out
    signal_tokens: float = 0.0
    candidate_tokens: float = 0.0  # loss tokens before token selection, of computed and left-out samples
    skipped_steps: int = 0
    zero_advantage_skipped: float = 0.0

    def add_micro_batch(
        self, mb: RolloutBatch, stats: dict[str, Tensor], candidates: Tensor, in_loss: Tensor, mismatch: Tensor,
        first_pass: bool,
    ) -> None:
        """A computed micro-batch: its per-token statistics over its candidate loss tokens, its trained tokens and,
        before any optimizer step (``first_pass``), its rollout-vs-training mismatch."""
        self.token_stats.add(stats, candidates)
        self.grad_tokens += float(in_loss.sum())
        self.signal_tokens += tokens_with_signal(in_loss, mb.advantages)
        if first_pass:  # before any optimizer step: a clean rollout-vs-training comparison
            self.mismatch_max = max(self.mismatch_max, float(mismatch.max()) if mismatch.numel() else 0.0)
            self.mismatch_sum += float(mismatch.sum())
            self.mismatch_tokens += float(mb.loss_mask.sum())

    def summed_over_ranks(self, world: World) -> None:
        """The run's numbers, not this rank's: sums over ranks, the largest mismatch."""
        if not world.distributed:
            return
        self.token_stats = self.token_stats.summed_over(world)
        self.losses = world.sum_floats(self.losses, "update: metrics")
        (self.mismatch_sum, self.mismatch_tokens, self.grad_tokens, self.signal_tokens, self.candidate_tokens,
         self.zero_advantage_skipped) = world.sum_floats(
            [self.mismatch_sum, self.mismatch_tokens, self.grad_tokens, self.signal_tokens, self.candidate_tokens,
             self.zero_advantage_skipped], "update: metrics"
        )
        self.mismatch_max = max(world.gather_objects(self.mismatch_max, "update: metrics"))

    def metrics(
        self, lr: float, tokens: LossTokenFilter, statistic_names: Callable[[], list[str]]
    ) -> dict[str, float]:
        """The update's metrics; ``statistic_names``: the policy loss's statistics, logged as NaN when no sample was
        computed."""
        means = self.token_stats.means()
        if not self.token_stats.sums:  # no sample was computed: the statistics were not measured
            means = {name: float("nan") for name in statistic_names()}
        metrics = {
            "loss": sum(self.losses) / len(self.losses),
            "grad_norm": sum(self.grad_norms) / len(self.grad_norms),
            "grad_norm_max": max(self.grad_norms),
            "lr": lr,
            "entropy": means.pop("entropy", float("nan")),
            "logprob_mismatch_max": self.mismatch_max,
            "logprob_mismatch_mean": self.mismatch_sum / max(self.mismatch_tokens, 1.0),
            "trained_tokens": self.token_stats.tokens,
            "grad_tokens": self.grad_tokens,
            "grad_tokens_with_signal": self.signal_tokens,
            "skipped_optimizer_steps": float(self.skipped_steps),
            "zero_advantage_samples_skipped": float(self.zero_advantage_skipped),
        }
        metrics.update(tokens.metrics(self.grad_tokens, self.candidate_tokens))
        if "kl" in means:
            metrics["kl"] = means.pop("kl")
        metrics.update({f"{k}_frac" if k.startswith(("clip", "dual")) else k: v for k, v in means.items()})
        return metrics
