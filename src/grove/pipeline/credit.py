"""Credit assignment: what turns a step's scored experience into advantages, the same for every source.

An experience source returns :class:`ScoredExperience`: this rank's samples with their rewards (``[N, K]``, one
column per objective), the step table of agent experience, timings, statistics and the samples to log. The trainer
then runs :class:`CreditAssignment` on it, in this order:

1. reference log-probs of this rank's samples (when a reference policy is loaded);
2. the step's batch gathered over the ranks (:func:`grove.distributed.batch_exchange.gather_batch`), so every
   batch-level statistic below equals its single-process value;
3. one score per sample: the source's own (an agent's episode return minus its penalties), or the reward
   combiner's score of the batch's objectives (``algorithm.reward_combination``: the renormalisations of
   GDPO and MO-GRPO see exactly the trained batch);
4. with ``kl.placement: reward``, ``β·Σ_t KL_t`` over each sample's policy tokens subtracted from its score;
5. advantages from the registered estimator (``algorithm.advantage``; a step-level estimator's parts, GiGPO's A^E
   and ω·A^S, become ``advantage_<part>`` columns of the step table), then, with several objectives, the
   per-objective statistics (``objective/*``).

Any credit step is a :class:`Credit`: it also says what the step's metrics record of the experience it scored
(rewards, advantages and lengths here; :class:`grove.pipeline.supervised_targets.SupervisedTargets` is the credit
of demonstrations, whose targets are their own tokens).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.advantages import AdvantageFn, run_estimator
from grove.core.objectives import CombineFn, CombineOutput, objective_statistics, run_combiner
from grove.core.objectives.resolution import advantage_resolution
from grove.core.token_ops import row_mean
from grove.distributed.batch_exchange import gather_batch
from grove.distributed.world import World
from grove.pipeline.step_metrics import step_metrics

__all__ = ["Credit", "CreditAssignment", "KLInReward", "ScoredExperience", "StepExperience", "kl_penalised_scores"]


@dataclass(frozen=True)
class KLInReward:
    """``kl.placement: reward``: the KL estimator and this step's coefficient β."""

    estimator: Callable[[Tensor, Tensor], Tensor]
    coef: float


@dataclass(frozen=True)
class ScoredExperience:
    """What an experience source returns for a step: this rank's samples, scored, before credit.

    ``batch`` holds the rewards ``[N, K]`` (and the step table of agent experience); ``scores`` is the source's own
    score per sample (an agent's episode return minus its penalties), or ``None`` to combine the batch's objectives
    with the reward combiner. ``samples`` are the records written to ``samples.jsonl``, or ``None`` for each
    sample's prompt, completion and rewards, read from the step's gathered batch. ``stats`` go to the step's
    metrics as they are."""

    batch: RolloutBatch
    generation_seconds: float
    generated_tokens: int
    stats: dict[str, float] = field(default_factory=dict)
    samples: list[dict] | None = None
    scores: Tensor | None = None


@dataclass(frozen=True)
class StepExperience:
    """One step's experience after credit: the batch (with advantages), the scores they came from, generation time
    and tokens, statistics for the step's metrics, and the samples written to samples.jsonl.

    With several ranks ``batch`` and ``scores`` hold the whole step (every rank's samples, identical on all
    ranks) and ``local_rows`` the rows this rank generated and trains on; ``None`` means all of them."""

    batch: RolloutBatch
    scores: Tensor  # [N] the scalar reward the advantages were computed from
    generation_seconds: float
    generated_tokens: int
    stats: dict[str, float] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    local_rows: Tensor | None = None

    def with_samples(self, samples: list[dict]) -> StepExperience:
        return dataclasses.replace(self, samples=samples)


class Credit(Protocol):
    """Turns a step's scored experience into the experience the update trains on."""

    def __call__(self, scored: ScoredExperience) -> StepExperience: ...

    def step_metrics(self, exp: StepExperience) -> dict[str, float]:
        """What the step's metrics record of ``exp``."""
        ...


@dataclass(frozen=True)
class CreditAssignment:
    """Reference → gather → score → KL in reward → estimator → objective statistics (the module docstring); built
    once by the trainer from the config. ``kl_in_reward`` gives this step's setting (its coefficient can change
    between steps; ``None`` unless ``kl.placement: reward``). ``samples_per_step``: how many samples a step logs
    when the source leaves them to the batch; ``accuracy_reward``: the objective whose share of
    full marks is logged as ``accuracy``."""

    advantage_fn: AdvantageFn
    advantage_params: BaseModel
    combiner: CombineFn
    combiner_params: BaseModel | None
    reference: Callable[[RolloutBatch], Tensor] | None = None
    kl_in_reward: Callable[[], KLInReward | None] = lambda: None
    world: World = field(default_factory=World)
    pad_token_id: int = 0
    samples_per_step: int = 0
    accuracy_reward: str = "accuracy"

    def __call__(self, scored: ScoredExperience) -> StepExperience:
        stats = dict(scored.stats)
        batch = scored.batch if self.reference is None else scored.batch.replace(ref_logprobs=self.reference(scored.batch))
        batch, local_rows, scores = gather_batch(self.world, batch, self.pad_token_id, scored.scores)
        combined = None
        if scores is None:
            combined = run_combiner(self.combiner, batch, self.combiner_params)
            scores = combined.scores
        scores = kl_penalised_scores(batch, scores, self.kl_in_reward(), stats)
        start = time.perf_counter()
        out = run_estimator(self.advantage_fn, batch, scores, self.advantage_params)
        stats["advantage_seconds"] = time.perf_counter() - start
        stats.update({f"advantage/{k}": v for k, v in out.stats.items()})
        batch = out.applied_to(batch)
        if combined is not None and batch.rewards.shape[1] > 1:
            stats.update(_objective_statistics(batch, combined))
        samples = scored.samples if scored.samples is not None else self._batch_samples(batch)
        return StepExperience(
            batch, scores, scored.generation_seconds, scored.generated_tokens, stats, samples, local_rows=local_rows
        )

    def step_metrics(self, exp: StepExperience) -> dict[str, float]:
        """Rewards, advantages and lengths of all the step's rollouts (:func:`grove.pipeline.step_metrics.step_metrics`)
        and the generation's throughput."""
        metrics = step_metrics(exp, exp.batch, accuracy_reward=self.accuracy_reward)
        metrics["generated_tokens_per_second"] = exp.generated_tokens / max(exp.generation_seconds, 1e-9)
        return metrics

    def _batch_samples(self, batch: RolloutBatch) -> list[dict]:
        """Each logged sample's metadata (prompt, completion, finish reason) and its rewards by name."""
        return [
            {**meta, "rewards": dict(zip(batch.reward_names, batch.rewards[k].tolist(), strict=True))}
            for k, meta in enumerate(batch.metadata[: self.samples_per_step])
        ]


def _objective_statistics(batch: RolloutBatch, combined: CombineOutput) -> dict[str, float]:
    """The per-objective statistics and the signal's resolution (distinct advantages per reward combination)."""
    sequence_advantages = row_mean(batch.advantages, batch.policy_token_mask)
    return {
        **objective_statistics(batch, combined, sequence_advantages, batch.reward_names),
        **advantage_resolution(batch.rewards, sequence_advantages, batch.group_index),
    }


def kl_penalised_scores(
    batch: RolloutBatch, scores: Tensor, kl_in_reward: KLInReward | None, stats: dict[str, float]
) -> Tensor:
    """With ``kl.placement: reward``, each sample's score minus ``β·Σ_t KL_t`` over its policy tokens
    (environment tokens carry no KL); otherwise the scores unchanged."""
    if kl_in_reward is None or batch.ref_logprobs is None:
        return scores
    mask = batch.policy_token_mask
    per_token = kl_in_reward.estimator(batch.old_logprobs, batch.ref_logprobs) * mask
    stats["kl_in_reward"] = float(per_token.sum() / mask.sum().clamp_min(1))
    return scores - kl_in_reward.coef * per_token.sum(1)
