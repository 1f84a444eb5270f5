"""One step's experience: prompts → G completions each → rewards → typed batch → advantages.

Order of operations (each optional stage is a config setting, not a trainer branch):

1. generate and score ``prompts_per_step`` groups (one *round*): the named reward matrix ``[N, K]`` (one
   column per objective) and its weights go into the batch; DAPO's soft overlong punishment is added as
   the column ``overlong_penalty``. A sample no weighted column applies to (every weighted reward returned
   ``None`` for it, or failed on it with ``on_error: skip``) cannot be scored and leaves the round (its group
   keeps its other samples; ``reward_excluded_samples``); a round left with none is an error, and so is a
   sample whose weighted rewards overflow float32;
2. DAPO dynamic sampling: keep only groups that carry signal under the reward aggregator (some column of
   its ``signal`` varies: the combined score for per-sample aggregators, every weighted objective for
   GDPO/MO-GRPO) and draw further rounds until ``prompts_per_step`` such groups exist or ``max_rounds`` is
   reached; missing groups are then filled with the signal-free groups of the last round (they carry no
   advantage; the number is logged as ``dynamic_sampling_filled_groups``);
3. DAPO overlong filtering: truncated completions get an all-zero ``loss_mask``;
4. the reward aggregator (``algorithm.reward_aggregation``) turns the final batch's objectives into one
   score per sample (batch-level renormalisations therefore see exactly the trained batch);
5. reference log-probs (when a reference model is loaded) and, with ``kl.placement: reward``, ``β·Σ_t KL_t`` subtracted
   from each sample's score;
6. advantages from the registered estimator, then per-objective statistics (``objective/*``).

With several ranks (:mod:`grove.distributed`), each rank draws the same ``prompts_per_step`` prompts from the
shared sampler and generates, scores and (with dynamic sampling) filters only its own share of the groups;
rounds continue until every rank has its share. Reference log-probs are computed on each rank's own
samples; then the batch is gathered (:func:`grove.distributed.batch_exchange.gather_batch`) and stages 4-6 run
on the whole step's batch, so batch-level statistics equal their single-process values.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch, concat_batches
from grove.core.advantages import AdvantageFn, run_estimator
from grove.core.objectives import AggregateFn, informative_from_signal, objective_statistics, run_aggregator
from grove.core.objectives.pointwise import sum_then_normalize
from grove.core.shaping import soft_overlong_penalty
from grove.core.token_ops import row_mean
from grove.distributed.batch_exchange import gather_batch
from grove.distributed.world import World
from grove.pipeline.round_scores import RoundScores, check_weighted_sums, nothing_to_train_on, say_left_out
from grove.rewards.scoring import RewardFunctionError, RewardSpec, compute_rewards, reward_columns
from grove.rollout.engine import RolloutEngine, RolloutOutput, SamplingParams
from grove.tasks.task import Example, columns_for_rewards

OVERLONG_REWARD = "overlong_penalty"

#: draws the next ``count`` training examples and their prompt token ids
PromptSource = Callable[[int], tuple[list[Example], list[list[int]]]]


@dataclass(frozen=True)
class ExperienceSettings:
    groups: int
    completions_per_group: int
    sampling: SamplingParams
    rewards: Sequence[RewardSpec]
    advantage_fn: AdvantageFn
    advantage_params: BaseModel
    max_rounds: int = 1  # > 1: DAPO dynamic sampling
    overlong_filter: bool = False
    overlong_cache_tokens: int | None = None  # set: DAPO soft overlong punishment
    overlong_max_penalty: float = 1.0
    greedy_baseline: bool = False  # one extra greedy completion per prompt, scored (e.g. ReMax)
    pad_token_id: int = 0
    aggregator: AggregateFn = sum_then_normalize
    aggregator_params: BaseModel | None = None  # None: the aggregator takes no parameters (sum_then_normalize)
    world: World = field(default_factory=World)  # the ranks the step's groups are shared among
    notices: set[str] = field(default_factory=set, compare=False, repr=False)  # once-per-run warnings already given


@dataclass(frozen=True)
class KLInReward:
    estimator: Callable[[Tensor, Tensor], Tensor]
    coef: float


@dataclass(frozen=True)
class StepExperience:
    """One step's experience, whatever its source: the batch (with advantages), the scores they came from,
    generation time and tokens, statistics for the step's metrics, and the samples written to samples.jsonl.

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


@dataclass(frozen=True)
class _Round:
    batch: RolloutBatch
    seconds: float
    tokens: int


def _score(
    out: RolloutOutput,
    examples: list[Example],
    s: ExperienceSettings,
    step: int,
    stats: dict[str, float] | None = None,
) -> RoundScores:
    """Score an engine output with every reward (their failure counts are added to ``stats``).

    Raises:
        RewardFunctionError: a reward failed with ``on_error: raise``, or a sample's weighted rewards overflow
            float32 (:func:`grove.pipeline.round_scores.check_weighted_sums`).
    """
    rows = [examples[i] for i in out.prompt_index.tolist()]
    prompts = [e.prompt_text for e in rows]
    columns = columns_for_rewards(rows)
    skipped: set[int] = set()
    rewards = compute_rewards(s.rewards, prompts, out.texts, columns, step=step, stats=stats, skipped=skipped)
    names_, weights_ = reward_columns(s.rewards)
    names, weights = list(names_), list(weights_)
    active = torch.tensor(weights_, dtype=torch.float64) != 0
    unscorable = torch.isnan(rewards[:, active]).all(dim=1)  # True for every sample when no column is weighted
    if s.overlong_cache_tokens is not None:
        penalty = soft_overlong_penalty(
            out.response_mask.sum(1),
            max_length=s.sampling.max_new_tokens,
            cache_length=s.overlong_cache_tokens,
            max_penalty=s.overlong_max_penalty,
        )
        rewards = torch.cat([rewards, penalty[:, None]], dim=1)
        names.append(OVERLONG_REWARD)
        weights.append(1.0)
        unscorable[:] = False  # the overlong column applies to every sample
    check_weighted_sums(rewards, names, weights, prompts, out.texts, step)
    return RoundScores(rewards, names, weights, prompts, unscorable, frozenset(skipped))


def aggregate(batch: RolloutBatch, s: ExperienceSettings):
    """The reward aggregator's output on ``batch`` (scores, per-objective contributions, signal columns)."""
    return run_aggregator(s.aggregator, batch, s.aggregator_params)


def _sample_round(
    engine: RolloutEngine,
    examples: list[Example],
    prompt_ids: list[list[int]],
    s: ExperienceSettings,
    generator: torch.Generator,
    step: int,
    group_offset: int,
    stats: dict[str, float] | None = None,
) -> _Round:
    out = engine.generate(prompt_ids, s.completions_per_group, s.sampling, generator)
    scored = _score(out, examples, s, step, stats)
    rewards, names, weights, prompts, unscorable = (
        scored.rewards, scored.names, scored.weights, scored.prompts, scored.unscorable
    )
    seconds, tokens = out.seconds, out.num_generated_tokens
    baseline = None
    if s.greedy_baseline:  # per-sample aggregators only (config validation): each greedy sample is its own group
        greedy_sampling = dataclasses.replace(s.sampling, temperature=0.0, top_k=0, top_p=1.0)
        greedy = engine.generate(prompt_ids, 1, greedy_sampling, generator)
        g = _score(greedy, examples, s, step, stats)
        g_rewards = g.rewards
        g_rewards[g.unscorable] = torch.nan_to_num(g_rewards[g.unscorable], nan=0.0)  # unscorable baseline: 0
        baseline = run_aggregator(s.aggregator, _reward_only_batch(g_rewards, names, weights), s.aggregator_params)
        baseline = baseline.scores[out.prompt_index]
        seconds, tokens = seconds + greedy.seconds, tokens + greedy.num_generated_tokens
    num = out.num_samples
    response_mask = out.response_mask.bool()
    batch = RolloutBatch(
        prompt_ids=out.prompt_ids,
        prompt_mask=out.prompt_mask.bool(),
        response_ids=out.response_ids,
        response_mask=response_mask,
        loss_mask=response_mask.clone(),
        old_logprobs=out.logprobs.float(),
        rewards=rewards,
        reward_names=tuple(names),
        reward_weights=tuple(weights),
        group_index=out.prompt_index.long() + group_offset,
        trajectory_index=torch.arange(num) + group_offset * s.completions_per_group,
        step_index=torch.zeros(num, dtype=torch.long),
        truncated=out.truncated,
        baseline_scores=baseline,
        metadata=tuple(
            {"prompt": prompts[k], "completion": out.texts[k], "finish_reason": out.finish_reasons[k]}
            for k in range(num)
        ),
    )
    if stats is not None:
        stats["reward_excluded_samples"] = stats.get("reward_excluded_samples", 0.0) + float(unscorable.sum())
    if bool(unscorable.any()):  # no weighted reward applies to them: leave them out of the step
        if bool(unscorable.all()):
            raise RewardFunctionError(nothing_to_train_on(s.rewards, scored, step))
        say_left_out(s.rewards, s.notices, scored, step)
        batch = batch.select((~unscorable).nonzero().flatten())
    return _Round(batch, seconds, tokens)


def _reward_only_batch(rewards: Tensor, names: list[str], weights: list[float]) -> RolloutBatch:
    """A batch holding just ``rewards`` (one sample per group), for scoring with a per-sample aggregator."""
    n = rewards.shape[0]
    empty = torch.zeros(n, 0, dtype=torch.long)
    return RolloutBatch(
        prompt_ids=empty, prompt_mask=empty.bool(), response_ids=empty, response_mask=empty.bool(),
        loss_mask=empty.bool(), old_logprobs=empty.float(), rewards=rewards, reward_names=tuple(names),
        reward_weights=tuple(weights), group_index=torch.arange(n), trajectory_index=torch.arange(n),
        step_index=torch.zeros(n, dtype=torch.long), truncated=torch.zeros(n, dtype=torch.bool),
    )


def _first_groups(batch: RolloutBatch, count: int) -> RolloutBatch:
    """The samples of the first ``count`` distinct groups, in order."""
    _, first_seen = torch.unique_consecutive(batch.group_index, return_inverse=True)
    keep = (first_seen < count).nonzero().flatten()
    return batch.select(keep)


def collect_experience(
    engine: RolloutEngine,
    draw: PromptSource,
    s: ExperienceSettings,
    generator: torch.Generator,
    *,
    step: int,
    reference: Callable[[RolloutBatch], Tensor] | None = None,
    kl_in_reward: KLInReward | None = None,
) -> StepExperience:
    start, end = s.world.shard(s.groups)
    groups = end - start  # this rank's share of the step's groups
    kept: list[RolloutBatch] = []  # the samples of the groups kept so far
    kept_groups = 0
    seconds = 0.0
    tokens = 0
    rounds = 0
    last: _Round | None = None
    stats: dict[str, float] = {}
    while rounds < s.max_rounds and s.world.any(kept_groups < groups, "rollout: dynamic sampling"):
        examples, prompt_ids = draw(s.groups)  # every rank draws, so the sampler stays the same on all ranks
        rounds += 1
        if kept_groups >= groups:
            continue  # this rank is full; others are still drawing rounds
        last = _sample_round(
            engine, examples[start:end], prompt_ids[start:end], s, generator, step, group_offset=(rounds - 1) * groups,
            stats=stats,
        )
        seconds += last.seconds
        tokens += last.tokens
        if s.max_rounds == 1:
            kept.append(last.batch)
            kept_groups = groups
            break
        informative = _informative(last.batch, s).nonzero().flatten()
        if len(informative):
            kept.append(last.batch.select(informative))
            kept_groups += _count_groups(last.batch.group_index[informative])
    filled = 0
    if kept_groups < groups:  # out of rounds: top up with the last round's uninformative groups
        assert last is not None
        rest = (~_informative(last.batch, s)).nonzero().flatten()
        filled = min(groups - kept_groups, _count_groups(last.batch.group_index[rest]))
        kept.append(last.batch.select(rest))
    batch = _first_groups(concat_batches(kept, pad_token_id=s.pad_token_id), groups)

    if s.max_rounds > 1:
        stats["dynamic_sampling_rounds"] = float(rounds)
        stats["dynamic_sampling_filled_groups"] = float(filled)
    if s.overlong_filter:
        batch = batch.replace(loss_mask=batch.loss_mask & ~batch.truncated[:, None])
    batch = with_reference_logprobs(batch, reference)
    batch, local_rows, _ = gather_batch(s.world, batch, s.pad_token_id)
    if s.overlong_filter:
        stats["overlong_filtered_fraction"] = float(batch.truncated.float().mean())
    aggregated = aggregate(batch, s)
    scores = kl_penalised_scores(batch, aggregated.scores, kl_in_reward, stats)
    batch, scores = with_advantages(batch, scores, s.advantage_fn, s.advantage_params, stats)
    if batch.rewards.shape[1] > 1:
        sequence_advantages = row_mean(batch.advantages, batch.policy_token_mask)
        stats.update(objective_statistics(batch, aggregated, sequence_advantages, batch.reward_names))
    return StepExperience(batch, scores, seconds, tokens, stats, local_rows=local_rows)


def _count_groups(group_index: Tensor) -> int:
    """The number of distinct groups among samples (a group may have lost samples no reward applies to)."""
    return int(torch.unique(group_index).numel())


def _informative(batch: RolloutBatch, s: ExperienceSettings) -> Tensor:
    """``bool [N]``: the sample's group carries signal under the reward aggregator (component-aware)."""
    return informative_from_signal(aggregate(batch, s).signal, batch.group_index)


def with_reference_logprobs(batch: RolloutBatch, reference: Callable[[RolloutBatch], Tensor] | None) -> RolloutBatch:
    """The batch with its reference log-probs (when a reference policy is loaded)."""
    return batch if reference is None else batch.replace(ref_logprobs=reference(batch))


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


def with_advantages(
    batch: RolloutBatch, scores: Tensor, fn: AdvantageFn, params: BaseModel, stats: dict[str, float]
) -> tuple[RolloutBatch, Tensor]:
    """The batch with the estimator's advantages; the estimator's statistics go to ``stats`` as ``advantage/*``,
    its wall-clock seconds as ``advantage_seconds``."""
    start = time.perf_counter()
    out = run_estimator(fn, batch, scores, params)
    stats["advantage_seconds"] = time.perf_counter() - start
    stats.update({f"advantage/{k}": v for k, v in out.stats.items()})
    return batch.replace(advantages=out.advantages), scores
